package roce_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce"
)

// sidrAccept accepts one SIDR request on l with q and priv, or rejects it
// when q is nil; the request is sent on got.
func sidrAccept(ctx context.Context, l *roce.SIDRListener, q *roce.QP, priv []byte) <-chan *roce.SIDRRequest {
	got := make(chan *roce.SIDRRequest, 1)
	go func() {
		defer close(got)
		r, err := l.Accept(ctx)
		if err != nil {
			return
		}
		if q == nil {
			err = r.Reject(priv)
		} else {
			err = r.Accept(q, priv)
		}
		if err == nil {
			got <- r
		}
	}()
	return got
}

// TestSIDRResolveSend: DialSIDR learns the QPN and Q_Key of the UD queue
// pair the listener accepts with (activated with UDPQKey from RESET), with
// private data both ways, over IPv4 and IPv6; a UD SEND to the reply's AH
// lands in that queue pair.
func TestSIDRResolveSend(t *testing.T) {
	v6a, v6b := netip.MustParseAddr("2001:db8::a"), netip.MustParseAddr("2001:db8::b")
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
	}{{"ipv4", addrA, addrB}, {"ipv6", v6a, v6b}} {
		t.Run(tc.name, func(t *testing.T) {
			la, lb, err := pipe.New(pipe.Config{})
			if err != nil {
				t.Fatal(err)
			}
			p := newDevicesAt(t, la, lb, tc.src, tc.dst)
			l, err := p.b.ListenSIDR(7174)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			x := newSide(t, p.a, roce.UD, connCfg{bufSize: 4096}, 0)
			y := newSide(t, p.b, roce.UD, connCfg{bufSize: 4096}, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			got := sidrAccept(ctx, l, y.qp, []byte("udp welcome"))
			rep, err := p.a.DialSIDR(ctx, netip.AddrPortFrom(tc.dst, 7174), []byte("udp hello"), &shortCM)
			if err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r == nil {
				t.Fatal("the listener did not accept")
			}
			if rep.QPN != y.qp.QPN() || rep.QKey != roce.UDPQKey || rep.AH.QPN != rep.QPN || rep.AH.QKey != roce.UDPQKey {
				t.Fatalf("reply QPN %#x Q_Key %#x (AH %#x %#x), want %#x %#x", rep.QPN, rep.QKey, rep.AH.QPN, rep.AH.QKey, y.qp.QPN(), roce.UDPQKey)
			}
			if len(rep.PrivateData) != 136 || !bytes.HasPrefix(rep.PrivateData, []byte("udp welcome")) {
				t.Fatalf("SIDR_REP private data %q", rep.PrivateData)
			}
			if len(r.PrivateData) != 180 || !bytes.HasPrefix(r.PrivateData, []byte("udp hello")) {
				t.Fatalf("SIDR_REQ private data %q", r.PrivateData)
			}
			if rep.Remote != netip.AddrPortFrom(tc.dst, 7174) || r.Remote.Addr() != tc.src || r.Remote.Port() < 32768 {
				t.Fatalf("remotes %v %v", rep.Remote, r.Remote)
			}
			if st, attr := y.qp.Query(); st != roce.StateRTS || attr.QKey != roce.UDPQKey {
				t.Fatalf("accepted queue pair in %v with Q_Key %#x", st, attr.QKey)
			}
			// As udaddy: SEND with immediate (the sender's QPN) to the reply's AH.
			if err := x.qp.Activate(roce.UDPQKey, 0); err != nil {
				t.Fatal(err)
			}
			fill(x.buf[:100], 9)
			if err := y.qp.PostRecv(roce.RecvWR{ID: 1, SGL: []roce.SGE{y.sge(0, 140)}}); err != nil {
				t.Fatal(err)
			}
			if err := x.qp.PostSendAH(roce.SendWR{ID: 2, Opcode: roce.WRSendImm, Imm: x.qp.QPN(), Flags: roce.Signaled,
				SGL: []roce.SGE{x.sge(0, 100)}}, rep.AH); err != nil {
				t.Fatal(err)
			}
			if wc := waitWC(t, y.rcq); wc.Status != roce.WCSuccess || wc.ByteLen != 140 || wc.SrcQPN != x.qp.QPN() || wc.ImmData != x.qp.QPN() {
				t.Fatalf("receive %+v", wc)
			}
			if !bytes.Equal(y.buf[40:140], x.buf[:100]) {
				t.Fatal("UD payload differs")
			}
			// Answering twice is refused.
			if err := r.Accept(y.qp, nil); err == nil {
				t.Fatal("a second answer to the same request was sent")
			}
			if in, kept, out := p.b.CMSIDR(); in != 0 || kept != 1 || out != 0 {
				t.Fatalf("listener side: %d pending, %d kept, %d dialing", in, kept, out)
			}
			if in, kept, out := p.a.CMSIDR(); in+kept+out != 0 {
				t.Fatalf("dialing side: %d pending, %d kept, %d dialing", in, kept, out)
			}
		})
	}
}

// TestSIDRStatuses: a reject with private data, a port nobody listens on
// (also a port of RDMA_PS_TCP), a listener closed with a request pending,
// and a peer that does not answer.
func TestSIDRStatuses(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{})
	l, err := p.b.ListenSIDR(7000)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := p.b.ListenCM(7001, &shortCM)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if _, err := p.b.ListenSIDR(7000); err == nil {
		t.Fatal("a second listener on UDP port 7000")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := sidrAccept(ctx, l, nil, []byte("go away"))
	_, err = p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7000), nil, &shortCM)
	var se *roce.SIDRError
	if !errors.As(err, &se) || se.Status != roce.SIDRReject || string(se.PrivateData) != "go away" {
		t.Fatalf("reject: %v (%+v)", err, se)
	}
	<-got
	for _, port := range []uint16{7001, 7002} {
		_, err = p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, port), nil, &shortCM)
		if !errors.As(err, &se) || se.Status != roce.SIDRUnsupported {
			t.Fatalf("port %d: %v", port, err)
		}
	}
	if _, err := p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7000), make([]byte, 181), &shortCM); err == nil {
		t.Fatal("181 bytes of private data sent")
	}
	// A request the application never took is rejected by Close.
	dialed := make(chan error, 1)
	go func() {
		_, err := p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7000), nil, &shortCM)
		dialed <- err
	}()
	for {
		if in, _, _ := p.b.CMSIDR(); in == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-dialed; !errors.As(err, &se) || se.Status != roce.SIDRReject {
		t.Fatalf("closed listener: %v", err)
	}
	if _, err := l.Accept(ctx); err == nil {
		t.Fatal("accept on a closed listener")
	}
	// A device that does not answer: the SIDR_REQ is resent MaxRetries times.
	p2, _, _ := newPipeDevices(t, pipe.Config{})
	_, err = p2.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7000), nil, &roce.CMOptions{ResponseTimeout: 12, MaxRetries: 2})
	if !errors.Is(err, roce.ErrCMTimeout) {
		t.Fatalf("no answer: %v", err)
	}
	for _, d := range []*roce.Device{p.a, p.b, p2.a} {
		if in, _, out := d.CMSIDR(); in+out != 0 {
			t.Fatalf("%d pending, %d dialing left", in, out)
		}
	}
}

// TestSIDRRetryGetsKeptAnswer: the listener's SIDR_REP is lost; the
// dialer's retry is answered with the kept SIDR_REP, not handed to the
// application again. With every frame duplicated one request reaches the
// listener too.
func TestSIDRRetryGetsKeptAnswer(t *testing.T) {
	p, _, lb := newPipeDevices(t, pipe.Config{Seed: 5, AtoB: pipe.Faults{Duplicate: 1}})
	l, err := p.b.ListenSIDR(7174)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	y := newSide(t, p.b, roce.UD, connCfg{bufSize: 4096}, 0)
	if err := lb.SetFaults(pipe.Faults{Loss: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type res struct {
		rep *roce.SIDRReply
		err error
	}
	dialed := make(chan res, 1)
	go func() {
		rep, err := p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7174), nil, &shortCM)
		dialed <- res{rep, err}
	}()
	r, err := l.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Accept(y.qp, []byte("kept")); err != nil {
		t.Fatal(err)
	}
	for lb.Stats().Lost == 0 { // the first SIDR_REP is gone
		if ctx.Err() != nil {
			t.Fatal("the SIDR_REP was not sent")
		}
		time.Sleep(time.Millisecond)
	}
	if err := lb.SetFaults(pipe.Faults{}); err != nil {
		t.Fatal(err)
	}
	d := <-dialed
	if d.err != nil {
		t.Fatal(d.err)
	}
	if d.rep.QPN != y.qp.QPN() || !bytes.HasPrefix(d.rep.PrivateData, []byte("kept")) {
		t.Fatalf("reply %+v", d.rep)
	}
	if st := lb.Stats(); st.Frames < 2 {
		t.Fatalf("the listener sent %d frames: the kept SIDR_REP was not resent", st.Frames)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if r, err := l.Accept(short); err == nil {
		t.Fatalf("a second request from %v", r.Remote)
	}
	if in, kept, out := p.b.CMSIDR(); in != 0 || kept != 1 || out != 0 {
		t.Fatalf("%d pending, %d kept, %d dialing", in, kept, out)
	}
}

// TestSIDRLossy: with 5 % of frames lost each way, 20 resolutions all
// succeed through the retries; the kept answers stay bounded.
func TestSIDRLossy(t *testing.T) {
	p, _, _ := newPipeDevices(t, pipe.Config{Seed: 13, AtoB: pipe.Faults{Loss: 0.05}, BtoA: pipe.Faults{Loss: 0.05}})
	l, err := p.b.ListenSIDR(7174)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	y := newSide(t, p.b, roce.UD, connCfg{bufSize: 4096}, 0)
	if err := y.qp.Activate(0x4242, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() {
		for {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			r.Accept(y.qp, nil)
		}
	}()
	for i := range 20 {
		rep, err := p.a.DialSIDR(ctx, netip.AddrPortFrom(addrB, 7174), nil, &shortCM)
		if err != nil {
			t.Fatalf("resolution %d: %v", i, err)
		}
		if rep.QPN != y.qp.QPN() || rep.QKey != 0x4242 {
			t.Fatalf("resolution %d: QPN %#x Q_Key %#x", i, rep.QPN, rep.QKey)
		}
	}
}
