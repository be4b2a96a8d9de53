package qp

import "github.com/xdproce/xdproce/roce/wire"

// Congestion control on RC queue pairs (docs/cc.md): DCQCN between peers
// that agreed on it (Attr.DCQCN). The notification point: a frame that
// arrives with the IP ECN bits CE (a switch marked it) is answered with a
// CNP (opcode 0x81, the standard RoCEv2 CNP), at most one per queue pair
// per CNPInterval. The reaction point: a CNP for this queue pair cuts the
// send window's pacer's rate (pacer.go, cc_dcqcn.go). Without Attr.DCQCN
// nothing is sent and nothing paced: marked frames and CNPs are only
// counted (rxe and ConnectX peers of a queue pair without DCQCN see
// today's bytes).

// ECN codepoints, the low two bits of the IPv4 TOS / IPv6 traffic class
// (RFC 3168).
const (
	ecnMask = 3
	ecnECT0 = 2
	ecnCE   = 3
)

// notifier is the notification point's state.
type notifier struct {
	on      bool
	pending bool  // a CNP is due
	last    int64 // when the last CNP went out (0: never)
	dscp    uint8
	gap     int64 // CNPInterval
}

// ccStart turns DCQCN on or off as the attributes say, when the queue pair
// enters RTR (the notification point) and RTS (the reaction point).
func (q *QP) ccStart(rts bool) {
	on := q.typ == RC && q.e.attr.DCQCN
	var params DCQCNParams
	if q.dcqcn != nil {
		params = *q.dcqcn
	}
	if !rts {
		p := params.withDefaults()
		q.np = notifier{on: on, dscp: p.CNPDSCP, gap: p.CNPInterval}
		return
	}
	q.win.pace.enable(on, params, q.e.now)
}

// ccReceive looks at a received RC frame's ECN bits (the notification
// point). It runs for every frame the queue pair accepts.
func (q *QP) ccReceive(p *wire.Packet) {
	if p.TOS&ecnMask != ecnCE {
		return
	}
	q.stats.inc(CtrECNMarked)
	if q.np.on && (q.np.last == 0 || q.e.now-q.np.last >= q.np.gap) {
		q.np.pending = true
	}
}

// cnpReceived handles a CNP for this queue pair (the reaction point).
func (q *QP) cnpReceived() {
	if !q.win.pace.on {
		q.stats.inc(CtrCNPIgnored)
		return
	}
	q.stats.inc(CtrCNPHandled)
	q.win.cnp(q.e.now)
}

// sendCNP sends the CNP due, if any; it reports false when no transmit
// buffer was free (it stays due).
func (q *QP) sendCNP(out Output) bool {
	if !q.np.pending {
		return true
	}
	buf := out.TxBuffer()
	if buf == nil {
		return false
	}
	e := &q.e
	p := &e.pkt
	*p = e.hdr
	p.TOS = q.np.dscp << 2 // CNPs are not ECN-capable (a switch never marks them)
	p.BTH.Opcode = wire.CNP
	p.BTH.BECN = true
	hl := p.HeaderLen()
	if hl+cnpLen > len(buf) {
		q.stats.inc(CtrEncodeErrors)
		return true
	}
	clear(buf[hl : hl+cnpLen])
	if q.emit(out, buf, cnpLen) != 0 {
		q.stats.inc(CtrCNPSent)
	}
	q.np.pending, q.np.last = false, max(e.now, 1)
	return true
}

// cnpLen is a CNP's payload: 16 reserved bytes (RoCEv2 annex A17).
const cnpLen = 16
