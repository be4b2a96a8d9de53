package roce_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// waitEvent waits up to d for an event of type typ on dev, failing the test
// on timeout; events of other types met on the way are returned too.
func waitEvent(tb testing.TB, dev *roce.Device, typ roce.AsyncEventType, d time.Duration) (roce.AsyncEvent, []roce.AsyncEvent) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var others []roce.AsyncEvent
	for {
		ev, err := dev.GetAsyncEvent(ctx)
		if err != nil {
			tb.Fatalf("waiting for %v: %v (other events: %v)", typ, err, others)
		}
		if ev.Type == typ {
			return ev, others
		}
		others = append(others, ev)
	}
}

// noEvent checks that no event arrives on dev within d.
func noEvent(tb testing.TB, dev *roce.Device, d time.Duration) {
	tb.Helper()
	select {
	case ev := <-dev.AsyncEvents():
		tb.Fatalf("unexpected event %v", ev)
	case <-time.After(d):
	}
}

// TestAsyncQPFatal: an RC requester whose peer has gone exhausts its
// retries; the work request completes with RETRY_EXC_ERR and the device
// raises QP_FATAL with the QPN. A queue pair the application moves to
// Error raises nothing.
func TestAsyncQPFatal(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	o := roce.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = 8, 1 // ≈ 1 ms, one retry
	x, y := connectRC(t, p, connCfg{bufSize: 4096, opts: &o})
	// The peer's QP disappears: frames for it are dropped, nothing answers.
	if err := y.qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	noEvent(t, p.a, 20*time.Millisecond)
	if err := x.qp.PostSend(roce.SendWR{ID: 7, Opcode: roce.WRRDMAWrite, Flags: roce.Signaled,
		SGL: []roce.SGE{x.sge(0, 64)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := waitWC(t, x.scq)
	if wc.Status != roce.WCRetryExcErr {
		t.Fatalf("completion %v, want RETRY_EXC_ERR", wc.Status)
	}
	ev, others := waitEvent(t, p.a, roce.EventQPFatal, 2*time.Second)
	if ev.QPN != x.qp.QPN() || len(others) != 0 {
		t.Fatalf("event %v (before it: %v), want QP_FATAL of qp %d alone", ev, others, x.qp.QPN())
	}
	t.Logf("event: %v", ev)
	noEvent(t, p.a, 20*time.Millisecond) // once, not per flushed request

	// A QP moved to Error by the application: no event.
	z := newSide(t, p.a, roce.RC, connCfg{bufSize: 4096}, 1)
	if err := z.qp.Modify(&roce.Attr{State: roce.StateError}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := z.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{z.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, z.rcq) // flushed: the engine has run the QP
	noEvent(t, p.a, 20*time.Millisecond)
	if n := p.a.AsyncEventsDropped(); n != 0 {
		t.Fatalf("%d events dropped", n)
	}
}

// TestAsyncCommEstablished: the first packet to a queue pair in RTR raises
// COMM_EST with its QPN, once; the requester, in RTS when its first packet
// (the ACK) arrives, raises none.
func TestAsyncCommEstablished(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	x := newSide(t, p.a, roce.RC, connCfg{bufSize: 4096}, 0x100)
	y := newSide(t, p.b, roce.RC, connCfg{bufSize: 4096}, 0x200)
	firstSend(t, p, x, y)
	// More packets, and RTS, raise nothing more; neither does the requester.
	if err := y.qp.PostRecv(roce.RecvWR{ID: 3, SGL: []roce.SGE{y.sge(0, 256)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 4, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, y.rcq)
	waitWC(t, x.scq)
	noEvent(t, p.b, 20*time.Millisecond)
	noEvent(t, p.a, time.Millisecond)

	// Both reset and connected again (y's RESET→INIT→RTR in one burst):
	// the first packet raises COMM_EST again.
	for _, s := range []*side{x, y} {
		if err := s.qp.Modify(&roce.Attr{State: roce.StateReset}, roce.AttrState); err != nil {
			t.Fatal(err)
		}
	}
	x.psn, y.psn = 0x300, 0x400
	firstSend(t, p, x, y)
	noEvent(t, p.a, time.Millisecond)
}

// firstSend takes y to RTR only (a passive side before the CM's RTU) and x
// to RTS, sends one SEND from x and checks that y raises COMM_EST, alone.
func firstSend(t *testing.T, p *devPair, x, y *side) {
	t.Helper()
	if err := y.qp.Modify(&roce.Attr{State: roce.StateInit, Access: roce.LocalWrite | roce.RemoteWrite}, roce.AttrState|roce.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	av, err := p.b.ResolveAV(x.endpoint(t).GID, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if err := y.qp.Modify(&roce.Attr{State: roce.StateRTR, PathMTU: p.b.PathMTU(), DestQPN: x.qp.QPN(),
		RQPSN: x.psn, MaxDestRdAtomic: 1, MinRNRTimer: 12, AV: av},
		roce.AttrState|roce.AttrPathMTU|roce.AttrDestQPN|roce.AttrRQPSN|roce.AttrMaxDestRdAtomic|
			roce.AttrMinRNRTimer|roce.AttrAV); err != nil {
		t.Fatal(err)
	}
	if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(0, 256)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.Connect(x.psn, y.endpoint(t), nil); err != nil {
		t.Fatal(err)
	}
	noEvent(t, p.b, 20*time.Millisecond) // nothing received yet
	if err := x.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.rcq); wc.Status != roce.WCSuccess {
		t.Fatalf("receive: %v", wc.Status)
	}
	ev, others := waitEvent(t, p.b, roce.EventCommEstablished, 2*time.Second)
	if ev.QPN != y.qp.QPN() || len(others) != 0 {
		t.Fatalf("event %v (before it: %v), want COMM_EST of qp %d", ev, others, y.qp.QPN())
	}
	if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess {
		t.Fatalf("send: %v", wc.Status)
	}
}

// TestAsyncEventsOverflow: a full queue drops and counts, and Close closes
// the channel after the queued events.
func TestAsyncEventsOverflow(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := roce.NewDevice(la, &roce.Options{Addrs: []netip.Addr{addrA}})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := d.CreateCQ(4)
	pd := d.AllocPD()
	n := roce.AsyncEventQueueLen + 5
	for i := range n {
		// Each QP fails at once: RTS towards a peer that is not there,
		// with one retry of ~33 µs.
		q, err := pd.CreateQP(roce.QPConfig{Type: roce.RC, SendCQ: cq, RecvCQ: cq, MaxSendWR: 1, MaxRecvWR: 1})
		if err != nil {
			t.Fatal(err)
		}
		o := roce.DefaultConnectOptions()
		o.Timeout, o.RetryCnt = 3, 0
		if err := q.Connect(0, roce.Endpoint{QPN: 0x999, GID: roce.GIDFromIP(addrB)}, &o); err != nil {
			t.Fatal(err)
		}
		if err := q.PostSend(roce.SendWR{Opcode: roce.WRSend}); err != nil {
			t.Fatalf("qp %d: %v", i, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for d.AsyncEventsDropped() < 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := d.AsyncEventsDropped(); got != 5 {
		t.Fatalf("dropped %d, want 5", got)
	}
	d.Close()
	got := 0
	for ev := range d.AsyncEvents() {
		if ev.Type != roce.EventQPFatal {
			t.Fatalf("event %v", ev)
		}
		got++
	}
	if got != roce.AsyncEventQueueLen {
		t.Fatalf("read %d events, want %d", got, roce.AsyncEventQueueLen)
	}
	if _, err := d.GetAsyncEvent(context.Background()); err != roce.ErrClosed {
		t.Fatalf("GetAsyncEvent after close: %v", err)
	}
}

// TestAsyncEventRaiseAllocs: raising an event, queued or dropped on a full
// queue, allocates nothing (the engine raises them).
func TestAsyncEventRaiseAllocs(t *testing.T) {
	la, _, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := roce.NewDevice(la, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ev := roce.AsyncEvent{Type: roce.EventQPFatal, QPN: 0x11}
	if a := testing.AllocsPerRun(roce.AsyncEventQueueLen/2, func() { d.Raise(ev) }); a != 0 {
		t.Errorf("%v allocations per queued event", a)
	}
	for range roce.AsyncEventQueueLen {
		d.Raise(ev)
	}
	if a := testing.AllocsPerRun(100, func() { d.Raise(ev) }); a != 0 {
		t.Errorf("%v allocations per dropped event", a)
	}
	if d.AsyncEventsDropped() == 0 {
		t.Error("a full queue dropped nothing")
	}
}
