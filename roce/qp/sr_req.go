package qp

import "github.com/xdproce/xdproce/roce/wire"

// Selective repeat, the requester's half (docs/sr-wire.md): the completer
// records each SR_SACK in the send window's scoreboard (window_sr.go); the
// requester, before it sends anything new, resends each PSN the scoreboard
// names as lost (by transmission order: window_sr.go), one packet at a
// time, without moving its place in the send queue. The fast timer marks
// the newest PSN not held (a probe), the local ACK timeout everything in
// flight and not held, instead of rewinding. A READ's lost responses are
// re-requested as ranges (sr_read.go).

// compSack handles an SR_SACK: everything before its PSN is acknowledged,
// its bitmap goes to the scoreboard; one that shows new PSNs held restarts
// the timers (sackNews).
func (q *QP) compSack(p *wire.Packet) {
	q.stats.inc(CtrSACKsRecv)
	psn, una := p.BTH.PSN, q.win.unacked()
	if len(p.Payload) < wire.SACKLen || len(p.Payload)%wire.SACKLen != 0 || !q.win.wasSent(psn) || wire.PSNBefore(psn, una) {
		q.stats.inc(CtrDropped) // stale (acknowledged since) or never sent
		return
	}
	if psn != una {
		retry, ok := q.ackThrough(wire.PSNAdd(psn, wire.PSNMask))
		if !ok {
			// A READ or atomic before the hole is unanswered: its
			// responses were lost; re-request it (go-back-N).
			k := compPkt{p: p}
			if q.lostResponse(&k, retry) {
				q.win.loss(false)
				q.stats.inc(CtrCompleterRetries)
				q.comp.retrying = true
				q.rewind(retry)
			}
		}
		if q.win.unacked() != una {
			q.compProgress(una)
		}
	}
	if q.win.sr.sack(psn, p.Payload, q.win.max, q.e.now, q.win.ambig()) {
		q.win.sr.sackNews(&q.win, q.e.now)
		q.comp.retries = q.e.attr.RetryCnt // the responder is receiving: progress for retry_cnt
	}
	q.win.sr.sackRTT(&q.win, q.e.now)
}

// lostInFlight responds to a timer (the fast retransmission timer when
// probe, or the local ACK timeout): go-back-N from unacked; with selective
// repeat the local ACK timeout resends every PSN in flight and not held,
// the fast timer only the newest of those (a probe: as TCP's tail loss
// probe, its SACK shows by transmission order what else is lost, and a
// round trip that was only late costs one packet, not the window). An
// unanswered READ at unacked is re-requested for its first missing range
// by the fast timer (sr_read.go) and from unacked on by the local ACK
// timeout; an unanswered atomic from unacked on by either (their responses
// are not SACKed).
func (q *QP) lostInFlight(probe bool) {
	if !q.win.sr.on {
		q.compAct(compActRewind, &compPkt{retry: q.win.unacked()})
		return
	}
	if w := q.oldest(); w != nil && w.opcode.isReadOrAtomic() {
		if probe && w.opcode == WRRDMARead {
			w.rrOut = false // its re-request (or the original's end) was lost
			q.srReadWant(w)
			return
		}
		q.compAct(compActRewind, &compPkt{retry: q.win.unacked()})
		return
	}
	if probe {
		q.win.sr.probe(q.win.unacked(), q.win.max)
		return
	}
	q.win.sr.lostAll(q.win.unacked(), q.win.max)
}

// srResend resends the PSNs the scoreboard names as missing, each once,
// with AckReq. It reports false when it stopped for lack of transmit
// buffers or budget.
func (q *QP) srResend(out Output, budget *int) bool {
	r := &q.req
	if q.comp.rrWant && !q.srReadResend(out, budget) { // sr_read.go
		return false
	}
	for {
		psn, ok := q.win.sr.nextHole(q.win.unacked(), q.win.max)
		if !ok || !q.win.pace.allow(q.e.now) || uint32(wire.PSNDiff(psn, q.win.unacked())) >= q.win.cwnd {
			// Nothing missing, paced (the requester waits too:
			// canSend), or past the window a timeout halved.
			return true
		}
		if *budget == 0 {
			return false
		}
		i, w := q.sendWQEAt(psn)
		if w == nil || w.opcode.isReadOrAtomic() && (psn != w.firstPSN || w.readPSN != w.firstPSN) ||
			w.opcode == WRRDMARead && psn != q.win.unacked() {
			// A READ response's PSN, answered, or a READ request after the
			// oldest: judged by its responses instead (sr_read.go; after a
			// re-request the responder may yet answer it).
			q.win.sr.skip(psn)
			continue
		}
		saved := *r
		r.idx, r.psn, r.w, r.off = i, psn, w, 0
		if !w.opcode.isReadOrAtomic() {
			r.off = uint64(wire.PSNDiff(psn, w.firstPSN)) * uint64(q.e.pmtu)
		}
		st, act, _ := q.reqBuild(out)
		if act != reqActTransmit {
			*r = saved
			if st == reqStarved {
				return false
			}
			q.win.sr.skip(psn) // cannot be rebuilt: the timers take over
			continue
		}
		q.e.pkt.BTH.AckReq = true
		*budget--
		size := q.emit(out, r.buf, r.n)
		// Reported without AckReq: the fast timer stays on the newest
		// packet that asked (an ACK of this resend must not turn it off
		// while later packets may be lost), and no RTT sample (Karn).
		q.win.sent(psn, wire.PSNAdd(psn, 1), false, size, q.e.now)
		q.stats.inc(CtrRetransmits)
		q.stats.inc(CtrSRRetransmits)
		*r = saved
	}
}

// sendWQEAt returns the started, unfinished send WQE holding psn and its
// index, or nil.
func (q *QP) sendWQEAt(psn uint32) (uint32, *sendWQE) {
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	for i := q.comp.first(); i != posted; i++ {
		w := sq.at(i)
		if !w.started {
			break
		}
		if !w.done && !wire.PSNBefore(psn, w.firstPSN) && !wire.PSNBefore(w.lastPSN, psn) {
			return i, w
		}
	}
	return 0, nil
}
