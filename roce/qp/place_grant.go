package qp

import (
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// The responder's grant (docs/placement.md, "On the first hop"): an answer
// that places a message while the queue pair is ready to send grants the
// daemon its WRITEs and READs (place.FlagGrant, with the PSN expected next,
// the queue pair's protection domain and access); the daemon then checks and
// copies those itself and tells this engine only to advance its expected PSN
// and message sequence number (a Note). A Note the queue pair cannot take
// (not ready to send, another requester, the PSN moved by frames, a message
// under way by frames, a packet count its path MTU does not give) revokes
// the grant, and so does the engine failing the queue pair (PlaceRevoke);
// the device revokes it on Modify and Destroy (TakeGranted).

// grantAnswer marks the answer a, which executes a message, as a grant
// when the queue pair is ready to send.
func (q *QP) grantAnswer(x *placeScratch, a *place.Msg) {
	if q.e.state != RTS {
		return
	}
	a.Flags |= place.FlagGrant
	a.RKey, a.Imm = x.pd, uint32(q.e.attr.Access)
	q.plc.granted.Store(true)
}

// Placing reports whether the queue pair has a placer (SetPlacer).
func (q *QP) Placing() bool { return q.plc.placer.Load() != nil }

// TakeGranted reports whether the queue pair granted the daemon anything
// since the last call (the device then revokes it).
func (q *QP) TakeGranted() bool { return q.plc.granted.Swap(false) }

// PlaceNote takes the daemon's word that it placed a WRITE or READ of this
// queue pair's requester on its grant (place.KindNote): the message's
// PSNs and a message sequence number are taken as the responder's
// execution would. A Note it cannot take sends the daemon a revocation.
// Engine goroutine only.
func (q *QP) PlaceNote(m *place.Msg, now int64, out Output) {
	p, r := &q.plc, &q.resp
	q.e.now = now
	if q.ctlGen.Load() != q.e.ctlSeen {
		q.applyCtl()
	}
	x := p.placer.Load()
	if x != nil && q.typ == RC && q.e.state == RTS && m.SrcQPN == q.e.attr.DestQPN && r.seq == seqNone &&
		m.PSN == r.epsn && uint64(m.Len) <= MaxMessage && m.NPkts == npkts(uint64(m.Len), q.e.pmtu) {
		r.epsn = wire.PSNAdd(r.epsn, m.NPkts)
		r.msn = (r.msn + 1) & wire.PSNMask
		r.nakSent = false
		q.placeCount(4, &p.st.Granted)
		return
	}
	q.placeCount(3, &p.st.Dropped)
	if x == nil {
		return
	}
	buf := out.TxBuffer()
	if buf == nil {
		return // the next Note tries again
	}
	v := &x.msg
	*v = place.Msg{Kind: place.KindRevoke, SrcQPN: m.SrcQPN, DstQPN: q.qpn}
	if n := place.Encode(buf, v); n > 0 {
		out.TxCommit(buf[:n])
	}
}

// PlaceRevoke tells the daemon, through out, to forget what the queue pair
// granted it (the engine failed it: the daemon must not go on answering
// its peer for it); when out has no buffer the grant stays marked for the
// next Modify or Destroy. Engine goroutine only.
func (q *QP) PlaceRevoke(out Output) {
	x := q.plc.placer.Load()
	if x == nil || !q.plc.granted.Swap(false) {
		return
	}
	buf := out.TxBuffer()
	if buf == nil {
		q.plc.granted.Store(true)
		return
	}
	v := &x.msg
	*v = place.Msg{Kind: place.KindRevoke, SrcQPN: q.e.attr.DestQPN, DstQPN: q.qpn}
	if n := place.Encode(buf, v); n > 0 {
		out.TxCommit(buf[:n])
	}
}
