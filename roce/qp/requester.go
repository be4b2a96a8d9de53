package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// The requester turns send WQEs into request packets (IBA 9.7; rxe_req.c):
// it splits messages by the path MTU into FIRST/MIDDLE/LAST or ONLY packets,
// keeps the READ/atomic limit, asks the send window (window.go) before each
// RC packet and reports it after, and resends from a PSN when the
// completer rewinds it (go-back-N) or, with selective repeat, single PSNs
// the window's scoreboard names first (sr_req.go).

const reqBudget = 256 // packets per Progress call

type requester struct {
	idx         uint32 // next WQE (free-running index) to transmit
	off         uint64 // bytes of it already sent (READ: the restart offset)
	psn         uint32 // PSN of the next packet
	rdAtomic    int    // READ/atomic WQEs started and not retired
	sinceAckReq uint32 // packets since the last AckReq
	size        int    // bytes of the last frame sent (the pacer's charge)

	// scratch of the current step
	buf []byte
	n   int
	w   *sendWQE
}

// start readies the requester for RTS: the first packet gets psn.
func (r *requester) start(psn uint32) { r.psn = psn }

// skipTo gives up everything before WQE idx (the QP flushed it).
func (r *requester) skipTo(idx uint32) { r.idx, r.off = idx, 0 }

// retired notes that the completer retired w: a READ or atomic frees its
// place under max_rd_atomic.
func (r *requester) retired(w *sendWQE) {
	if w.started && w.opcode.isReadOrAtomic() && r.rdAtomic > 0 {
		r.rdAtomic--
	}
}

// reqState is a stage of the requester.
type reqState uint8

const (
	reqGetWQE      reqState = iota // pick the WQE at req.idx
	reqStartWQE                    // first packet of a WQE: fence, READ/atomic limit, local SGL, PSNs
	reqCheckWindow                 // send window and RNR wait
	reqBuild                       // build one packet into a transmit buffer
	reqLocalError                  // local protection or length error on the WQE
	reqWait                        // cannot send now: window, fence, limit, RNR wait
	reqStarved                     // no transmit buffer or budget spent: run again soon
	reqDone                        // nothing left to send
)

var reqStateNames = [...]string{"GET_WQE", "START_WQE", "CHECK_WINDOW", "BUILD", "LOCAL_ERROR",
	"WAIT", "STARVED", "DONE"}

func (s reqState) String() string { return enumName(reqStateNames[:], int(s), "reqState") }

// reqAction is what the requester loop does after a stage.
type reqAction uint8

const (
	reqActNone     reqAction = iota
	reqActTransmit           // encode and commit the built packet, advance
	reqActError              // complete the WQE with status, QP to Error
)

// reqProgress sends request packets; it reports false when it stopped for
// lack of transmit buffers or budget.
func (q *QP) reqProgress(out Output) bool {
	r := &q.req
	if una := q.win.unacked(); q.typ == RC && wire.PSNBefore(r.psn, una) {
		q.rewind(una) // responses answered what was queued for resending
	}
	budget := reqBudget
	if q.win.sr.on && !q.srResend(out, &budget) { // sr_req.go
		return false
	}
	st := reqGetWQE
	var status WCStatus
	for {
		var act reqAction
		switch st {
		case reqGetWQE:
			st = q.reqGetWQE()
		case reqStartWQE:
			st, status = q.reqStartWQE()
		case reqCheckWindow:
			st = q.reqCheckWindow()
		case reqBuild:
			if budget == 0 {
				st = reqStarved
				break
			}
			if pst, ok := q.reqPlace(out); ok { // place.go
				if pst == reqGetWQE {
					budget--
				}
				st = pst
				break
			}
			st, act, status = q.reqBuild(out)
		case reqLocalError:
			st, act = reqDone, reqActError
		case reqWait, reqDone:
			return true
		case reqStarved:
			return false
		}
		switch act {
		case reqActTransmit:
			budget--
			r.size = q.emit(out, r.buf, r.n)
			q.reqAdvance()
		case reqActError:
			r.w.done, r.w.status = true, status
			q.fail()
			return true
		}
	}
}

func (q *QP) reqGetWQE() reqState {
	r := &q.req
	if r.idx == q.sqPosted.Load() {
		return reqDone
	}
	r.w = q.sendAt(r.idx)
	if r.w.done { // answered while queued for resending
		r.idx++
		r.off = 0
		if next := wire.PSNAdd(r.w.lastPSN, 1); wire.PSNBefore(r.psn, next) {
			r.psn = next
		}
		return reqGetWQE
	}
	if !r.w.started {
		return reqStartWQE
	}
	return reqCheckWindow
}

func (q *QP) reqStartWQE() (reqState, WCStatus) {
	r, w := &q.req, q.req.w
	if q.typ == RC {
		if w.flags&Fence != 0 && r.rdAtomic > 0 {
			return reqWait, 0 // fenced until earlier READ/atomic WRs complete
		}
		if w.opcode.isReadOrAtomic() && r.rdAtomic >= int(q.e.attr.MaxRdAtomic) {
			return reqWait, 0
		}
	}
	if w.opcode.isLocal() {
		return q.reqLocal() // mw.go
	}
	switch {
	case w.opcode.isReadOrAtomic():
		if !q.checkSGL(w.sgl, mr.LocalWrite) {
			return reqLocalError, WCLocProtErr
		}
	case w.inline == nil:
		if !q.checkSGL(w.sgl, 0) {
			return reqLocalError, WCLocProtErr
		}
	}
	w.started = true
	w.firstPSN = r.psn
	n := uint32(1)
	if !w.opcode.isAtomic() {
		n = npkts(w.length, q.e.pmtu)
	}
	w.lastPSN = wire.PSNAdd(r.psn, n-1)
	w.readPSN = r.psn
	w.rrEnd, w.rrOut, w.rrWant = 0, false, false // a slot used before keeps none of its READ's
	r.off = 0
	if w.opcode.isReadOrAtomic() {
		r.rdAtomic++
	}
	return reqCheckWindow, 0
}

func (q *QP) reqCheckWindow() reqState {
	if q.typ != RC || q.win.canSend(q.req.psn, q.e.now) {
		return reqBuild
	}
	return reqWait
}

// opcodes of SEND and WRITE by position: [only, first, middle, last].
var (
	rcSendOps  = [5]wire.Opcode{0, wire.RCSendOnly, wire.RCSendFirst, wire.RCSendMiddle, wire.RCSendLast}
	rcWriteOps = [5]wire.Opcode{0, wire.RCWriteOnly, wire.RCWriteFirst, wire.RCWriteMiddle, wire.RCWriteLast}
)

// requestOpcode is the opcode of packet pos of a message of w.
func (q *QP) requestOpcode(w *sendWQE, pos wire.Position) wire.Opcode {
	if q.typ == UD {
		if w.opcode == WRSendImm {
			return wire.UDSendOnlyImm
		}
		return wire.UDSendOnly
	}
	var op wire.Opcode
	switch w.opcode {
	case WRRDMAWrite, WRRDMAWriteImm:
		op = rcWriteOps[pos]
		if w.opcode == WRRDMAWriteImm {
			switch pos {
			case wire.PosOnly:
				op = wire.RCWriteOnlyImm
			case wire.PosLast:
				op = wire.RCWriteLastImm
			}
		}
	default:
		op = rcSendOps[pos]
		switch {
		case w.opcode == WRSendImm && pos == wire.PosOnly:
			op = wire.RCSendOnlyImm
		case w.opcode == WRSendImm && pos == wire.PosLast:
			op = wire.RCSendLastImm
		case w.opcode == WRSendInv && pos == wire.PosOnly:
			op = wire.RCSendOnlyInv
		case w.opcode == WRSendInv && pos == wire.PosLast:
			op = wire.RCSendLastInv
		}
	}
	if q.typ == UC {
		op |= 0x20
	}
	return op
}

func (q *QP) reqBuild(out Output) (reqState, reqAction, WCStatus) {
	r, w, e := &q.req, q.req.w, &q.e
	buf := out.TxBuffer()
	if buf == nil {
		return reqStarved, reqActNone, 0
	}
	p := &e.pkt
	*p = e.hdr
	if q.typ == UD {
		sport := w.av.SrcPort
		if sport == 0 {
			sport = wire.UDSourcePort(q.qpn)
		}
		setAddr(p, w.av, sport)
		p.BTH.DestQPN = w.remoteQPN
		qkey := w.remoteQKey
		if qkey&0x80000000 != 0 {
			qkey = e.attr.QKey
		}
		p.DETH = wire.DETH{QKey: qkey, SrcQPN: q.qpn}
	}
	p.BTH.PSN = r.psn
	n := 0
	last := true
	switch {
	case w.opcode == WRRDMARead:
		if wire.PSNBefore(r.psn, w.readPSN) { // responses came since the rewind
			r.psn = w.readPSN
			r.off = uint64(wire.PSNDiff(r.psn, w.firstPSN)) * uint64(e.pmtu)
			p.BTH.PSN = r.psn
		}
		p.BTH.Opcode = wire.RCReadRequest
		n := w.length - r.off
		if q.win.sr.on { // only the range up to a response held (sr_read.go)
			n = q.srReadLen(w, r.psn, n)
			w.rrOut, w.rrEnd = q.win.wasSent(r.psn), wire.PSNAdd(r.psn, npkts(n, e.pmtu))
		}
		p.RETH = wire.RETH{VA: w.remoteAddr + r.off, RKey: w.rkey, DMALen: uint32(n)}
	case w.opcode.isAtomic():
		p.BTH.Opcode = wire.RCFetchAdd
		p.Atomic = wire.AtomicETH{VA: w.remoteAddr, RKey: w.rkey, SwapAdd: w.compareAdd}
		if w.opcode == WRAtomicCmpSwp {
			p.BTH.Opcode = wire.RCCompareSwap
			p.Atomic.SwapAdd, p.Atomic.Compare = w.swap, w.compareAdd
		}
	default:
		rest := w.length - r.off
		pos := wire.PosOnly
		switch {
		case r.off == 0 && rest <= uint64(e.pmtu):
		case r.off == 0:
			pos, last = wire.PosFirst, false
		case rest <= uint64(e.pmtu):
			pos = wire.PosLast
		default:
			pos, last = wire.PosMiddle, false
		}
		n = int(min(rest, uint64(e.pmtu)))
		p.BTH.Opcode = q.requestOpcode(w, pos)
		if pos == wire.PosOnly || pos == wire.PosFirst {
			if w.opcode == WRRDMAWrite || w.opcode == WRRDMAWriteImm {
				p.RETH = wire.RETH{VA: w.remoteAddr, RKey: w.rkey, DMALen: uint32(w.length)}
			}
		}
		if last {
			p.ImmDt = w.imm
			p.IETH = w.invRKey
			p.BTH.SE = w.flags&Solicited != 0 && w.opcode != WRRDMAWrite // SEND and WRITE with immediate
		}
		hl := p.HeaderLen()
		if hl+n+7 > len(buf) {
			q.stats.inc(CtrEncodeErrors)
			return reqLocalError, reqActNone, WCLocLenErr
		}
		dst := buf[hl : hl+n]
		if w.inline != nil {
			copy(dst, w.inline[r.off:])
		} else if st := q.sglCopy(w.sgl, r.off, dst, false); st != WCSuccess {
			return reqLocalError, reqActNone, st
		}
	}
	if q.typ == RC {
		r.sinceAckReq++
		if last || q.win.wantAckReq(r.psn, r.sinceAckReq) {
			p.BTH.AckReq = true
			r.sinceAckReq = 0
		}
	} else if q.qpn == 1 {
		p.BTH.AckReq = true // as rxe's QP1 (GSI) sends its MADs
	}
	r.buf, r.n = buf, n
	return reqGetWQE, reqActTransmit, 0
}

// reqAdvance moves past the packet just sent and reports it to the send
// window (RC).
func (q *QP) reqAdvance() {
	r, w := &q.req, q.req.w
	psn := r.psn
	switch {
	case w.opcode == WRRDMARead:
		r.psn = wire.PSNAdd(w.lastPSN, 1)
		r.idx++
		r.off = 0
	case w.opcode.isAtomic():
		r.psn = wire.PSNAdd(r.psn, 1)
		r.idx++
	default:
		r.off += uint64(r.n)
		r.psn = wire.PSNAdd(r.psn, 1)
		if r.off >= w.length {
			r.idx++
			r.off = 0
			if q.typ != RC {
				w.done = true // UC/UD: complete once sent (IBA 9.8: no ACK)
			}
		}
	}
	if q.typ == RC && q.win.sent(psn, r.psn, q.e.pkt.BTH.AckReq, r.size, q.e.now) {
		q.stats.inc(CtrRetransmits)
	}
}

// rewind positions the requester at psn (go-back-N resend, or skipping
// ahead past what a late ACK covered). WQEs keep the PSNs they were given
// when first started, so a resent packet carries the same PSN as before.
func (q *QP) rewind(psn uint32) {
	r := &q.req
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	if una := q.win.unacked(); wire.PSNBefore(psn, una) {
		psn = una // never resend what is acknowledged
	}
	r.sinceAckReq = 0
	q.win.resend(psn)
	for i := q.comp.first(); i != posted; i++ {
		w := sq.at(i)
		if !w.started {
			r.idx, r.off, r.psn = i, 0, psn
			return
		}
		if w.done || wire.PSNBefore(psn, w.firstPSN) || wire.PSNBefore(w.lastPSN, psn) {
			continue
		}
		r.idx, r.psn, r.off = i, psn, 0
		if !w.opcode.isAtomic() {
			r.off = uint64(wire.PSNDiff(psn, w.firstPSN)) * uint64(q.e.pmtu)
		}
		return
	}
	r.idx, r.off, r.psn = posted, 0, psn
}
