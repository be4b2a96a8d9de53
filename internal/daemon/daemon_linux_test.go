package daemon

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// wcRec is what the script compares of a work completion.
type wcRec struct {
	ID      uint64
	Opcode  string
	Status  string
	ByteLen uint32
	Imm     uint32 // the immediate data, when the completion carries it
}

// endpoint of a device's queue pair for Connect: its IPv4 GID.
func endpoint(t testing.TB, d *roce.Device, q *roce.QP, psn uint32) roce.Endpoint {
	gid, err := d.GID(1)
	if err != nil {
		t.Fatal(err)
	}
	return roce.Endpoint{QPN: q.QPN(), PSN: psn, GID: gid}
}

type scriptSide struct {
	dev *roce.Device
	cq  *roce.CQ
	qp  *roce.QP
	buf []byte
	mr  *roce.MR
}

func newScriptSide(t *testing.T, d *roce.Device, size int) *scriptSide {
	return newScriptSideMR(t, d, size, false)
}

// newScriptSideMR is newScriptSide with the buffer from PD.AllocMR when
// alloc is set (daemon-shared memory on a daemon client).
func newScriptSideMR(t testing.TB, d *roce.Device, size int, alloc bool) *scriptSide {
	return newScriptSideAccess(t, d, size, alloc, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead)
}

// newScriptSideAccess is newScriptSideMR with the region's access flags.
func newScriptSideAccess(t testing.TB, d *roce.Device, size int, alloc bool, access roce.Access) *scriptSide {
	s := &scriptSide{dev: d}
	pd := d.AllocPD()
	var err error
	if s.cq, err = d.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if alloc {
		s.mr, err = pd.AllocMR(size, access)
	} else {
		s.mr, err = pd.RegMR(make([]byte, size), access)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.buf = s.mr.Bytes()
	if s.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 256, MaxRecvWR: 256}); err != nil {
		t.Fatal(err)
	}
	return s
}

// wait collects n completions from s's CQ.
func (s *scriptSide) wait(t *testing.T, n int) []wcRec {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out []wcRec
	wcs := make([]roce.WC, 64)
	for len(out) < n {
		k, err := s.cq.Wait(ctx, wcs)
		if err != nil {
			t.Fatalf("after %d of %d completions: %v", len(out), n, err)
		}
		for _, wc := range wcs[:k] {
			r := wcRec{ID: wc.ID, Opcode: wc.Opcode.String(), Status: wc.Status.String(), ByteLen: wc.ByteLen}
			if wc.WithImm {
				r.Imm = wc.ImmData
			}
			out = append(out, r)
		}
	}
	return out
}

// script moves size bytes from a to b by RDMA WRITE, back by RDMA READ
// into a second half of a's buffer, and again by SEND into b's posted
// receives, in chunk-sized work requests, checking the bytes after each
// step; it returns both sides' completions.
func script(t *testing.T, da, db *roce.Device, size, chunk int) []wcRec {
	return scriptMR(t, da, db, size, chunk, false, false)
}

// scriptMR is script with a's and b's buffers from PD.AllocMR when allocA,
// allocB are set.
func scriptMR(t *testing.T, da, db *roce.Device, size, chunk int, allocA, allocB bool) []wcRec {
	a := newScriptSideMR(t, da, 2*size, allocA)
	b := newScriptSideMR(t, db, size, allocB)
	if err := a.qp.Connect(1, endpoint(t, db, b.qp, 2), nil); err != nil {
		t.Fatal(err)
	}
	if err := b.qp.Connect(2, endpoint(t, da, a.qp, 1), nil); err != nil {
		t.Fatal(err)
	}
	src, back := a.buf[:size], a.buf[size:]
	rand.NewChaCha8([32]byte{7}).Read(src)
	var all []wcRec
	n := size / chunk
	// WRITE, READ, SEND in batches of 128 work requests.
	batch := func(op roce.WROpcode, local uint64, recv bool) {
		for first := 0; first < n; first += 128 {
			k := min(128, n-first)
			for i := first; i < first+k; i++ {
				off := uint64(i * chunk)
				if recv {
					if err := b.qp.PostRecv(roce.RecvWR{ID: uint64(i), SGL: []roce.SGE{{Addr: b.mr.Addr() + off,
						Length: uint32(chunk), LKey: b.mr.LKey()}}}); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.qp.PostSend(roce.SendWR{ID: uint64(i), Opcode: op, Flags: roce.Signaled,
					SGL:        []roce.SGE{{Addr: a.mr.Addr() + local + off, Length: uint32(chunk), LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr() + off, RKey: b.mr.RKey()}); err != nil {
					t.Fatal(err)
				}
			}
			all = append(all, a.wait(t, k)...)
			if recv {
				all = append(all, b.wait(t, k)...)
			}
		}
	}
	batch(roce.WRRDMAWrite, 0, false)
	if !bytes.Equal(b.buf, src) {
		t.Fatal("WRITE: the target differs")
	}
	batch(roce.WRRDMARead, uint64(size), false)
	if !bytes.Equal(back, src) {
		t.Fatal("READ: the data read back differs")
	}
	clear(b.buf)
	batch(roce.WRSend, 0, true)
	if !bytes.Equal(b.buf, src) {
		t.Fatal("SEND: the receive buffers differ")
	}
	return all
}

func vethBytes(t *testing.T, ns *netlab.NS, ifname string) int64 {
	var sum int64
	for _, f := range []string{"rx_bytes", "tx_bytes"} {
		out, err := ns.Command(t.Context(), "cat", "/sys/class/net/"+ifname+"/statistics/"+f).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		sum += n
	}
	return sum
}

// TestPrivilegedSameHostBypass: two devices attached to a daemon that holds
// a veth by AF_XDP move 64 MiB by RDMA WRITE, READ and SEND byte-exact; the
// veth's byte counters do not move (the daemon switched every frame port
// to port); the work completions (ID, opcode, status, length) equal those
// of the same script over link/pipe; the two clients got different QPN
// ranges; one device asked for the daemon, the other found it (LinkAuto).
func TestPrivilegedSameHostBypass(t *testing.T) {
	netlab.Privileged(t)
	const size, chunk = 64 << 20, 256 << 10
	pa, pb := pipeDevices(t)
	start := time.Now()
	want := script(t, pa, pb, size, chunk)
	pipeTime := time.Since(start)

	topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	sock := filepath.Join(t.TempDir(), "d.sock")
	var d *Daemon
	var x, y *roce.Device
	if err := topo.A.NS.Do(func() error {
		var err error
		if d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Link: roce.LinkXSK}); err != nil {
			return err
		}
		o := &roce.Options{Link: roce.LinkDaemon, Daemon: sock}
		if x, err = roce.Open(topo.A.Name, o); err != nil {
			return err
		}
		y, err = roce.Open(topo.A.Name, &roce.Options{}) // LinkAuto finds the announced daemon
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer x.Close()
	defer y.Close()
	if !strings.HasPrefix(y.LinkName(), "daemon (AF_XDP") || !strings.Contains(y.LinkReason(), "xdproce daemon (PID "+strconv.Itoa(os.Getpid())) {
		t.Errorf("auto open: link %q, reason %q", y.LinkName(), y.LinkReason())
	}
	before := vethBytes(t, topo.A.NS, topo.A.Name)
	start = time.Now()
	got := script(t, x, y, size, chunk)
	t.Logf("3 × 64 MiB (WRITE, READ, SEND; checks included): %v through the daemon, %v over link/pipe",
		time.Since(start).Round(time.Millisecond), pipeTime.Round(time.Millisecond))
	if moved := vethBytes(t, topo.A.NS, topo.A.Name) - before; moved > 4096 {
		t.Errorf("the veth moved %d bytes while two local clients moved 3 × 64 MiB", moved)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d completions through the daemon, %d over link/pipe; they differ", len(got), len(want))
	}
	st := d.Stats()
	if len(st.Clients) != 2 || st.Switched < uint64(3*size/4096) || st.WireTx != 0 {
		t.Errorf("daemon stats %+v", st)
	}
	for _, c := range st.Clients {
		t.Logf("client %d: QPNs %#x..%#x, %d frames from, %d to", c.ID, c.QPNFirst, c.QPNLast, c.FromClient, c.ToClient)
	}
	if c0, c1 := st.Clients[0], st.Clients[1]; c0.QPNFirst == c1.QPNFirst {
		t.Errorf("both clients got QPNs from %#x", c0.QPNFirst)
	}
}

// TestPrivilegedWire: a device attached to a daemon holding A by AF_XDP,
// then by UDP, moves 8 MiB by WRITE, READ and SEND byte-exact to and from
// a device that opens B itself with the same link; the daemon counts the
// frames both ways on the wire and none switched. Then the same from a
// client in a third network namespace, which has no such interface and
// reaches the daemon by its socket path: the daemon fills in the
// destination MACs it cannot know.
func TestPrivilegedWire(t *testing.T) {
	netlab.Privileged(t)
	for _, tc := range []struct {
		name    string
		kind    roce.LinkKind
		otherNS bool
	}{{"xsk", roce.LinkXSK, false}, {"udp", roce.LinkUDP, false}, {"xsk-other-netns", roce.LinkXSK, true}} {
		t.Run(tc.name, func(t *testing.T) {
			topo := netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
			sock := filepath.Join(t.TempDir(), "d.sock")
			var d *Daemon
			var x, y *roce.Device
			if err := topo.A.NS.Do(func() error {
				var err error
				d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Link: tc.kind})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			clientNS := topo.A.NS
			if tc.otherNS {
				ns, err := topo.Lab.AddNS("c")
				if err != nil {
					t.Fatal(err)
				}
				clientNS = ns
			}
			if err := clientNS.Do(func() error {
				var err error
				x, err = roce.Open(topo.A.Name, &roce.Options{Link: roce.LinkDaemon, Daemon: sock})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			if err := topo.B.NS.Do(func() error {
				var err error
				y, err = roce.Open(topo.B.Name, &roce.Options{Link: tc.kind})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer y.Close()
			// The daemon client's buffer is daemon-shared memory: its peer
			// is on the wire, so it sends frames (no placement request).
			scriptMR(t, x, y, 8<<20, 256<<10, true, true)
			if ps := x.PlaceStats(); ps.Regions != 1 || ps.Requests != 0 {
				t.Errorf("placement stats %+v: want one region and no request", ps)
			}
			st := d.Stats()
			if st.WireRx < 1000 || st.WireTx < 1000 || st.Switched != 0 || st.Placed != 0 {
				t.Errorf("daemon stats %+v", st)
			}
			t.Logf("%s: link %q; daemon: %d frames in, %d out, %d dropped waiting for a MAC",
				tc.name, x.LinkName(), st.WireRx, st.WireTx, st.DropNoNeighbor)
		})
	}
}
