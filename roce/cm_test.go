package roce_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// shortCM keeps the CM's waits short: 4.096 µs · 2^14 ≈ 67 ms per try.
var shortCM = roce.CMOptions{ResponseTimeout: 14, MaxRetries: 15}

// cmPair dials from p.a to a listener on p.b and accepts there, with the
// given private data each way; it returns both connections and their sides.
func cmPair(t *testing.T, p *devPair, l *roce.CMListener, reqPriv, repPriv []byte) (x, y *side, kx, ky *roce.CMConn) {
	return cmPairTo(t, p, l, addrB, reqPriv, repPriv)
}

func cmPairTo(t *testing.T, p *devPair, l *roce.CMListener, dst netip.Addr, reqPriv, repPriv []byte) (x, y *side, kx, ky *roce.CMConn) {
	t.Helper()
	return cmPairWith(t, p, l, dst, reqPriv, repPriv, &shortCM)
}

// cmPairWith is cmPairTo with the dialer's CM options o.
func cmPairWith(t *testing.T, p *devPair, l *roce.CMListener, dst netip.Addr, reqPriv, repPriv []byte, o *roce.CMOptions) (x, y *side, kx, ky *roce.CMConn) {
	t.Helper()
	x = newSide(t, p.a, roce.RC, connCfg{bufSize: 1 << 16}, 0)
	y = newSide(t, p.b, roce.RC, connCfg{bufSize: 1 << 16}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		k   *roce.CMConn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			acc <- res{nil, err}
			return
		}
		if !bytes.HasPrefix(r.PrivateData, reqPriv) || len(r.PrivateData) != 56 {
			acc <- res{nil, errors.New("request private data " + string(r.PrivateData))}
			return
		}
		k, err := r.Accept(ctx, y.qp, repPriv)
		acc <- res{k, err}
	}()
	kx, err := p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(dst, l.Port()), reqPriv, o)
	if err != nil {
		t.Fatal(err)
	}
	ra := <-acc
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	return x, y, kx, ra.k
}

func TestCMConnectSendDisconnect(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x, y, kx, ky := cmPair(t, p, l, []byte("hello from a"), []byte("welcome from b"))
	if !bytes.HasPrefix(kx.PrivateData, []byte("welcome from b")) || len(kx.PrivateData) != 196 {
		t.Fatalf("REP private data %q", kx.PrivateData)
	}
	if kx.Remote != netip.AddrPortFrom(addrB, 7174) || ky.Remote.Addr() != addrA || ky.Remote.Port() < 32768 {
		t.Fatalf("remotes %v %v", kx.Remote, ky.Remote)
	}
	for _, s := range []*side{x, y} {
		if st := s.qp.State(); st != roce.StateRTS {
			t.Fatalf("qp %#x in %v after the exchange", s.qp.QPN(), st)
		}
	}
	// The queue pairs are connected: a SEND each way lands.
	for _, d := range []struct{ from, to *side }{{x, y}, {y, x}} {
		fill(d.from.buf[:100], 3)
		if err := d.to.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{d.to.sge(1000, 100)}}); err != nil {
			t.Fatal(err)
		}
		if err := d.from.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{d.from.sge(0, 100)}}); err != nil {
			t.Fatal(err)
		}
		if wc := waitWC(t, d.to.rcq); wc.Status != roce.WCSuccess || wc.ByteLen != 100 {
			t.Fatalf("recv %+v", wc)
		}
		if wc := waitWC(t, d.from.scq); wc.Status != roce.WCSuccess {
			t.Fatalf("send %+v", wc)
		}
		if !bytes.Equal(d.to.buf[1000:1100], d.from.buf[:100]) {
			t.Fatal("data differ")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := kx.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ky.Done():
	case <-ctx.Done():
		t.Fatal("the passive side did not see the disconnect")
	}
	for _, s := range []*side{x, y} {
		if st := s.qp.State(); st != roce.StateError {
			t.Fatalf("qp %#x in %v after disconnect", s.qp.QPN(), st)
		}
	}
	if err := ky.Disconnect(ctx); err != nil {
		t.Fatalf("disconnect after the peer's: %v", err)
	}
	if n := p.a.CMConns() + p.b.CMConns(); n != 0 {
		t.Fatalf("%d connections left in the CM agents", n)
	}
}

func TestCMRejects(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenCM(7000, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	x := newSide(t, p.a, roce.RC, connCfg{bufSize: 4096}, 0)
	_, err = p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7000), nil, &shortCM)
	var rej *roce.CMRejectError
	if !errors.As(err, &rej) || rej.Reason != roce.CMRejConsumerDefined || string(rej.PrivateData) != "go away" {
		t.Fatalf("consumer reject: %v (%+v)", err, rej)
	}
	_, err = p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7001), nil, &shortCM)
	if !errors.As(err, &rej) || rej.Reason != roce.CMRejInvalidServiceID {
		t.Fatalf("unknown service: %v", err)
	}
	if st := x.qp.State(); st != roce.StateReset {
		t.Fatalf("rejected qp in %v", st)
	}
	// A device that does not answer: the REQ is resent MaxRetries times.
	start := time.Now()
	p2, _, _ := newPipeDevices(t, pipe.Config{})
	y := newSide(t, p2.a, roce.RC, connCfg{bufSize: 4096}, 0)
	_, err = p2.a.DialCM(ctx, y.qp, netip.AddrPortFrom(addrB, 7000), nil, &roce.CMOptions{ResponseTimeout: 12, MaxRetries: 2})
	if !errors.Is(err, roce.ErrCMTimeout) {
		t.Fatalf("no answer: %v", err)
	}
	if d := time.Since(start); d < 3*16*time.Millisecond {
		t.Fatalf("gave up after %v, before 3 tries of 16 ms", d)
	}
	if n := p.a.CMConns() + p2.a.CMConns(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

// TestCMDuplicates: every frame delivered twice (REQ, REP, RTU, DREQ, DREP
// and the RC traffic): one request reaches the listener, the connection
// works, disconnect completes.
func TestCMDuplicates(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{Seed: 3, AtoB: pipe.Faults{Duplicate: 1}, BtoA: pipe.Faults{Duplicate: 1}})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, _, kx, _ := cmPair(t, p, l, []byte("dup"), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if r, err := l.Accept(ctx); err == nil {
		t.Fatalf("a second request from %v", r.Remote)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := kx.Disconnect(ctx2); err != nil {
		t.Fatal(err)
	}
}

// TestCMLossy: with 5 % of frames lost each way, connections still
// establish through the CM's retries.
func TestCMLossy(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{Seed: 11, AtoB: pipe.Faults{Loss: 0.05}, BtoA: pipe.Faults{Loss: 0.05}})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 20 {
		_, _, kx, _ := cmPair(t, p, l, []byte("lossy"), []byte("ok"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := kx.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
}

// TestCMIPv6: the IP CM header carries IPv6 addresses; the connection runs
// over the devices' IPv6 GIDs.
func TestCMIPv6(t *testing.T) {
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v6a, v6b := netip.MustParseAddr("2001:db8::a"), netip.MustParseAddr("2001:db8::b")
	p := newDevicesAt(t, la, lb, v6a, v6b)
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x, y, kx, ky := cmPairTo(t, p, l, v6b, []byte("v6"), []byte("v6 ok"))
	if ky.Remote.Addr() != v6a || kx.Remote.Addr() != v6b || !bytes.HasPrefix(kx.PrivateData, []byte("v6 ok")) {
		t.Fatalf("remotes %v %v, REP data %q", kx.Remote, ky.Remote, kx.PrivateData)
	}
	if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, y.rcq); wc.Status != roce.WCSuccess {
		t.Fatalf("recv %+v", wc)
	}
}

// TestCMStale: a REQ from a queue pair that is already connected here is
// answered REJ stale connection.
func TestCMStale(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x, _, _, _ := cmPair(t, p, l, nil, nil)
	// A second queue pair cannot reuse x's QPN; reset x itself and dial
	// again from the same QPN while b still holds the connection.
	if err := x.qp.Modify(&roce.Attr{State: roce.StateReset}, roce.AttrState); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7174), nil, &shortCM)
	var rej *roce.CMRejectError
	if !errors.As(err, &rej) || rej.Reason != roce.CMRejStaleConnection {
		t.Fatalf("second REQ from QPN %#x: %v", x.qp.QPN(), err)
	}
}

// TestCMAcceptTimeout: the RTU never arrives (the active side's frames are
// lost from the REQ on): the passive side resends its REP as often as the
// REQ allows, then gives up with ErrCMTimeout, sends REJ timeout (which
// reaches the active side and ends its connection) and both queue pairs
// end in ERROR.
func TestCMAcceptTimeout(t *testing.T) {
	p, la, _ := newPipeDevices(t, pipe.Config{})
	o := &roce.CMOptions{ResponseTimeout: 12, MaxRetries: 3} // 16 ms per try
	l, err := p.b.ListenCM(7174, o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x := newSide(t, p.a, roce.RC, connCfg{bufSize: 4096}, 0)
	y := newSide(t, p.b, roce.RC, connCfg{bufSize: 4096}, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dialed := make(chan *roce.CMConn, 1)
	go func() {
		k, err := p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7174), nil, o)
		if err != nil {
			t.Error(err)
		}
		dialed <- k
	}()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := la.SetFaults(pipe.Faults{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = r.Accept(ctx, y.qp, nil)
	if !errors.Is(err, roce.ErrCMTimeout) {
		t.Fatalf("accept without RTU: %v", err)
	}
	if d := time.Since(start); d < 4*16*time.Millisecond {
		t.Fatalf("gave up after %v, before 4 tries of 16 ms", d)
	}
	kx := <-dialed
	if kx == nil {
		t.FailNow()
	}
	select {
	case <-kx.Done():
	case <-ctx.Done():
		t.Fatal("the active side kept the connection after REJ timeout")
	}
	for _, s := range []*side{x, y} {
		if st := s.qp.State(); st != roce.StateError {
			t.Fatalf("qp %#x in %v", s.qp.QPN(), st)
		}
	}
	if n := p.a.CMConns() + p.b.CMConns(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

// TestCMInitQP: queue pairs in INIT with a receive posted (as
// rdma_create_qp leaves them) are connected by the CM; a SEND sent the
// moment DialCM returns finds the receive (no RNR NAK).
func TestCMInitQP(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenCM(7174, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	x := newSide(t, p.a, roce.RC, connCfg{bufSize: 4096}, 0)
	y := newSide(t, p.b, roce.RC, connCfg{bufSize: 4096}, 0)
	for _, s := range []*side{x, y} {
		if err := s.qp.Modify(&roce.Attr{State: roce.StateInit, Access: roce.LocalWrite | roce.RemoteWrite}, roce.AttrState|roce.AttrAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Accept(ctx, y.qp, nil)
		}
	}()
	if _, err := p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7174), nil, &shortCM); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(roce.SendWR{ID: 2, Opcode: roce.WRSend, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess {
		t.Fatalf("send %+v", wc)
	}
	if wc := waitWC(t, y.rcq); wc.Status != roce.WCSuccess {
		t.Fatalf("recv %+v", wc)
	}
	if st := x.qp.Stats(); st.RNRNAKsRecv != 0 {
		t.Fatalf("%d RNR NAKs: the receive posted in INIT was not there", st.RNRNAKsRecv)
	}
	// A queue pair already connected is refused.
	if _, err := p.a.DialCM(ctx, x.qp, netip.AddrPortFrom(addrB, 7174), nil, &shortCM); err == nil || !strings.Contains(err.Error(), "not RESET or INIT") {
		t.Fatalf("dial with a connected queue pair: %v", err)
	}
}

// TestCMExactResources: with ExactResources and zero READ/atomic
// resources on both sides (perftest's -R on write tests) the queue pairs
// come up with max_rd_atomic and max_dest_rd_atomic 0 and a READ is
// refused at the post; without it the zeros mean 16 and a READ lands.
func TestCMExactResources(t *testing.T) {
	for _, exact := range []bool{true, false} {
		p, _, _ := newPipeDevices(t, pipe.Config{})
		o := shortCM
		o.ExactResources = exact
		l, err := p.b.ListenCM(7174, &o)
		if err != nil {
			t.Fatal(err)
		}
		x, y, _, _ := cmPairWith(t, p, l, addrB, nil, nil, &o)
		l.Close()
		want := uint8(16)
		if exact {
			want = 0
		}
		for _, s := range []*side{x, y} {
			if _, a := s.qp.Query(); a.MaxRdAtomic != want || a.MaxDestRdAtomic != want {
				t.Errorf("exact %v: qp %#x max_rd_atomic %d, max_dest_rd_atomic %d, want %d", exact, s.qp.QPN(), a.MaxRdAtomic, a.MaxDestRdAtomic, want)
			}
		}
		fill(y.buf[:64], 7)
		err = x.qp.PostSend(roce.SendWR{ID: 1, Opcode: roce.WRRDMARead, Flags: roce.Signaled, SGL: []roce.SGE{x.sge(0, 64)},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()})
		switch {
		case exact && err == nil:
			t.Error("a READ posted on a queue pair connected with no READ resources")
		case !exact && err != nil:
			t.Errorf("READ: %v", err)
		case !exact:
			if wc := waitWC(t, x.scq); wc.Status != roce.WCSuccess || !bytes.Equal(x.buf[:64], y.buf[:64]) {
				t.Errorf("READ %+v, data equal %v", wc, bytes.Equal(x.buf[:64], y.buf[:64]))
			}
		}
	}
}
