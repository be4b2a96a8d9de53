package qp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/wire"
)

// Third-party operations (docs/ooo.md, Third party): a controller C posts a
// WROOO3PRead on its OOO queue pair connected to the data source S; S
// checks the request's context, key and tid as for a READ, and streams
// OOO_3P_WRITE packets to the sink T named in the request; T places them
// by the WRITE rules and sends the completion to C, not to S.
//
// Admission: an OOO queue pair acts only for the controller it is
// connected to (its address vector's destination GID and its DestQPN).
// A source also streams only to sinks admitted on it (AdmitSink): the
// request names the sink by GID and QPN, and the admitted entry holds the
// address vector (MAC included) the packets go out with.

// A ThirdParty is the sink of a WROOO3PRead: the node T that gets the data,
// its OOO queue pair, its context and where the data goes there.
type ThirdParty struct {
	GID  netip.Addr // T's GID (an IPv6 address, or IPv4 / IPv4-mapped)
	QPN  uint32     // T's OOO queue pair (24 bits)
	Ctx  wire.Ctx   // T's context; the completion comes from it
	VA   uint64     // where the first byte goes at T
	RKey uint32     // T's rkey for [VA, VA+Len)
	Len  uint32     // bytes to move
}

// A sink is a third-party target admitted on a source queue pair: its
// identity and the header template of the packets that go to it.
type sink struct {
	gid [16]byte
	qpn uint32
	hdr wire.Packet
}

// sinks is a source queue pair's admitted sinks: copy on write, so the
// progress goroutine reads them without a lock.
type sinks struct {
	mu  sync.Mutex // writers
	cur atomic.Pointer[[]*sink]
}

// MaxSinks bounds the sinks admitted on one queue pair.
const MaxSinks = 64

// AdmitSink lets this OOO queue pair stream third-party data to the OOO
// queue pair qpn at av's destination (av: from this side's address, as
// for Connect). Admitting the same GID and QPN again replaces the entry.
func (q *QP) AdmitSink(av AddressVector, qpn uint32) error {
	if q.ooo == nil {
		return fmt.Errorf("qp: admit sink: %v queue pair", q.typ)
	}
	if err := checkAV(&av); err != nil {
		return fmt.Errorf("qp: admit sink: %w", err)
	}
	if qpn == 0 || qpn > wire.PSNMask {
		return fmt.Errorf("qp: admit sink: QPN %#x out of range", qpn)
	}
	k := &sink{gid: av.DstIP.As16(), qpn: qpn}
	sport := av.SrcPort
	if sport == 0 {
		sport = wire.SourcePort(q.qpn, qpn)
	}
	setAddr(&k.hdr, &av, sport)
	k.hdr.BTH.DestQPN = qpn
	t := &q.ooo.sinks
	t.mu.Lock()
	defer t.mu.Unlock()
	var next []*sink
	if old := t.cur.Load(); old != nil {
		for _, o := range *old {
			if o.gid != k.gid || o.qpn != qpn {
				next = append(next, o)
			}
		}
	}
	if len(next) >= MaxSinks {
		return fmt.Errorf("qp: admit sink: %d sinks admitted already", MaxSinks)
	}
	next = append(next, k)
	t.cur.Store(&next)
	return nil
}

// RevokeSink removes a sink AdmitSink admitted; streams to it already
// under way finish.
func (q *QP) RevokeSink(gid netip.Addr, qpn uint32) {
	if q.ooo == nil {
		return
	}
	g := gid.As16()
	t := &q.ooo.sinks
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.cur.Load()
	if old == nil {
		return
	}
	var next []*sink
	for _, o := range *old {
		if o.gid != g || o.qpn != qpn {
			next = append(next, o)
		}
	}
	t.cur.Store(&next)
}

// find returns the admitted sink of gid and qpn, or nil.
func (t *sinks) find(gid *[16]byte, qpn uint32) *sink {
	cur := t.cur.Load()
	if cur == nil {
		return nil
	}
	for _, k := range *cur {
		if k.gid == *gid && k.qpn == qpn {
			return k
		}
	}
	return nil
}

// check3PSend checks the third-party part of a WROOO3PRead at post.
func check3PSend(wr *SendWR) error {
	t := &wr.Sink
	switch {
	case len(wr.SGL) != 0:
		return errors.New("qp: post send: OOO third-party READ takes no SGL (the data goes to Sink)")
	case !t.GID.IsValid():
		return errors.New("qp: post send: OOO third-party READ without a sink GID")
	case t.QPN == 0 || t.QPN > wire.PSNMask:
		return fmt.Errorf("qp: post send: OOO third-party sink QPN %#x out of range", t.QPN)
	case t.Ctx.ID() == 0:
		return errors.New("qp: post send: OOO third-party sink context id 0")
	case t.Len > MaxMessage:
		return fmt.Errorf("qp: post send: OOO third-party READ of %d bytes exceeds 2^31", t.Len)
	case wr.CondQueue != 0:
		return errors.New("qp: post send: an OOO third-party READ is neither component nor conditional")
	}
	return nil
}

// isController reports whether x names the controller this queue pair is
// connected to (its peer's GID and QPN): the only one it acts for.
func (q *QP) isController(x *wire.XTP) bool {
	return x.QPN == q.e.attr.DestQPN && x.GID == q.e.attr.AV.DstIP.As16()
}

// ooo3PReadRequest serves an OOO_3P_READ_REQ: refused (nothing sent) unless
// it comes from the connected controller and names an admitted sink; then
// the READ rules, the response going to the sink as OOO_3P_WRITE packets.
func (q *QP) ooo3PReadRequest(p *wire.Packet) {
	if !q.isController(&p.XTPController) || p.SrcIP.Unmap() != q.e.attr.AV.DstIP.Unmap() {
		q.stats.inc(CtrOOO3PRefused)
		return
	}
	k := q.ooo.sinks.find(&p.XTPTarget.GID, p.XTPTarget.QPN)
	if k == nil {
		q.stats.inc(CtrOOO3PRefused)
		return
	}
	q.oooServeRead(p, p.XTPTarget.Ctx, k, &p.XTPController)
}

// ooo3PPlace places an OOO_3P_WRITE: the WRITE rules, its completion going
// to the controller's context. A controller other than the connected one
// is refused.
func (q *QP) ooo3PPlace(p *wire.Packet, out Output) {
	if !q.isController(&p.XTPController) {
		q.stats.inc(CtrOOO3PRefused)
		return
	}
	q.oooPlaceFor(p, p.XTPController.Ctx, out)
}

// controllerXTP is this side as the controller of a third-party operation:
// its GID (the address vector's source), QPN and context ctx.
func (q *QP) controllerXTP(ctx wire.Ctx) wire.XTP {
	return wire.XTP{GID: q.e.attr.AV.SrcIP.As16(), QPN: q.qpn, Ctx: ctx}
}

// oooBuild3P builds the OOO_3P_READ_REQ of w into buf and sends it.
func (q *QP) oooBuild3P(w *sendWQE, buf []byte, out Output) {
	o, p := w.ooo, &q.e.pkt
	t := &o.sink
	p.BTH.Opcode = wire.OOO3PReadReq
	p.XRH.Total = t.Len
	p.RETH = wire.RETH{VA: w.remoteAddr, RKey: w.rkey, DMALen: t.Len}
	p.XRR = wire.XRR{VA: t.VA, RKey: t.RKey}
	p.XTPTarget = wire.XTP{GID: t.GID.As16(), QPN: t.QPN, Ctx: t.Ctx}
	p.XTPController = q.controllerXTP(o.ctx)
	q.emit(out, buf, 0)
}
