package qp

import (
	"math/bits"

	"github.com/xdproce/xdproce/roce/wire"
)

// RDMA READ under selective repeat (docs/sr-wire.md), the requester's side.
// Go-back-N re-requests a READ from its first lost response on, so every
// response after the hole comes twice. Here a response past a hole is
// placed at once (its PSN gives its offset in the READ) and remembered
// (srBoard.rdHeld), and the READ is re-requested for its missing ranges
// only: a READ request with the hole's PSN, the remote address of its
// offset and the length up to the first response held after it. The
// responder answers such a request as any duplicate READ (IBA 9.7.5.1.3:
// regenerated from memory, within the original's range); it keeps one
// transmission per READ, so a re-request also ends whatever of the READ's
// original stream it had not sent yet. Hence one re-request per READ is out
// at a time (sendWQE.rrOut), until the response at its end arrives; then,
// if the READ is still missing responses, the next range is asked for.
//
// When is a range missing? The responder answers in order, so a response
// past a READ's next expected PSN (of the same READ or of a later request)
// shows the READ's responses before it lost, unless a re-request of the
// READ is out (its answer comes after everything the responder had
// queued). A hole is asked for once the READ's original stream has ended
// (its last response, or one of a later request, arrived) or has run half
// the hold past it, so that the re-request does not cut the stream short. Wanted re-requests go out first thing in the requester's next
// round (srReadResend), each as one packet, without moving the requester's
// place in the send queue. A response held past a hole restarts the timers
// (as a SACK with news does). A lost re-request, or the lost end of one, is
// found by them: the fast timer re-requests the oldest READ's first missing
// range, the local ACK timeout goes back as go-back-N does (each READ
// request's length capped the same way).
// Nothing changes for a queue pair without selective repeat.

// srRead places a READ response under selective repeat.
func (q *QP) srRead(k *compPkt) (compState, compAction) {
	psn, b := k.p.BTH.PSN, &q.win.sr
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	var w *sendWQE
	for i := q.comp.head; i != posted; i++ {
		x := sq.at(i)
		if !x.started {
			break
		}
		if x.done {
			continue
		}
		if wire.PSNBefore(psn, x.firstPSN) {
			break // x and what follows come after psn (or were never sent)
		}
		if !wire.PSNBefore(x.lastPSN, psn) {
			w = x
			break
		}
		// An earlier READ still missing responses before this one: they
		// were lost, unless a re-request of it is out.
		if x.opcode == WRRDMARead && !x.rrOut {
			q.srReadWant(x)
		}
	}
	if w == nil || w.opcode != WRRDMARead || wire.PSNBefore(psn, w.readPSN) || bit(b.rdHeld, psn) ||
		uint32(wire.PSNDiff(psn, q.win.unacked())) >= srSlots {
		q.stats.inc(CtrDropped) // answered, a duplicate, or beyond what can be held
		return compDone, compActNone
	}
	if win := &q.win; win.sampling && !wire.PSNBefore(win.sampPSN, w.firstPSN) && !wire.PSNBefore(psn, win.sampPSN) {
		// The sampled READ request is answered: the round trip is its
		// first response's, not the repair of the READ's holes (as
		// sackRTT for a packet held past a hole).
		win.rttSample(q.e.now - win.sampAt)
		win.sampling = false
	}
	pmtu := uint64(q.e.pmtu)
	off := uint64(wire.PSNDiff(psn, w.firstPSN)) * pmtu
	n := uint64(len(k.p.Payload))
	if psn != w.lastPSN && n != pmtu || psn == w.lastPSN && off+n != w.length {
		k.w, k.status = w, WCBadRespErr // a response of the wrong length
		return compError, compActNone
	}
	if st := q.sglCopy(w.sgl, off, k.p.Payload, true); st != WCSuccess {
		k.w, k.status = w, st
		return compError, compActNone
	}
	past, out := psn != w.readPSN, w.rrOut
	if past {
		setBit(b.rdHeld, psn, true)
	} else {
		w.readPSN = wire.PSNAdd(psn, 1)
		for w.readPSN != wire.PSNAdd(w.lastPSN, 1) && bit(b.rdHeld, w.readPSN) {
			setBit(b.rdHeld, w.readPSN, false)
			w.readPSN = wire.PSNAdd(w.readPSN, 1)
		}
		w.done = w.readPSN == wire.PSNAdd(w.lastPSN, 1)
	}
	if out && (psn == wire.PSNAdd(w.rrEnd, wire.PSNMask) || !wire.PSNBefore(w.readPSN, w.rrEnd)) {
		w.rrOut = false // the re-requested range is answered (or its end came)
	}
	if !w.done && !w.rrOut && (out || past && (psn == w.lastPSN || uint32(wire.PSNDiff(psn, w.readPSN)) >= srSlots/2)) {
		// The re-requested range ended with responses still missing, or
		// the original stream ended (or ran far) past a hole: asked for
		// sooner, the range would end the rest of that stream at the
		// responder.
		q.srReadWant(w)
	}
	before := q.win.unacked()
	q.srReadAdvance()
	if q.win.unacked() == before {
		// Held past a hole: the responder is answering, so the timers
		// start over as for a SACK with news (a re-request waits behind
		// everything the responder had queued).
		q.win.sr.sackNews(&q.win, q.e.now)
		q.comp.retries = q.e.attr.RetryCnt
		return compDone, compActNone
	}
	q.comp.gapSet = false
	return compDone, compActProgress
}

// srReadWant marks READ w for a re-request of its first missing range
// (srReadResend sends it).
func (q *QP) srReadWant(w *sendWQE) {
	if !w.rrWant {
		w.rrWant, q.comp.rrWant = true, true
	}
}

// srReadAdvance moves the window's oldest unacknowledged PSN past the done
// WQEs at the head of the send queue and to the next expected response of
// a READ there.
func (q *QP) srReadAdvance() {
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	una := q.win.unacked()
	for i := q.comp.head; i != posted; i++ {
		x := sq.at(i)
		if !x.started {
			break
		}
		if x.done {
			if next := wire.PSNAdd(x.lastPSN, 1); wire.PSNBefore(una, next) {
				una = next
			}
			continue
		}
		if x.opcode == WRRDMARead && wire.PSNBefore(una, x.readPSN) {
			una = x.readPSN
		}
		break
	}
	q.win.advance(una, q.e.now)
}

// srReadLen is the length of a READ request for w from psn under selective
// repeat: rest, cut at the first response already held after psn.
func (q *QP) srReadLen(w *sendWQE, psn uint32, rest uint64) uint64 {
	held := q.win.sr.rdHeld
	end := wire.PSNAdd(w.lastPSN, 1)
	if d := uint32(wire.PSNDiff(end, q.win.unacked())); d > srSlots {
		end = wire.PSNAdd(q.win.unacked(), srSlots) // nothing is held beyond
	}
	for p := wire.PSNAdd(psn, 1); wire.PSNBefore(p, end); {
		i := p & srMask
		word := held[i/64] >> (i % 64)
		if word == 0 {
			p = wire.PSNAdd(p, 64-i%64) // the rest of this word holds nothing
			continue
		}
		p = wire.PSNAdd(p, uint32(bits.TrailingZeros64(word)))
		if wire.PSNBefore(p, end) {
			return min(rest, uint64(wire.PSNDiff(p, psn))*uint64(q.e.pmtu))
		}
	}
	return rest
}

// srReadResend sends the wanted READ re-requests, oldest first, each as one
// packet. It reports false when it stopped for lack of transmit buffers or
// budget.
func (q *QP) srReadResend(out Output, budget *int) bool {
	r := &q.req
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	for i := q.comp.head; i != posted; i++ {
		w := sq.at(i)
		if !w.started {
			break
		}
		if !w.rrWant {
			continue
		}
		if w.done || w.rrOut || !q.win.wasSent(w.firstPSN) {
			// Answered, asked for already, or never sent: the requester
			// sends that READ in its turn, with the PSNs its responses
			// take (a re-request takes only its first).
			w.rrWant = false
			continue
		}
		if !q.win.pace.allow(q.e.now) {
			return true // paced: the next round sends it
		}
		if *budget == 0 {
			return false
		}
		saved := *r
		r.idx, r.psn, r.w = i, w.readPSN, w
		r.off = uint64(wire.PSNDiff(w.readPSN, w.firstPSN)) * uint64(q.e.pmtu)
		st, act, _ := q.reqBuild(out)
		if act != reqActTransmit {
			*r = saved
			if st == reqStarved {
				return false
			}
			w.rrWant = false // cannot be rebuilt: the timers take over
			continue
		}
		psn := r.psn
		w.rrWant = false
		*budget--
		size := q.emit(out, r.buf, r.n)
		q.win.sent(psn, wire.PSNAdd(psn, 1), false, size, q.e.now)
		q.stats.inc(CtrRetransmits)
		q.stats.inc(CtrSRRetransmits)
		*r = saved
	}
	q.comp.rrWant = false
	return true
}
