package daemon

import (
	"net/netip"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// TestPrivilegedPlacement: two clients of a daemon holding a veth by
// AF_XDP move 16 MiB by RDMA WRITE, READ and SEND between regions from
// PD.AllocMR byte-exact by direct placement: every work request is one
// placement request, no responder fell back, every frame on the ports was
// a placement message (the daemon switched no RoCE frame and sent none to
// the wire), the daemon placed WRITEs and READs on the responder's grant
// on the first hop (each taken by the responder's engine as a Note, the
// rest answered by the responder), the veth's counters stayed still, and
// the work completions (ID, opcode, status, length) equal those of the
// same script over link/pipe (where AllocMR gives ordinary memory).
func TestPrivilegedPlacement(t *testing.T) {
	netlab.Privileged(t)
	const size, chunk = 16 << 20, 64 << 10
	pa, pb := pipeDevices(t)
	want := scriptMR(t, pa, pb, size, chunk, true, true)
	if st := pa.PlaceStats(); st.Regions != 0 || st.Requests != 0 {
		t.Errorf("a device over link/pipe shares memory: %+v", st)
	}

	topo, x, y, d := daemonClientsIn(t)
	before := vethBytes(t, topo.A.NS, topo.A.Name)
	got := scriptMR(t, x, y, size, chunk, true, true)
	if moved := vethBytes(t, topo.A.NS, topo.A.Name) - before; moved > 4096 {
		t.Errorf("the veth moved %d bytes", moved)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%d completions by placement, %d over link/pipe; they differ", len(got), len(want))
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("first difference at %d: %+v, want %+v", i, got[i], want[i])
			}
		}
	}
	wrs := uint64(3 * size / chunk)
	sx, sy := x.PlaceStats(), y.PlaceStats()
	t.Logf("a: %+v", sx)
	t.Logf("a engine: %+v", x.Stats())
	t.Logf("b: %+v", sy)
	// Resends (a local ACK timeout under load) are answered without a
	// copy, but a repeated READ is placed again: at least one copy each.
	if sx.Requests < wrs || sx.Fallbacks != 0 || sy.Answers+sy.Granted != sx.Requests || sx.Regions != 1 ||
		sx.SharedBytes != 2*size {
		t.Errorf("placement: requester %+v, responder %+v; want at least %d requests, all answered or granted", sx, sy, wrs)
	}
	st := d.Stats()
	t.Logf("daemon: placed %d (%d bytes), answered %d, fallbacks %d, bad %d, failed %d; switched %d, wire tx %d",
		st.Placed, st.PlacedBytes, st.PlaceAnswered, st.PlaceFallbacks, st.PlaceBad, st.PlaceFailed, st.Switched, st.WireTx)
	if st.PlaceGranted == 0 || st.PlaceGranted != sy.Granted {
		t.Errorf("daemon placed %d messages on a grant, the responder took %d Notes; want the same, not 0",
			st.PlaceGranted, sy.Granted)
	}
	if st.Switched != 0 || st.WireTx != 0 || st.Placed < wrs || st.Placed+st.PlaceAnswered != sy.Answers+sy.Granted ||
		st.PlacedBytes < 3*size || st.PlaceFallbacks+st.PlaceBad+st.PlaceFailed != 0 {
		t.Errorf("daemon stats %+v: want %d placed, nothing switched", st, wrs)
	}
	// Every frame either client put on its port was a placement message:
	// a's requests and b's answers, nothing else.
	var from uint64
	for _, c := range st.Clients {
		from += c.FromClient
		if c.Regions != 1 || c.DropMalformed != 0 {
			t.Errorf("client %+v", c)
		}
	}
	if from != sx.Requests+sy.Answers { // a grant's Note needs no answer
		t.Errorf("%d frames from the clients, %d placement requests and answers", from, sx.Requests+sy.Answers)
	}
}

// errorScript runs failing and immediate-data work requests between da
// and db, each case on a fresh pair of queue pairs, and returns the
// completions of both sides in order: a WRITE and a READ with a bad rkey
// (remote access error, the WR behind flushed), a SEND longer than the
// receive buffer (invalid request; the receive completes with a length
// error), a SEND finding no receive with rnr_retry 0, then a WRITE with
// immediate and a SEND with immediate that succeed.
func errorScript(t *testing.T, da, db *roce.Device, alloc bool) []wcRec {
	pair := func(o *roce.ConnectOptions) (*scriptSide, *scriptSide) {
		a, b := newScriptSideMR(t, da, 8192, alloc), newScriptSideMR(t, db, 8192, alloc)
		if err := a.qp.Connect(1, endpoint(t, db, b.qp, 2), o); err != nil {
			t.Fatal(err)
		}
		if err := b.qp.Connect(2, endpoint(t, da, a.qp, 1), o); err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	sgl := func(s *scriptSide, n int) []roce.SGE {
		return []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(n), LKey: s.mr.LKey()}}
	}
	post := func(a, b *scriptSide, id uint64, op roce.WROpcode, n int, rkey uint32) {
		if err := a.qp.PostSend(roce.SendWR{ID: id, Opcode: op, Flags: roce.Signaled, SGL: sgl(a, n),
			RemoteAddr: b.mr.Addr(), RKey: rkey, Imm: 0x1234}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(b *scriptSide, id uint64, n int) {
		if err := b.qp.PostRecv(roce.RecvWR{ID: id, SGL: sgl(b, n)}); err != nil {
			t.Fatal(err)
		}
	}
	var all []wcRec
	a, b := pair(nil)
	post(a, b, 1, roce.WRRDMAWrite, 4096, b.mr.RKey()+1)
	post(a, b, 2, roce.WRRDMAWrite, 4096, b.mr.RKey())
	all = append(all, a.wait(t, 2)...)
	a, b = pair(nil)
	post(a, b, 3, roce.WRRDMARead, 4096, b.mr.RKey()^0x100)
	all = append(all, a.wait(t, 1)...)
	a, b = pair(nil)
	recv(b, 4, 64)
	post(a, b, 5, roce.WRSend, 128, 0)
	all = append(all, a.wait(t, 1)...)
	all = append(all, b.wait(t, 1)...)
	o := roce.DefaultConnectOptions()
	o.RNRRetry, o.MinRNRTimer = 0, 1
	a, _ = pair(&o)
	post(a, b, 6, roce.WRSend, 256, 0)
	all = append(all, a.wait(t, 1)...)
	a, b = pair(nil)
	recv(b, 7, 8192)
	recv(b, 8, 8192)
	post(a, b, 9, roce.WRRDMAWriteImm, 8192, b.mr.RKey())
	post(a, b, 10, roce.WRSendImm, 100, 0)
	all = append(all, a.wait(t, 2)...)
	all = append(all, b.wait(t, 2)...)
	return all
}

// TestPrivilegedPlacementErrors: errorScript's completions by placement
// (two daemon clients, regions from AllocMR) equal those over link/pipe,
// and the daemon placed them (no RoCE frame switched).
func TestPrivilegedPlacementErrors(t *testing.T) {
	netlab.Privileged(t)
	pa, pb := pipeDevices(t)
	want := errorScript(t, pa, pb, true)
	t.Logf("over link/pipe: %+v", want)

	x, y, d := daemonClients(t)
	got := errorScript(t, x, y, true)
	if !slices.Equal(got, want) {
		t.Errorf("by placement: %+v", got)
	}
	st := d.Stats()
	t.Logf("daemon: placed %d, answered %d, fallbacks %d, bad %d, failed %d; switched %d",
		st.Placed, st.PlaceAnswered, st.PlaceFallbacks, st.PlaceBad, st.PlaceFailed, st.Switched)
	if st.Switched != 0 || st.Placed < 2 || st.PlaceAnswered < 4 || st.PlaceBad+st.PlaceFailed != 0 {
		t.Errorf("daemon stats %+v", st)
	}
}

// daemonClients starts a daemon on a veth by AF_XDP and attaches two
// devices to it, all closed at the test's end.
func daemonClients(t testing.TB) (x, y *roce.Device, d *Daemon) {
	_, x, y, d = daemonClientsIn(t)
	return x, y, d
}

// daemonClientsIn is daemonClients, also returning the lab (its veth's
// counters show what reached the wire).
func daemonClientsIn(t testing.TB) (topo *netlab.Topo, x, y *roce.Device, d *Daemon) {
	topo = netlab.Pair(t, netlab.LinkConfig{MTU: 9000})
	sock := filepath.Join(t.TempDir(), "d.sock")
	if err := topo.A.NS.Do(func() error {
		var err error
		if d, err = Start(Config{Interface: topo.A.Name, Socket: sock, Link: roce.LinkXSK}); err != nil {
			return err
		}
		t.Cleanup(func() { d.Close() })
		o := &roce.Options{Link: roce.LinkDaemon, Daemon: sock}
		if x, err = roce.Open(topo.A.Name, o); err != nil {
			return err
		}
		t.Cleanup(func() { x.Close() })
		if y, err = roce.Open(topo.A.Name, o); err != nil {
			return err
		}
		t.Cleanup(func() { y.Close() })
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return topo, x, y, d
}

// pipeDevices is two devices over link/pipe (MTU 9000), the reference the
// placement tests compare completions with.
func pipeDevices(t testing.TB) (pa, pb *roce.Device) {
	la, lb, err := pipe.New(pipe.Config{MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	addrs := []netip.Addr{netip.MustParseAddr("198.51.100.1")}
	for _, x := range []struct {
		l  *pipe.Link
		to **roce.Device
	}{{la, &pa}, {lb, &pb}} {
		d, err := roce.NewDevice(x.l, &roce.Options{Addrs: addrs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		*x.to = d
	}
	return pa, pb
}

// TestPrivilegedPlacementFallback: placement applies only where both
// sides' memory is daemon-shared. a's shared regions to b's ordinary
// memory: b's responder answers the first request Fallback, a sends that
// message and every later one as frames, switched port to port; a's
// ordinary memory never makes a request. Either way the completions equal
// link/pipe's and the bytes arrive.
func TestPrivilegedPlacementFallback(t *testing.T) {
	netlab.Privileged(t)
	const size, chunk = 4 << 20, 64 << 10
	pa, pb := pipeDevices(t)
	want := script(t, pa, pb, size, chunk)
	x, y, d := daemonClients(t)
	if got := scriptMR(t, x, y, size, chunk, true, false); !slices.Equal(got, want) {
		t.Errorf("shared to ordinary memory: completions differ from link/pipe's")
	}
	ps, st := x.PlaceStats(), d.Stats()
	t.Logf("requester %+v; daemon: switched %d, placed %d, fallbacks %d", ps, st.Switched, st.Placed, st.PlaceFallbacks)
	if ps.Fallbacks != 1 || ps.Requests == 0 || st.Placed != 0 || st.PlaceFallbacks == 0 || st.Switched < uint64(3*size/4096) {
		t.Errorf("fallback: requester %+v, daemon %+v", ps, st)
	}
	if got := scriptMR(t, y, x, size, chunk, false, true); !slices.Equal(got, want) {
		t.Errorf("ordinary to shared memory: completions differ from link/pipe's")
	}
	if ps := y.PlaceStats(); ps.Requests != 0 {
		t.Errorf("a requester with ordinary memory made %d placement requests", ps.Requests)
	}
}

// TestPrivilegedAllocMR: on a daemon client AllocMR shares a region with
// the daemon (counted on both sides) and Deregister takes it back before it
// returns; a device that goes takes its regions with it.
func TestPrivilegedAllocMR(t *testing.T) {
	netlab.Privileged(t)
	x, y, d := daemonClients(t)
	pd := x.AllocPD()
	if _, err := pd.AllocMR(0, roce.LocalWrite); err == nil {
		t.Error("AllocMR(0) succeeded")
	}
	m, err := pd.AllocMR(1<<20+1, roce.LocalWrite|roce.RemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Bytes()) != 1<<20+1 {
		t.Errorf("AllocMR gave %d bytes", len(m.Bytes()))
	}
	m.Bytes()[1<<20] = 7
	shared := func() (n int, bytes int64) {
		for _, c := range d.Stats().Clients {
			n += c.Regions
			bytes += c.SharedBytes
		}
		return n, bytes
	}
	if n, b := shared(); n != 1 || b != 1<<20+4096 { // whole pages
		t.Errorf("daemon maps %d regions, %d bytes", n, b)
	}
	if st := x.PlaceStats(); st.Regions != 1 || st.SharedBytes != 1<<20+1 {
		t.Errorf("device: %+v", st)
	}
	if err := m.Deregister(); err != nil {
		t.Fatal(err)
	}
	if n, _ := shared(); n != 0 || x.PlaceStats().Regions != 0 {
		t.Errorf("after Deregister the daemon maps %d regions, the device lists %d", n, x.PlaceStats().Regions)
	}
	if _, err := y.AllocPD().AllocMR(4096, roce.LocalWrite); err != nil {
		t.Fatal(err)
	}
	y.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if n, _ := shared(); n == 0 && len(d.Stats().Clients) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon still maps a closed client's region: %+v", d.Stats().Clients)
		}
	}
}
