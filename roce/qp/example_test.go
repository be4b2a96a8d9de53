package qp_test

import (
	"fmt"
	"net/netip"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/pipe"
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// linkOut is a qp.Output over a link: one buffer at a time, sent at once.
type linkOut struct {
	l   link.Link
	buf [][]byte
}

func (o *linkOut) TxBuffer() []byte {
	if o.l.Alloc(o.buf[:1]) == 0 {
		return nil
	}
	return o.buf[0]
}

func (o *linkOut) TxCommit(f []byte) { o.buf[0] = f; o.l.Send(o.buf[:1]) }

// side is one device: a link end, a memory table and one RC queue pair.
type side struct {
	l   link.Link
	out *linkOut
	tbl *mr.Table
	pd  *mr.PD
	cq  *qp.CQ
	q   *qp.QP
	rx  [][]byte
	pkt wire.Packet
}

func newSide(l link.Link, qpn uint32) *side {
	s := &side{l: l, out: &linkOut{l: l, buf: make([][]byte, 1)}, tbl: mr.NewTable(), cq: qp.NewCQ(16), rx: make([][]byte, 16)}
	s.pd = s.tbl.AllocPD()
	s.q, _ = qp.New(qp.Config{Type: qp.RC, PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, QPN: qpn})
	return s
}

// run is a progress engine reduced to its bones: receive, hand each frame
// to the QP, let the QP send.
func (s *side) run(now int64) {
	n, _ := s.l.Receive(s.rx)
	for _, f := range s.rx[:n] {
		if s.pkt.Decode(f) == nil && s.pkt.BTH.DestQPN == s.q.QPN() {
			s.q.Receive(&s.pkt, now, s.out)
		}
	}
	s.q.Progress(now, s.out)
}

func connect(s *side, local, remote netip.Addr, peer uint32, sq, rq uint32) {
	s.q.Modify(&qp.Attr{State: qp.Init, Access: mr.RemoteWrite}, qp.AttrState|qp.AttrAccessFlags)
	s.q.Modify(&qp.Attr{State: qp.RTR, AV: qp.AddressVector{SrcIP: local, DstIP: remote}, PathMTU: wire.MTU1024,
		DestQPN: peer, RQPSN: rq, MaxDestRdAtomic: 1, MinRNRTimer: 12},
		qp.AttrState|qp.AttrAV|qp.AttrPathMTU|qp.AttrDestQPN|qp.AttrRQPSN|qp.AttrMaxDestRdAtomic|qp.AttrMinRNRTimer)
	s.q.Modify(&qp.Attr{State: qp.RTS, SQPSN: sq, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		qp.AttrState|qp.AttrSQPSN|qp.AttrTimeout|qp.AttrRetryCnt|qp.AttrRNRRetry|qp.AttrMaxRdAtomic)
}

// An RDMA WRITE from one queue pair into another's memory over an in-memory
// link pair.
func Example() {
	la, lb, err := pipe.New(pipe.Config{})
	if err != nil {
		panic(err)
	}
	defer la.Close()
	defer lb.Close()
	a, b := newSide(la, 0x11), newSide(lb, 0x12)
	ipA, ipB := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2")
	connect(a, ipA, ipB, 0x12, 100, 200)
	connect(b, ipB, ipA, 0x11, 200, 100)

	src := []byte("hello, rdma!")
	dst := make([]byte, 64)
	ms, _ := a.pd.Register(src, 0)
	md, _ := b.pd.Register(dst, mr.LocalWrite|mr.RemoteWrite)
	a.q.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRRDMAWrite, Flags: qp.Signaled,
		SGL:        []mr.SGE{{Addr: ms.Addr(), Length: uint32(len(src)), LKey: ms.LKey()}},
		RemoteAddr: md.Addr() + 8, RKey: md.RKey()})

	wcs := make([]qp.WC, 1)
	for now := int64(1); ; now++ {
		a.run(now)
		b.run(now)
		if n, _ := a.cq.Poll(wcs); n == 1 {
			break
		}
	}
	fmt.Println(wcs[0].Status, wcs[0].Opcode)
	fmt.Printf("%q\n", dst[8:8+len(src)])
	// Output:
	// IBV_WC_SUCCESS IBV_WC_RDMA_WRITE
	// "hello, rdma!"
}
