package interop

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The guest's QEMU answers QMP on STATE/qmp.sock (guest.sh up). The suite uses it to look at
// the virtio-net TX queue when the IP path to the guest dies, and to restart that queue.
//
// What "the tap wedged" was (issue 19), seen twice in 3,214 short AF_XDP runs
// (TestPrivilegedInteropTapStress's exchange): QEMU stopped taking the guest's frames off the
// virtio-net TX virtqueue. The guest kept posting buffers (its avail index 81 ahead), while
// QEMU's last_avail, used index and avail_event (VIRTIO_RING_F_EVENT_IDX) stayed at the index
// it had last seen, with no buffer of its own in flight: a TX notification QEMU never acted on
// (lost, or never sent: the guest's kicks cannot be counted from here), after which the guest,
// finding avail_event behind its index, never notified again. Not the tap nor xdproce's
// AF_XDP rings: the tap had every frame the guest's driver counted as sent, QEMU polled it for
// input only (no write waiting), and frames to the guest still arrived. A QMP stop/cont
// restarts the queue without a lost frame (QEMU looks at its virtqueues again when the VM
// runs). Linux 6.1's virtio_net and QEMU 7.2 under TCG; guest.sh now turns event_idx off
// (notification flags, which a later notification can repair), and 6,000 runs passed
// without a stall.

// qmp is one QMP session.
type qmp struct {
	c  net.Conn
	rd *bufio.Reader
}

func (g *guest) qmp() (*qmp, error) {
	c, err := net.DialTimeout("unix", filepath.Join(g.state, "qmp.sock"), 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	q := &qmp{c: c, rd: bufio.NewReader(c)}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := q.read(); err != nil { // the greeting
		c.Close()
		return nil, err
	}
	if _, err := q.do("qmp_capabilities", nil); err != nil {
		c.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) close() { q.c.Close() }

// read returns the next reply, skipping events.
func (q *qmp) read() (map[string]json.RawMessage, error) {
	for {
		line, err := q.rd.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp: %w", err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("qmp: %w: %q", err, line)
		}
		if _, ev := m["event"]; !ev {
			return m, nil
		}
	}
}

// do runs cmd and returns its "return" value.
func (q *qmp) do(cmd string, args any) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	m, err := q.read()
	if err != nil {
		return nil, err
	}
	if e, ok := m["error"]; ok {
		return nil, fmt.Errorf("qmp %s: %s", cmd, e)
	}
	return m["return"], nil
}

// hmp runs a human monitor command.
func (q *qmp) hmp(line string) (string, error) {
	r, err := q.do("human-monitor-command", map[string]string{"command-line": line})
	if err != nil {
		return "", err
	}
	var s string
	err = json.Unmarshal(r, &s)
	return s, err
}

// u16 reads the little-endian 16-bit word at guest physical address gpa.
func (q *qmp) u16(gpa uint64) (uint16, error) {
	out, err := q.hmp(fmt.Sprintf("xp /1hx %#x", gpa))
	if err != nil {
		return 0, err
	}
	_, v, ok := strings.Cut(strings.TrimSpace(out), ": ")
	if !ok {
		return 0, fmt.Errorf("xp %#x: %q", gpa, out)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 16)
	return uint16(n), err
}

// txQueue is the virtio-net TX virtqueue as QEMU and the guest's ring show it.
type txQueue struct {
	LastAvail, Used, InUse int // QEMU's view
	AvailIdx, AvailEvent   int // the ring in guest memory: the guest's index, the event QEMU set
}

// stalled reports the wedge: buffers the guest posted that QEMU has not looked at, with
// nothing of its own in flight.
func (x txQueue) stalled() bool { return x.AvailIdx != x.LastAvail && x.InUse == 0 }

func (x txQueue) String() string {
	return fmt.Sprintf("virtio-net TX queue: guest avail idx %d, QEMU last_avail %d used %d in use %d, avail_event %d",
		x.AvailIdx, x.LastAvail, x.Used, x.InUse, x.AvailEvent)
}

// txQueue reads the virtio-net TX queue's state through QMP.
func (g *guest) txQueue() (txQueue, error) {
	var x txQueue
	q, err := g.qmp()
	if err != nil {
		return x, err
	}
	defer q.close()
	r, err := q.do("x-query-virtio", nil)
	if err != nil {
		return x, err
	}
	var devs []struct{ Name, Path string }
	if err := json.Unmarshal(r, &devs); err != nil {
		return x, err
	}
	path := ""
	for _, d := range devs {
		if d.Name == "virtio-net" {
			path = d.Path
		}
	}
	if path == "" {
		return x, errors.New("qmp: no virtio-net device")
	}
	if r, err = q.do("x-query-virtio-queue-status", map[string]any{"path": path, "queue": 1}); err != nil {
		return x, err
	}
	var st struct {
		LastAvail int    `json:"last-avail-idx"`
		Used      int    `json:"used-idx"`
		InUse     int    `json:"inuse"`
		Num       uint64 `json:"vring-num"`
		Avail     uint64 `json:"vring-avail"`
		UsedRing  uint64 `json:"vring-used"`
	}
	if err := json.Unmarshal(r, &st); err != nil {
		return x, err
	}
	x.LastAvail, x.Used, x.InUse = st.LastAvail, st.Used, st.InUse
	// avail ring: flags, idx, ring[num], used_event; used ring: flags, idx, ring[num] of 8 bytes, avail_event.
	a, err := q.u16(st.Avail + 2)
	if err != nil {
		return x, err
	}
	e, err := q.u16(st.UsedRing + 4 + 8*st.Num)
	if err != nil {
		return x, err
	}
	x.AvailIdx, x.AvailEvent = int(a), int(e)
	return x, nil
}

// unwedge restarts a stalled TX queue with a QMP stop and cont (virtio-net reschedules its
// TX work when the VM runs again) and reports whether the IP path is back; what it saw goes
// to logf.
func (g *guest) unwedge(logf func(string, ...any)) bool {
	x, err := g.txQueue()
	if err != nil {
		logf("interop: the TX queue's state: %v", err)
		return false
	}
	logf("interop: %v", x)
	if !x.stalled() {
		return false
	}
	q, err := g.qmp()
	if err != nil {
		logf("interop: %v", err)
		return false
	}
	defer q.close()
	for _, c := range []string{"stop", "cont"} {
		if _, err := q.do(c, nil); err != nil {
			logf("interop: %v", err)
			return false
		}
	}
	for range 20 {
		if g.pathOK() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
