package enlarge

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

// The lab runs two channel ends over two real roce/qp queue pairs (two
// devices: two key tables), moving frames between them on the test's
// goroutine with a hand-driven clock, so every run produces the same frames:
// QPNs 0x11 and 0x12, PSNs 0x1000 and 0x2000, keys from seeded sources,
// addresses from fixed IOVA bases. Optionally it records a pcapng capture
// (as seen from end a) with timestamps from that clock.

const labFrame = 4096 + 128

type labOut struct {
	pool      [][]byte
	free      int
	committed [][]byte
}

func (o *labOut) TxBuffer() []byte {
	if o.free == 0 {
		return nil
	}
	o.free--
	return o.pool[o.free]
}

func (o *labOut) TxCommit(f []byte) { o.committed = append(o.committed, f) }

type labEnd struct {
	tbl  *mr.Table
	pd   *mr.PD
	cq   *qp.CQ
	q    *qp.QP
	out  *labOut
	mac  [6]byte
	ip   netip.Addr
	v    *Verbs
	pool *Pool
	ch   *Channel
	pkt  wire.Packet
}

type lab struct {
	tb   testing.TB
	a, b *labEnd
	now  int64
	cw   *capture.Writer
	pcap bytes.Buffer
	// frames holds a copy of every frame put on the wire, in order.
	frames []labFrameRec
}

type labFrameRec struct {
	fromA bool
	data  []byte
}

func newLabEnd(tb testing.TB, qpn uint32, last byte, seed int64, iova uint64) *labEnd {
	tb.Helper()
	e := &labEnd{tbl: mr.NewTable(mr.WithRand(rand.New(rand.NewSource(seed)))),
		mac: [6]byte{0x02, 0, 0, 0, 0, last}, ip: netip.AddrFrom4([4]byte{198, 51, 100, last})}
	e.out = &labOut{pool: make([][]byte, 256)}
	for i := range e.out.pool {
		e.out.pool[i] = make([]byte, labFrame)
	}
	e.out.free = len(e.out.pool)
	e.pd = e.tbl.AllocPD()
	e.cq = qp.NewCQ(4096)
	q, err := qp.New(qp.Config{Type: qp.RC, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 256, MaxRecvWR: 256, QPN: qpn})
	if err != nil {
		tb.Fatal(err)
	}
	e.q = q
	e.v = newVerbs(labQP{q}, labPD{e.pd}, e.cq, &VerbsOptions{IOVA: NewIOVASpace(iova)})
	return e
}

// labQP and labPD give a bare roce/qp queue pair and roce/mr protection
// domain the methods Verbs uses of roce's.
type labQP struct{ q *qp.QP }

func (l labQP) PostSend(wr roce.SendWR) error { return l.q.PostSend(&wr) }
func (l labQP) PostRecv(wr roce.RecvWR) error { return l.q.PostRecv(&wr) }

type labPD struct{ pd *mr.PD }

func (l labPD) RegMR(buf []byte, access roce.Access) (*roce.MR, error) {
	return l.pd.Register(buf, access)
}

func (l labPD) RegMRIOVA(buf []byte, iova uint64, access roce.Access) (*roce.MR, error) {
	return l.pd.RegisterIOVA(buf, iova, access)
}

func labConnect(tb testing.TB, e, peer *labEnd, sq, rq uint32) {
	tb.Helper()
	av := qp.AddressVector{SrcMAC: e.mac, DstMAC: peer.mac, SrcIP: e.ip, DstIP: peer.ip}
	steps := []struct {
		a qp.Attr
		m qp.AttrMask
	}{
		{qp.Attr{State: qp.Init, Access: mr.LocalWrite | mr.RemoteWrite}, qp.AttrState | qp.AttrAccessFlags},
		{qp.Attr{State: qp.RTR, AV: av, PathMTU: wire.MTU1024, DestQPN: peer.q.QPN(), RQPSN: rq, MinRNRTimer: 1, MaxDestRdAtomic: 1},
			qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN | qp.AttrMinRNRTimer | qp.AttrMaxDestRdAtomic},
		{qp.Attr{State: qp.RTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			qp.AttrState | qp.AttrSQPSN | qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := e.q.Modify(&s.a, s.m); err != nil {
			tb.Fatal(err)
		}
	}
}

// newLab connects two queue pairs and builds a channel end on each.
func newLab(tb testing.TB, cfg *Config, record bool) *lab {
	tb.Helper()
	l := &lab{tb: tb, now: 1_000_000_000,
		a: newLabEnd(tb, 0x11, 1, 1, 0x7f0000000000), b: newLabEnd(tb, 0x12, 2, 2, 0x7f8000000000)}
	labConnect(tb, l.a, l.b, 0x1000, 0x2000)
	labConnect(tb, l.b, l.a, 0x2000, 0x1000)
	if record {
		var err error
		if l.cw, err = capture.NewWriter(&l.pcap, &capture.WriterOptions{Application: "xdproce enlarge golden"}); err != nil {
			tb.Fatal(err)
		}
		if _, err := l.cw.AddInterface(capture.Interface{Name: "a", Description: "enlarge lab, end a"}); err != nil {
			tb.Fatal(err)
		}
	}
	slot := DefaultSmall
	if cfg != nil && cfg.Mode == Baseline {
		slot = BaselineSlotSize
	}
	for _, e := range []*labEnd{l.a, l.b} {
		var err error
		if e.pool, err = NewPool(e.v, 16, slot); err != nil {
			tb.Fatal(err)
		}
		if e.ch, err = New(e.v, e.pool, cfg); err != nil {
			tb.Fatal(err)
		}
	}
	if err := l.a.ch.Connect(l.b.ch.Endpoint()); err != nil {
		tb.Fatal(err)
	}
	if err := l.b.ch.Connect(l.a.ch.Endpoint()); err != nil {
		tb.Fatal(err)
	}
	return l
}

// transmit runs e's engine and delivers its frames to the peer.
func (l *lab) transmit(e, peer *labEnd) int {
	e.q.Progress(l.now, e.out)
	n := len(e.out.committed)
	for _, f := range e.out.committed {
		c := append([]byte(nil), f...)
		l.frames = append(l.frames, labFrameRec{fromA: e == l.a, data: c})
		if l.cw != nil {
			dir := capture.DirOutbound
			if e != l.a {
				dir = capture.DirInbound
			}
			if err := l.cw.WritePacketNanos(0, l.now, dir, c); err != nil {
				l.tb.Fatal(err)
			}
		}
		l.now += 1000
		if err := peer.pkt.Decode(c); err != nil {
			l.tb.Fatalf("frame from the engine does not decode: %v", err)
		}
		peer.q.Receive(&peer.pkt, l.now, peer.out)
	}
	e.out.committed = e.out.committed[:0]
	e.out.free = len(e.out.pool)
	return n
}

// settle runs engines and channels until nothing moves.
func (l *lab) settle() {
	l.tb.Helper()
	idle := 0
	for range 100000 {
		n := l.transmit(l.a, l.b) + l.transmit(l.b, l.a)
		for _, e := range []*labEnd{l.a, l.b} {
			if err := e.ch.Progress(); err != nil {
				l.tb.Fatalf("channel progress: %v", err)
			}
		}
		l.now += 1000
		if n == 0 {
			if idle++; idle > 3 {
				return
			}
		} else {
			idle = 0
		}
	}
	l.tb.Fatal("lab does not settle")
}

// send calls Send on end e until it has sent all of msg, settling in between.
func (l *lab) send(e *labEnd, msg []byte) {
	l.tb.Helper()
	sent := 0
	for range 1000 {
		k, err := e.ch.Send([][]byte{msg[sent:]})
		if err != nil {
			l.tb.Fatalf("send: %v", err)
		}
		sent += k
		l.settle()
		if sent == len(msg) {
			return
		}
	}
	l.tb.Fatalf("sent only %d of %d B", sent, len(msg))
}

// recv reads one whole message at end e.
func (l *lab) recv(e *labEnd, max int) []byte {
	l.tb.Helper()
	buf := make([]byte, max)
	n := 0
	for range 1000 {
		k, end, err := e.ch.Recv(buf[n:])
		if err != nil {
			l.tb.Fatalf("recv: %v", err)
		}
		n += k
		if end {
			l.settle()
			return buf[:n]
		}
		l.settle()
	}
	l.tb.Fatal("no message")
	return nil
}

// transfer sends msg from a to b, reading pieces as they come.
func (l *lab) transfer(msg []byte) {
	l.tb.Helper()
	buf := make([]byte, len(msg)+1)
	sent, got := 0, 0
	for range 10000 {
		if sent < len(msg) {
			k, err := l.a.ch.Send([][]byte{msg[sent:]})
			if err != nil {
				l.tb.Fatalf("send: %v", err)
			}
			sent += k
		}
		l.settle()
		k, end, err := l.b.ch.Recv(buf[got:])
		if err != nil {
			l.tb.Fatalf("recv: %v", err)
		}
		got += k
		if end {
			l.settle()
			if !bytes.Equal(buf[:got], msg) {
				l.tb.Fatalf("%d B message damaged (got %d B)", len(msg), got)
			}
			return
		}
	}
	l.tb.Fatalf("%d B message not delivered (sent %d, got %d)", len(msg), sent, got)
}
