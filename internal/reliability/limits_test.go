package reliability

import (
	"errors"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
)

// wantErr fails unless err is non-nil, mentions every word and (if target
// is non-nil) wraps it.
func wantErr(t *testing.T, what string, err error, target error, words ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error", what)
		return
	}
	if target != nil && !errors.Is(err, target) {
		t.Errorf("%s: %v does not wrap %v", what, err, target)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", what, err, w)
		}
	}
}

// TestLimitsMR: a device holds mr.DefaultMaxMRs regions; one more fails
// with an error wrapping mr.ErrLimit, and deregistering one makes room.
func TestLimitsMR(t *testing.T) {
	a, _, _, _ := newPipePair(t, pipe.Config{})
	pd := a.AllocPD()
	buf := make([]byte, mr.DefaultMaxMRs+1)
	mrs := make([]*roce.MR, 0, mr.DefaultMaxMRs)
	for i := range mr.DefaultMaxMRs {
		m, err := pd.RegMR(buf[i:i+1], roce.LocalWrite|roce.RemoteWrite)
		if err != nil {
			t.Fatalf("region %d of %d: %v", i+1, mr.DefaultMaxMRs, err)
		}
		mrs = append(mrs, m)
	}
	_, err := pd.RegMR(buf[mr.DefaultMaxMRs:], roce.LocalWrite)
	wantErr(t, "region beyond the limit", err, mr.ErrLimit, "limit", strconv.Itoa(mr.DefaultMaxMRs))
	if err := mrs[7].Deregister(); err != nil {
		t.Fatal(err)
	}
	if _, err := pd.RegMR(buf[mr.DefaultMaxMRs:], roce.LocalWrite); err != nil {
		t.Fatalf("after a deregistration: %v", err)
	}
	// The re-registration took the freed place: the table is full again.
	_, err = pd.RegMR(buf[mr.DefaultMaxMRs:], roce.LocalWrite)
	wantErr(t, "region beyond the limit after a re-registration", err, mr.ErrLimit, "limit", strconv.Itoa(mr.DefaultMaxMRs))
	if err := pd.Dealloc(); err == nil {
		t.Error("Dealloc of a PD with regions succeeded")
	}
	t.Logf("limit error: %v", err)
}

// TestLimitsQPAndCQ: queue pair and completion queue sizes beyond the limits
// are refused with errors naming the limit; a full CQ reports overflow
// instead of dropping completions silently; a QPN in use or outside 24 bits
// is refused.
func TestLimitsQPAndCQ(t *testing.T) {
	a, _, _, _ := newPipePair(t, pipe.Config{})
	pd := a.AllocPD()
	for _, depth := range []int{0, -1, roce.MaxCQDepth + 1} {
		_, err := a.CreateCQ(depth)
		wantErr(t, "CQ depth "+strconv.Itoa(depth), err, nil, "depth", strconv.Itoa(roce.MaxCQDepth))
	}
	if _, err := a.CreateCQ(roce.MaxCQDepth); err != nil {
		t.Errorf("CQ of the maximum depth: %v", err)
	}
	cq, _ := a.CreateCQ(4)
	for _, c := range []struct {
		name string
		cfg  roce.QPConfig
		word string
	}{
		{"MaxSendWR", roce.QPConfig{MaxSendWR: qp.MaxWR + 1}, "MaxSendWR"},
		{"MaxRecvWR", roce.QPConfig{MaxRecvWR: qp.MaxWR + 1}, "MaxRecvWR"},
		{"MaxSGE", roce.QPConfig{MaxSGE: qp.MaxSGELimit + 1}, "MaxSGE"},
		{"MaxInline", roce.QPConfig{MaxInline: qp.MaxInlineLimit + 1}, "MaxInline"},
		{"QPN in use", roce.QPConfig{QPN: 0x11}, "in use"},
		{"QPN 0xFFFFFF", roce.QPConfig{QPN: 0xFFFFFF}, "24-bit"},
	} {
		cfg := c.cfg
		cfg.Type, cfg.SendCQ, cfg.RecvCQ = roce.RC, cq, cq
		if c.name == "QPN in use" {
			if _, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, QPN: 0x11}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := pd.CreateQP(cfg)
		wantErr(t, c.name, err, nil, c.word)
	}

	// A send queue deeper than its CQ: the fifth completion overflows the
	// four-entry CQ, and Poll says so.
	x, y, _, _ := newPipePair(t, pipe.Config{})
	pdX, pdY := x.AllocPD(), y.AllocPD()
	small, _ := x.CreateCQ(4)
	c := connectPair(t, pdX, pdY, small, nil, 8, nil)
	src := make([]byte, 64)
	sm, _ := pdX.RegMR(src, roce.LocalWrite)
	dst := make([]byte, 64)
	dm, _ := pdY.RegMR(dst, roce.LocalWrite|roce.RemoteWrite)
	for i := range 8 {
		if err := c.x.PostSend(roce.SendWR{ID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
			SGL: sgeOf(sm, 0, 8), RemoteAddr: dm.Addr(), RKey: dm.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	var wcs [16]roce.WC
	var err error
	got := 0
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		n, err = small.Poll(wcs[:])
		got += n
		if err != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, qp.ErrCQOverflow) {
		t.Errorf("8 completions into a 4-entry CQ: Poll error %v, want %v", err, qp.ErrCQOverflow)
	}
	t.Logf("overflowing CQ: %d completions delivered, then %v", got, err)
}

// readCounter wraps a link and counts READ/atomic requests sent and their
// last responses received, keeping the most outstanding at once.
type readCounter struct {
	link.Link
	out, max atomic.Int64
}

// opcodeOf reads the BTH opcode of an untagged IPv4 RoCEv2 frame.
func opcodeOf(f []byte) int {
	if len(f) < 14+20+8+12 || f[12] != 0x08 || f[13] != 0 {
		return -1
	}
	return int(f[14+20+8])
}

func (c *readCounter) Send(frames [][]byte) error {
	for _, f := range frames {
		switch opcodeOf(f) {
		case 0x0C, 0x13, 0x14: // READ request, CMP_SWAP, FETCH_ADD
			if n := c.out.Add(1); n > c.max.Load() {
				c.max.Store(n)
			}
		}
	}
	return c.Link.Send(frames)
}

func (c *readCounter) Receive(frames [][]byte) (int, error) {
	n, err := c.Link.Receive(frames)
	for _, f := range frames[:n] {
		switch opcodeOf(f) {
		case 0x0F, 0x10, 0x12: // READ response LAST/ONLY, ATOMIC ACK
			c.out.Add(-1)
		}
	}
	return n, err
}

// TestLimitsOutstandingReadAtomic: a requester never has more READ/atomic
// requests in flight than its max_rd_atomic (responses are delayed 2 ms, so
// they would pile up); max_rd_atomic and max_dest_rd_atomic above 16 are
// refused; a READ to a responder with max_dest_rd_atomic 0 fails with
// REM_INV_REQ_ERR; and a requester with max_rd_atomic 0 cannot post one.
func TestLimitsOutstandingReadAtomic(t *testing.T) {
	for _, limit := range []uint8{1, 4, 16} {
		la, lb, err := pipe.New(pipe.Config{BtoA: pipe.Faults{Delay: 1, DelayTime: 2 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		rc := &readCounter{Link: la}
		a, b := newDevicePair(t, rc, lb, ipA, ipB)
		pdA, pdB := a.AllocPD(), b.AllocPD()
		o := roce.DefaultConnectOptions()
		o.MaxRdAtomic = limit
		c := connectPair(t, pdA, pdB, nil, nil, 64, &o)
		buf := make([]byte, 64*64)
		m, _ := pdA.RegMR(buf, roce.LocalWrite)
		rbuf := make([]byte, 4096)
		rm, _ := pdB.RegMR(rbuf, roce.LocalWrite|roce.RemoteRead|roce.RemoteAtomic)
		for i := range 48 {
			wr := roce.SendWR{ID: uint64(i), Opcode: qp.WRRDMARead, Flags: qp.Signaled, SGL: sgeOf(m, i*64, 64),
				RemoteAddr: rm.Addr() + uint64(i*64), RKey: rm.RKey()}
			if i%3 == 2 {
				wr.Opcode, wr.SGL, wr.RemoteAddr, wr.CompareAdd = qp.WRAtomicFetchAdd, sgeOf(m, i*64, 8), rm.Addr(), 1
			}
			if err := c.x.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
		for range 48 {
			if wc := wait1(t, c.xcq, 5*time.Second); wc.Status != qp.WCSuccess {
				t.Fatalf("max_rd_atomic %d: %+v", limit, wc)
			}
		}
		mx := rc.max.Load()
		t.Logf("max_rd_atomic %d: at most %d READ/atomic requests in flight", limit, mx)
		if mx > int64(limit) || (limit > 1 && mx < 2) {
			t.Errorf("max_rd_atomic %d: %d requests in flight at once", limit, mx)
		}
	}

	a, b, _, _ := newPipePair(t, pipe.Config{})
	pdA, pdB := a.AllocPD(), b.AllocPD()
	cq, _ := a.CreateCQ(8)
	q, _ := pdA.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq})
	gb, _ := b.GID(1)
	for _, f := range []func(o *roce.ConnectOptions){
		func(o *roce.ConnectOptions) { o.MaxRdAtomic = qp.MaxRdAtomicLimit + 1 },
		func(o *roce.ConnectOptions) { o.MaxDestRdAtomic = qp.MaxRdAtomicLimit + 1 },
	} {
		o := roce.DefaultConnectOptions()
		f(&o)
		err := q.Connect(1, roce.Endpoint{QPN: 0x99, PSN: 1, GID: gb}, &o)
		wantErr(t, "max_rd_atomic 17", err, nil, "rd_atomic", "17")
		_ = q.Modify(&roce.Attr{State: qp.Reset}, qp.AttrState)
	}

	// Responder accepts none: REM_INV_REQ_ERR. Requester may send none:
	// PostSend refuses.
	oy := roce.DefaultConnectOptions()
	oy.MaxDestRdAtomic, oy.MaxRdAtomic = 0, 0
	c := connectPair(t, pdA, pdB, nil, nil, 4, &oy)
	m, _ := pdA.RegMR(make([]byte, 64), roce.LocalWrite)
	rm, _ := pdB.RegMR(make([]byte, 64), roce.LocalWrite|roce.RemoteRead)
	err := c.x.PostSend(roce.SendWR{ID: 1, Opcode: qp.WRRDMARead, Flags: qp.Signaled, SGL: sgeOf(m, 0, 8), RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	wantErr(t, "READ with max_rd_atomic 0", err, nil)
	t.Logf("READ with max_rd_atomic 0: %v", err)
	ox := roce.DefaultConnectOptions()
	ox.MaxDestRdAtomic = 0
	c2 := connectPair(t, pdA, pdB, nil, nil, 4, &ox)
	if err := c2.x.PostSend(roce.SendWR{ID: 2, Opcode: qp.WRRDMARead, Flags: qp.Signaled, SGL: sgeOf(m, 0, 8), RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
		t.Fatal(err)
	}
	if wc := wait1(t, c2.xcq, 5*time.Second); wc.Status != qp.WCRemInvReqErr {
		t.Errorf("READ to a responder with max_dest_rd_atomic 0: %v, want %v", wc.Status, qp.WCRemInvReqErr)
	}
}

// rss returns the resident set size from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return pages * int64(os.Getpagesize())
}

func settledRSS(t *testing.T) int64 {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	return rss(t)
}

// TestQPChurnMemory: on two live devices, 10,000 queue pairs (5,000
// connections, each moving one WRITE) opened and destroyed give their memory
// back: after debug.FreeOSMemory the RSS is within 10 % + 16 MiB of where it
// was before they were opened. Closing the devices then brings the
// goroutines back to their number.
func TestQPChurnMemory(t *testing.T) {
	const conns = 5000
	g0 := runtime.NumGoroutine()
	la, lb, err := pipe.New(pipe.Config{TxBuffers: 1024, Depth: 1 << 14})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newDevicePair(t, la, lb, ipA, ipB)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	cqA, _ := a.CreateCQ(conns * 2)
	cqB, _ := b.CreateCQ(conns * 2)
	src := make([]byte, 4096)
	sm, _ := pdA.RegMR(src, roce.LocalWrite)
	dst := make([]byte, 4096)
	dm, _ := pdB.RegMR(dst, roce.LocalWrite|roce.RemoteWrite)
	cfg := roce.DefaultConnectOptions()
	// Timeout 15 (134 ms; eight in a row take over a second): nothing is
	// lost on the pipe, so the timer only fires when the engines are
	// starved, and a CI run at load ~8 starved them through 12's eight
	// 16.8 ms timeouts (134 ms in all: RETRY_EXC_ERR).
	cfg.Timeout = 15
	r0 := settledRSS(t)
	var peak int64
	for round := range 2 {
		pairs := make([]rcPair, 0, conns)
		start := time.Now()
		for i := range conns {
			c := connectPairCfg(t, pdA, pdB, cqA, cqB, roce.QPConfig{MaxSendWR: 32, MaxRecvWR: 32, MaxInline: 64}, &cfg)
			pairs = append(pairs, c)
			if err := c.x.PostSend(roce.SendWR{ID: uint64(i), Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
				SGL: sgeOf(sm, 0, 64), RemoteAddr: dm.Addr(), RKey: dm.RKey()}); err != nil {
				t.Fatal(err)
			}
			if i%500 == 499 { // in batches: 5,000 at once overflow the pipe under -race
				for range 500 {
					if wc := wait1(t, cqA, 10*time.Second); wc.Status != qp.WCSuccess {
						t.Fatalf("WRITE on a churn connection: %+v", wc)
					}
				}
			}
		}
		opened := time.Since(start)
		peak = max(peak, rss(t))
		if st := a.Stats(); st.QPs != conns {
			t.Errorf("device a has %d queue pairs, want %d", st.QPs, conns)
		}
		// Destroy them all (in parallel: Destroy waits for the engine).
		start = time.Now()
		var wg sync.WaitGroup
		ch := make(chan *roce.QP)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for q := range ch {
					if err := q.Destroy(); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		for _, c := range pairs {
			ch <- c.x
			ch <- c.y
		}
		close(ch)
		wg.Wait()
		if st := a.Stats(); st.QPs != 0 {
			t.Errorf("after destroying them all: %d queue pairs", st.QPs)
		}
		destroyed := time.Since(start)
		var wcs [256]roce.WC
		for n := 1; n > 0; {
			n, _ = cqB.Poll(wcs[:])
		}
		r := settledRSS(t)
		t.Logf("round %d: opened %d queue pairs (+1 WRITE each) in %v, destroyed them in %v; RSS %.1f MiB",
			round, 2*conns, opened.Round(time.Millisecond), destroyed.Round(time.Millisecond), mib(r))
	}
	r1 := settledRSS(t)
	limit := r0 + r0/10 + 16<<20
	t.Logf("RSS: before %.1f MiB, peak %.1f MiB (%.1f KiB per queue pair), after destroying %.1f MiB (limit %.1f MiB)",
		mib(r0), mib(peak), float64(peak-r0)/1024/float64(2*conns), mib(r1), mib(limit))
	if raceEnabled {
		t.Log("race detector on: its shadow memory stays, RSS not checked")
	} else if r1 > limit {
		t.Errorf("RSS after destroying the queue pairs %.1f MiB, above the limit %.1f MiB", mib(r1), mib(limit))
	}
	a.Close()
	b.Close()
	waitGoroutines(t, g0)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// waitGoroutines waits (2 s at most) for the goroutine count to fall to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > n {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines, %d before:\n%s", g, n, buf[:runtime.Stack(buf, true)])
	}
}

// connectPairCfg is connectPair with queue pair sizes from cfg.
func connectPairCfg(tb testing.TB, pdX, pdY *roce.PD, xcq, ycq *roce.CQ, cfg roce.QPConfig, o *roce.ConnectOptions) rcPair {
	tb.Helper()
	cfg.Type, cfg.SendCQ, cfg.RecvCQ = roce.RC, xcq, xcq
	x, err := pdX.CreateQP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.SendCQ, cfg.RecvCQ = ycq, ycq
	y, err := pdY.CreateQP(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	gx, _ := pdX.Device().GID(1)
	gy, _ := pdY.Device().GID(1)
	if err := x.Connect(0x100, roce.Endpoint{QPN: y.QPN(), PSN: 0x200, GID: gy}, o); err != nil {
		tb.Fatal(err)
	}
	if err := y.Connect(0x200, roce.Endpoint{QPN: x.QPN(), PSN: 0x100, GID: gx}, o); err != nil {
		tb.Fatal(err)
	}
	return rcPair{x: x, y: y, xcq: xcq, ycq: ycq}
}

// TestClosedDeviceReleasesQueuePairs: closing a device with 10,000 queue
// pairs gives their memory back even while the application still holds the
// *Device (as any does until it returns).
func TestClosedDeviceReleasesQueuePairs(t *testing.T) {
	const conns = 5000
	la, lb, err := pipe.New(pipe.Config{TxBuffers: 1024})
	if err != nil {
		t.Fatal(err)
	}
	a, b := newDevicePair(t, la, lb, ipA, ipB)
	pdA, pdB := a.AllocPD(), b.AllocPD()
	cqA, _ := a.CreateCQ(conns * 2)
	cqB, _ := b.CreateCQ(conns * 2)
	cfg := roce.DefaultConnectOptions()
	r0 := settledRSS(t)
	for range conns {
		connectPairCfg(t, pdA, pdB, cqA, cqB, roce.QPConfig{MaxSendWR: 32, MaxRecvWR: 32, MaxInline: 64}, &cfg)
	}
	peak := rss(t)
	a.Close()
	b.Close()
	r1 := settledRSS(t)
	limit := r0 + r0/10 + 16<<20
	t.Logf("RSS: before %.1f MiB, with %d queue pairs %.1f MiB, after Close %.1f MiB (limit %.1f MiB)",
		mib(r0), 2*conns, mib(peak), mib(r1), mib(limit))
	if raceEnabled {
		t.Log("race detector on: its shadow memory stays, RSS not checked")
	} else if r1 > limit {
		t.Errorf("a closed device (still referenced) keeps %.1f MiB, above the limit %.1f MiB", mib(r1-r0), mib(limit))
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}
