package am

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

// The lab joins two endpoints over two bare roce/qp queue pairs (two key
// tables seeded with fixed sources), carrying frames between them on the
// test's goroutine with a clock it advances by 1 µs a frame, so that every
// run puts the same bytes on the wire: QPNs 0x11 and 0x12, PSNs 0x1000 and
// 0x2000, IPv4 198.51.100.1 and .2, IOVAs from fixed bases. It records a
// pcapng capture as seen from end a.

type labEnd struct {
	pd   *mr.PD
	cq   *qp.CQ
	q    *qp.QP
	ep   *Endpoint
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
	now  int64
	pcap bytes.Buffer
	cw   *capture.Writer
}

func newLabEnd(tb testing.TB, qpn uint32, last byte, seed int64) *labEnd {
	tb.Helper()
	e := &labEnd{mac: [6]byte{0x02, 0, 0, 0, 0, last}, ip: netip.AddrFrom4([4]byte{198, 51, 100, last})}
	e.pd = mr.NewTable(mr.WithRand(rand.New(rand.NewSource(seed)))).AllocPD()
	send, recv, cqd, err := labConfig.QueueDepths()
	if err != nil {
		tb.Fatal(err)
	}
	e.cq = qp.NewCQ(cqd)
	if e.q, err = qp.New(qp.Config{Type: qp.RC, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: send, MaxRecvWR: recv, QPN: qpn}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// labConfig: small inline size and MTU 1024, so that a 3000-byte write is a
// READ of three packets.
var labConfig = Config{Inline: 256, Depth: 4, MaxRMA: 2}

func (e *labEnd) connect(tb testing.TB, peer *labEnd, sq, rq uint32) {
	tb.Helper()
	av := qp.AddressVector{SrcMAC: e.mac, DstMAC: peer.mac, SrcIP: e.ip, DstIP: peer.ip, TTL: 64}
	all := mr.LocalWrite | mr.RemoteWrite | mr.RemoteRead
	for _, s := range []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.Init, Access: all}, qp.AttrState | qp.AttrAccessFlags},
		{qp.Attr{State: qp.RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: peer.q.QPN(), RQPSN: rq, MinRNRTimer: 1, MaxDestRdAtomic: 4},
			qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMinRNRTimer | qp.AttrMaxDestRdAtomic},
		{qp.Attr{State: qp.RTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	} {
		if err := e.q.Modify(&s.a, s.m); err != nil {
			tb.Fatal(err)
		}
	}
}

func newLab(tb testing.TB) *lab {
	tb.Helper()
	l := &lab{tb: tb, now: 1_000_000_000, a: newLabEnd(tb, 0x11, 1, 1), b: newLabEnd(tb, 0x12, 2, 2)}
	l.a.name, l.b.name = "a", "b"
	l.a.connect(tb, l.b, 0x1000, 0x2000)
	l.b.connect(tb, l.a, 0x2000, 0x1000)
	var err error
	if l.cw, err = capture.NewWriter(&l.pcap, &capture.WriterOptions{Application: "xdproce am golden"}); err != nil {
		tb.Fatal(err)
	}
	if _, err := l.cw.AddInterface(capture.Interface{Name: "a", Description: "am lab, end a"}); err != nil {
		tb.Fatal(err)
	}
	for i, e := range []*labEnd{l.a, l.b} {
		cfg := labConfig
		cfg.IOVABase = 0x7f0000000000 + uint64(i)<<39
		if e.ep, err = newEndpoint(labQP{e.q}, labPD{e.pd}, e.cq, &cfg); err != nil {
			tb.Fatal(err)
		}
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

// run moves frames and calls both endpoints' Progress until done reports
// true and nothing moves.
func (l *lab) run(done func() bool) {
	l.tb.Helper()
	for range 10000 {
		n := l.transmit(l.a, l.b) + l.transmit(l.b, l.a)
		for _, e := range []*labEnd{l.a, l.b} {
			if err := e.ep.Progress(); err != nil {
				l.tb.Fatal(err)
			}
		}
		if n == 0 && done() {
			return
		}
		l.now += 1000
	}
	l.tb.Fatal("the lab did not settle")
}
