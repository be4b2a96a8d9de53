package daemon

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xdproce/xdproce/internal/netlab"
	"github.com/xdproce/xdproce/roce"
)

// atomicSide is one requester of atomics: a queue pair and a buffer with
// an 8-byte slot per work request for the original value returned.
type atomicSide struct {
	qp  *roce.QP
	cq  *roce.CQ
	mr  *roce.MR
	buf []byte
}

// newAtomicSide makes a requester on d with n result slots.
func newAtomicSide(t testing.TB, d *roce.Device, n int) *atomicSide {
	pd := d.AllocPD()
	s := &atomicSide{}
	var err error
	if s.cq, err = d.CreateCQ(1024); err != nil {
		t.Fatal(err)
	}
	if s.mr, err = pd.RegMR(make([]byte, 8*n), roce.LocalWrite); err != nil {
		t.Fatal(err)
	}
	s.buf = s.mr.Bytes()
	if s.qp, err = pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: s.cq, RecvCQ: s.cq, MaxSendWR: 256, MaxRecvWR: 16}); err != nil {
		t.Fatal(err)
	}
	return s
}

// run posts wrs (result slot i for wrs[i]), up to depth in flight, and
// returns their completions in completion order.
func (s *atomicSide) run(ctx context.Context, wrs []roce.SendWR, depth int) ([]wcRec, error) {
	var out []wcRec
	wcs := make([]roce.WC, 64)
	posted := 0
	for len(out) < len(wrs) {
		for posted < len(wrs) && posted-len(out) < depth {
			wr := wrs[posted]
			wr.ID = uint64(posted)
			wr.Flags = roce.Signaled
			wr.SGL = []roce.SGE{{Addr: s.mr.Addr() + uint64(8*posted), Length: 8, LKey: s.mr.LKey()}}
			if err := s.qp.PostSend(wr); err != nil {
				return out, err
			}
			posted++
		}
		k, err := s.cq.Wait(ctx, wcs)
		if err != nil {
			return out, fmt.Errorf("after %d of %d completions: %w", len(out), len(wrs), err)
		}
		for _, wc := range wcs[:k] {
			out = append(out, wcRec{ID: wc.ID, Opcode: wc.Opcode.String(), Status: wc.Status.String(), ByteLen: wc.ByteLen})
		}
	}
	return out, nil
}

// result is the original value returned for work request i.
func (s *atomicSide) result(i int) uint64 { return binary.NativeEndian.Uint64(s.buf[8*i:]) }

// fetchAdds is n FETCH_ADDs of 1 on the counter at addr/rkey.
func fetchAdds(n int, addr uint64, rkey uint32) []roce.SendWR {
	wrs := make([]roce.SendWR, n)
	for i := range wrs {
		wrs[i] = roce.SendWR{Opcode: roce.WRAtomicFetchAdd, RemoteAddr: addr, RKey: rkey, CompareAdd: 1}
	}
	return wrs
}

// TestPrivilegedAtomicsDaemonAndWire: issue 17's "an atomic placed by the
// daemon and one arriving from the wire on the same memory region are
// atomic with respect to each other". y, a client of a daemon on A's veth,
// holds an 8-byte counter in a daemon-shared region (AllocMR); x, another
// client of the same daemon, and w, a device owning B's interface (another
// namespace, AF_XDP), each send n FETCH_ADDs of 1 to it at once, 16 in
// flight each. The counter ends at exactly 2n and the 2n original values
// returned are 0..2n-1, each once. Then both run compare-and-swap
// increments against each other (CMP_SWAP with the last value seen, again
// on a miss) until each has k successes: the counter ends at 2n+2k and no
// original value is won twice.
func TestPrivilegedAtomicsDaemonAndWire(t *testing.T) {
	netlab.Privileged(t)
	const n, k, depth = 400, 100, 16
	topo, x, y, d := daemonClientsIn(t)
	w := openXSK(t, topo.B.NS, topo.B.Name)

	// The responder: one region (daemon-shared), two queue pairs on it.
	ypd := y.AllocPD()
	ymr, err := ypd.AllocMR(4096, roce.LocalWrite|roce.RemoteWrite|roce.RemoteRead|roce.RemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	ycq, err := y.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	counter := ymr.Bytes()[64:72]
	addr := ymr.Addr() + 64
	xs, ws := newAtomicSide(t, x, n), newAtomicSide(t, w, n)
	for i, s := range []struct {
		dev  *roce.Device
		side *atomicSide
	}{{x, xs}, {w, ws}} {
		q, err := ypd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: ycq, RecvCQ: ycq, MaxSendWR: 16, MaxRecvWR: 16})
		if err != nil {
			t.Fatal(err)
		}
		psn := uint32(100 * (i + 1))
		if err := s.side.qp.Connect(psn, endpoint(t, y, q, psn+1), nil); err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(psn+1, endpoint(t, s.dev, s.side.qp, psn), nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// both runs f for x's and w's side at once and fails on either's error.
	both := func(f func(s *atomicSide) error) {
		errs := make(chan error, 2)
		for _, s := range []*atomicSide{xs, ws} {
			go func() { errs <- f(s) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	both(func(s *atomicSide) error {
		wcs, err := s.run(ctx, fetchAdds(n, addr, ymr.RKey()), depth)
		for _, wc := range wcs {
			if wc.Status != roce.WCSuccess.String() || wc.Opcode != roce.WCFetchAdd.String() || wc.ByteLen != 8 {
				return fmt.Errorf("completion %+v", wc)
			}
		}
		return err
	})
	if got := binary.NativeEndian.Uint64(counter); got != 2*n {
		t.Fatalf("counter after %d FETCH_ADDs of 1 from each side: %d", n, got)
	}
	seen := make([]int, 2*n)
	for _, s := range []*atomicSide{xs, ws} {
		for i := range n {
			v := s.result(i)
			if v >= 2*n {
				t.Fatalf("FETCH_ADD returned %d, outside 0..%d", v, 2*n-1)
			}
			seen[v]++
		}
	}
	for v, c := range seen {
		if c != 1 {
			t.Fatalf("original value %d returned %d times", v, c)
		}
	}

	// Compare-and-swap increments: each side guesses the value it last saw.
	won := [2][]uint64{}
	both(func(s *atomicSide) error {
		who := 0
		if s == ws {
			who = 1
		}
		guess := uint64(0)
		for tries := 0; len(won[who]) < k; tries++ {
			if tries > 100*k {
				return fmt.Errorf("side %d: %d of %d CMP_SWAPs won after %d tries", who, len(won[who]), k, tries)
			}
			wr := roce.SendWR{Opcode: roce.WRAtomicCmpSwp, RemoteAddr: addr, RKey: ymr.RKey(), CompareAdd: guess, Swap: guess + 1}
			wcs, err := s.run(ctx, []roce.SendWR{wr}, 1)
			if err != nil {
				return err
			}
			if wcs[0].Status != roce.WCSuccess.String() || wcs[0].Opcode != roce.WCCompSwap.String() {
				return fmt.Errorf("completion %+v", wcs[0])
			}
			got := s.result(0)
			if got == guess {
				won[who] = append(won[who], got)
				guess++
			} else {
				guess = got
			}
		}
		return nil
	})
	if got := binary.NativeEndian.Uint64(counter); got != 2*n+2*k {
		t.Fatalf("counter after %d won CMP_SWAPs on each side: %d, want %d", k, got, 2*n+2*k)
	}
	all := slices.Concat(won[0], won[1])
	slices.Sort(all)
	for i, v := range all {
		if v != uint64(2*n+i) {
			t.Fatalf("won CMP_SWAP originals %v: want %d..%d, each once", all, 2*n, 2*n+2*k-1)
		}
	}
	st := d.Stats()
	t.Logf("daemon: %d switched, %d from the wire, %d to the wire, %d placed", st.Switched, st.WireRx, st.WireTx, st.Placed)
	if st.Switched == 0 || st.WireRx == 0 {
		t.Errorf("daemon stats %+v: want atomics switched and from the wire", st)
	}
}

// atomicScript is a fixed sequence of atomics on an 8-byte word at
// addr+off: FETCH_ADDs (one wrapping past 2^64), CMP_SWAPs that match and
// that miss, and one just past the region (a remote access error).
func atomicScript(addr uint64, rkey uint32) []roce.SendWR {
	fa := func(off, add uint64) roce.SendWR {
		return roce.SendWR{Opcode: roce.WRAtomicFetchAdd, RemoteAddr: addr + off, RKey: rkey, CompareAdd: add}
	}
	cs := func(off, cmp, swap uint64) roce.SendWR {
		return roce.SendWR{Opcode: roce.WRAtomicCmpSwp, RemoteAddr: addr + off, RKey: rkey, CompareAdd: cmp, Swap: swap}
	}
	return []roce.SendWR{fa(0, 5), fa(0, 1<<40), cs(0, 5+1<<40, 7), cs(0, 5, 9), fa(0, ^uint64(0)),
		cs(8, 0, 1<<63), fa(8, 1<<63), cs(0, 6, 42), fa(0, 0), cs(4096-128, 0, 1)}
}

// TestPrivilegedAtomicsEqualPipe: the same atomics from one client of a
// daemon to another (the responder's counter in daemon-shared memory),
// from an AF_XDP peer in another namespace to that client, and between two
// devices over link/pipe complete alike (status, opcode, length), return
// the same original values and leave the same words; the one past the
// region ends the script with REM_ACCESS_ERR on all three.
func TestPrivilegedAtomicsEqualPipe(t *testing.T) {
	netlab.Privileged(t)
	topo, dx, dy, _ := daemonClientsIn(t)
	dw := openXSK(t, topo.B.NS, topo.B.Name)
	px, py := pipeDevices(t)
	type outcome struct {
		wcs     []wcRec
		results []uint64
		words   [2]uint64
	}
	run := func(x, y *roce.Device, alloc bool) outcome {
		pd := y.AllocPD()
		const access = roce.LocalWrite | roce.RemoteAtomic
		var mr *roce.MR
		var err error
		if alloc {
			mr, err = pd.AllocMR(4096, access)
		} else {
			mr, err = pd.RegMR(make([]byte, 4096), access)
		}
		if err != nil {
			t.Fatal(err)
		}
		cq, err := y.CreateCQ(16)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 16, MaxRecvWR: 16})
		if err != nil {
			t.Fatal(err)
		}
		wrs := atomicScript(mr.Addr()+128, mr.RKey())
		s := newAtomicSide(t, x, len(wrs))
		if err := s.qp.Connect(1, endpoint(t, y, q, 2), nil); err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(2, endpoint(t, x, s.qp, 1), nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		// One at a time: each result is that of the atomics before it.
		var o outcome
		for i, wr := range wrs {
			wcs, err := s.run(ctx, []roce.SendWR{wr}, 1)
			if err != nil {
				t.Fatal(err)
			}
			wcs[0].ID = uint64(i)
			o.wcs = append(o.wcs, wcs[0])
			o.results = append(o.results, s.result(0))
			if wcs[0].Status != roce.WCSuccess.String() {
				break
			}
		}
		b := mr.Bytes()
		o.words = [2]uint64{binary.NativeEndian.Uint64(b[128:]), binary.NativeEndian.Uint64(b[136:])}
		return o
	}
	want := run(px, py, false)
	t.Logf("link/pipe: results %x, words %x, %d completions", want.results, want.words, len(want.wcs))
	if len(want.wcs) != len(atomicScript(0, 0)) || want.wcs[len(want.wcs)-1].Status != roce.WCRemAccessErr.String() {
		t.Fatalf("link/pipe's completions %+v: want the script to end on the atomic past the region", want.wcs)
	}
	// The last result slot is not written by a failed atomic.
	n := len(want.results) - 1
	for _, c := range []struct {
		name string
		from *roce.Device
	}{{"a daemon client", dx}, {"the wire", dw}} {
		got := run(c.from, dy, true)
		if !slices.Equal(got.wcs, want.wcs) {
			t.Errorf("from %s: completions\n%+v\nlink/pipe's\n%+v", c.name, got.wcs, want.wcs)
		}
		if !slices.Equal(got.results[:n], want.results[:n]) || got.words != want.words {
			t.Errorf("from %s: results %x words %x; link/pipe's %x %x", c.name, got.results[:n], got.words, want.results[:n], want.words)
		}
	}
}
