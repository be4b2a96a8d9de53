package lmrm

import (
	"bytes"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/xdproce/xdproce/capture"
	"github.com/xdproce/xdproce/roce"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// The lab joins a requester (end a) and a provider (end b) over two bare
// roce/qp queue pairs (key tables seeded with fixed sources), carrying
// frames between them on the test's goroutine with a clock it advances by
// 1 µs a frame, so that every run puts the same bytes on the wire: QPNs 0x21
// and 0x22, PSNs 0x1000 and 0x2000, IPv4 198.51.100.1 and .2, IOVAs from
// fixed bases. It records a pcapng capture as seen from end a.

type labEnd struct {
	pd   *mr.PD
	cq   *qp.CQ
	q    *qp.QP
	mac  [6]byte
	ip   netip.Addr
	out  labOut
	pkt  wire.Packet
	name string
}

// labOut is a qp.Output that keeps what the queue pair sends.
type labOut struct {
	buf  [][]byte
	sent [][]byte
}

func (o *labOut) TxBuffer() []byte {
	if len(o.buf) == 0 {
		return nil
	}
	b := o.buf[len(o.buf)-1]
	o.buf = o.buf[:len(o.buf)-1]
	return b
}

func (o *labOut) TxCommit(f []byte) { o.sent = append(o.sent, f) }

// labQP and labPD give a bare queue pair and protection domain roce's method
// shapes.
type labQP struct{ q *qp.QP }

func (l labQP) PostSend(wr roce.SendWR) error { return l.q.PostSend(&wr) }
func (l labQP) PostRecv(wr roce.RecvWR) error { return l.q.PostRecv(&wr) }

type labPD struct{ pd *mr.PD }

func (l labPD) RegMR(b []byte, a roce.Access) (*roce.MR, error) { return l.pd.Register(b, a) }
func (l labPD) RegMRIOVA(b []byte, iova uint64, a roce.Access) (*roce.MR, error) {
	return l.pd.RegisterIOVA(b, iova, a)
}

type lab struct {
	tb   testing.TB
	a, b *labEnd
	r    *Requester
	p    *Provider
	got  [][]byte
	now  int64
	pcap bytes.Buffer
	cw   *capture.Writer
}

func newLabEnd(tb testing.TB, qpn uint32, last byte, seed int64, send, recv, cqd int) *labEnd {
	tb.Helper()
	e := &labEnd{mac: [6]byte{0x02, 0, 0, 0, 0, last}, ip: netip.AddrFrom4([4]byte{198, 51, 100, last})}
	e.pd = mr.NewTable(mr.WithRand(rand.New(rand.NewSource(seed)))).AllocPD()
	e.cq = qp.NewCQ(cqd)
	var err error
	if e.q, err = qp.New(qp.Config{Type: qp.RC, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: send, MaxRecvWR: recv, QPN: qpn}); err != nil {
		tb.Fatal(err)
	}
	return e
}

func (e *labEnd) connect(tb testing.TB, peer *labEnd, sq, rq uint32) {
	tb.Helper()
	av := qp.AddressVector{SrcMAC: e.mac, DstMAC: peer.mac, SrcIP: e.ip, DstIP: peer.ip, TTL: 64}
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.Init, Access: mr.LocalWrite | mr.RemoteWrite}, qp.AttrState | qp.AttrAccessFlags},
		{qp.Attr{State: qp.RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: peer.q.QPN(), RQPSN: rq, MinRNRTimer: 1, MaxDestRdAtomic: 1},
			qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMinRNRTimer | qp.AttrMaxDestRdAtomic},
		{qp.Attr{State: qp.RTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	} {
		if err := e.q.Modify(&s.a, s.m); err != nil {
			tb.Fatal(err)
		}
	}
}

func newLab(tb testing.TB, cfg Config, pcfg ProviderConfig) *lab {
	tb.Helper()
	rs, rr, rc := cfg.QueueDepths()
	ps, pr, pc := pcfg.QueueDepths()
	l := &lab{tb: tb, now: 1_000_000_000, a: newLabEnd(tb, 0x21, 1, 1, rs, rr, rc), b: newLabEnd(tb, 0x22, 2, 2, ps, pr, pc)}
	l.a.name, l.b.name = "a", "b"
	l.a.connect(tb, l.b, 0x1000, 0x2000)
	l.b.connect(tb, l.a, 0x2000, 0x1000)
	var err error
	if l.cw, err = capture.NewWriter(&l.pcap, &capture.WriterOptions{Application: "xdproce lmrm golden"}); err != nil {
		tb.Fatal(err)
	}
	if _, err := l.cw.AddInterface(capture.Interface{Name: "a", Description: "lmrm lab, requester end"}); err != nil {
		tb.Fatal(err)
	}
	cfg.IOVABase, pcfg.IOVABase = 0x7f0000000000, 0x7f8000000000
	if l.r, err = newRequester(labQP{l.a.q}, labPD{l.a.pd}, l.a.cq, &cfg); err != nil {
		tb.Fatal(err)
	}
	if l.p, err = newProvider(labQP{l.b.q}, labPD{l.b.pd}, l.b.cq, &pcfg, func(_ uint8, _ uint32, b []byte) {
		l.got = append(l.got, append([]byte(nil), b...))
	}); err != nil {
		tb.Fatal(err)
	}
	return l
}

// transmit runs e's queue pair and hands its frames to the peer.
func (l *lab) transmit(e, peer *labEnd) int {
	for len(e.out.buf) < 64 {
		e.out.buf = append(e.out.buf, make([]byte, 2048))
	}
	e.q.Progress(l.now, &e.out)
	n := len(e.out.sent)
	for _, f := range e.out.sent {
		dir := capture.DirOutbound
		if e == l.b {
			dir = capture.DirInbound
		}
		if err := l.cw.WritePacketNanos(0, l.now, dir, f); err != nil {
			l.tb.Fatal(err)
		}
		l.now += 1000
		if err := peer.pkt.Decode(f); err != nil {
			l.tb.Fatalf("frame from %s does not decode: %v", e.name, err)
		}
		peer.q.Receive(&peer.pkt, l.now, &peer.out)
	}
	e.out.sent = e.out.sent[:0]
	return n
}

// step moves frames once each way and runs both ends' Progress; it reports
// how many frames moved.
func (l *lab) step() int {
	l.tb.Helper()
	n := l.transmit(l.a, l.b) + l.transmit(l.b, l.a)
	if err := l.r.Progress(); err != nil {
		l.tb.Fatal(err)
	}
	if err := l.p.Progress(); err != nil {
		l.tb.Fatal(err)
	}
	l.now += 1000
	return n
}

// run steps until done reports true and nothing moves.
func (l *lab) run(done func() bool) {
	l.tb.Helper()
	for range 10000 {
		if l.step() == 0 && done() {
			return
		}
	}
	l.tb.Fatal("the lab did not settle")
}
