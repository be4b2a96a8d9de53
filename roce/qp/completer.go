package qp

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/roce/wire"
)

// The completer handles what comes back to a requester (IBA 9.7;
// rxe_comp.c): ACKs, NAKs, READ responses and atomic ACKs. It completes send
// WQEs, keeps retry_cnt and rnr_retry, tells the send window (window.go)
// what was acknowledged or lost and fires its timers, rewinds the requester
// for go-back-N through its action, and turns NAKs into error completions.

type completer struct {
	head       uint32 // oldest WQE not retired
	retries    uint8  // retry_cnt left
	rnrRetries uint8  // rnr_retry left (7: infinite)
	gapPSN     uint32 // a retry for a lost response was started at this PSN
	gapSet     bool
	nakPSN     uint32 // the last PSN sequence error NAK acted on
	nakSet     bool
	retrying   bool // a retry sequence was started and no progress came since
	rrWant     bool // selective repeat: a READ wants a re-request (sr_read.go)
}

// start readies the completer for RTS: the retry counters of a.
func (c *completer) start(a *Attr) {
	c.retries, c.rnrRetries = a.RetryCnt, a.RNRRetry
}

// first is the index of the oldest send WQE not retired.
func (c *completer) first() uint32 { return c.head }

// compState is a stage of the completer.
type compState uint8

const (
	compCheckPSN compState = iota // is the packet about something outstanding?
	compImplicit                  // acknowledge everything before it
	compCheckAck                  // classify: ACK, RNR NAK, NAK, READ response, atomic ACK
	compAck                       // ACK: complete SEND/WRITE WQEs up to its PSN
	compRead                      // place READ response data
	compAtomic                    // place the atomic result
	compRetry                     // go-back-N from compPkt.retry
	compRNR                       // RNR NAK: wait the timer, then resend
	compError                     // NAK class C at the peer: complete in error, QP to Error
	compDone                      // finished with the packet
)

var compStateNames = [...]string{"CHECK_PSN", "IMPLICIT", "CHECK_ACK", "ACK", "READ", "ATOMIC",
	"RETRY", "RNR", "ERROR", "DONE"}

func (s compState) String() string { return enumName(compStateNames[:], int(s), "compState") }

// compAction is what the completer loop does after a stage.
type compAction uint8

const (
	compActNone     compAction = iota
	compActProgress            // the acknowledged PSN moved: reset retry counts and the timer
	compActRewind              // resend from compPkt.retry
	compActFail                // complete the WQE with the status, QP to Error
)

// compPkt is the scratch of one completer run.
type compPkt struct {
	p      *wire.Packet
	info   *wire.OpInfo
	w      *sendWQE
	retry  uint32
	status WCStatus
	// progressed: the implicit acknowledgement moved the window's unacked PSN.
	progressed bool
	seqNAK     bool   // a PSN sequence error NAK asks for the resend
	ackBefore  uint32 // the unacked PSN when the packet arrived
}

func (q *QP) complete(p *wire.Packet, info *wire.OpInfo) {
	if p.BTH.Opcode == wire.SRSack {
		q.compSack(p) // sr_req.go
		return
	}
	k := compPkt{p: p, info: info, ackBefore: q.win.unacked()}
	st := compCheckPSN
	for st != compDone {
		var act compAction
		switch st {
		case compCheckPSN:
			st = q.compCheckPSN(&k)
		case compImplicit:
			st, act = q.compImplicit(&k)
		case compCheckAck:
			st = q.compCheckAck(&k)
		case compAck:
			st, act = q.compAck(&k)
		case compRead:
			st, act = q.compRead(&k)
		case compAtomic:
			st, act = q.compAtomic(&k)
		case compRetry:
			st, act = q.compRetry(&k)
		case compRNR:
			st, act = q.compRNR(&k)
		case compError:
			st, act = compDone, compActFail
		}
		if !q.compAct(act, &k) {
			return
		}
	}
}

// compAct carries out an action of the completer; false when the QP failed.
func (q *QP) compAct(act compAction, k *compPkt) bool {
	switch act {
	case compActProgress:
		q.compProgress(k.ackBefore)
	case compActRewind:
		q.rewind(k.retry)
	case compActFail:
		if k.w != nil {
			k.w.done, k.w.status = true, k.status
		}
		q.fail()
		return false
	}
	return true
}

// compCheckPSN drops packets about nothing outstanding: PSNs before the
// oldest unacknowledged one (minus one: a repeated ACK) or never sent.
func (q *QP) compCheckPSN(k *compPkt) compState {
	psn, una := k.p.BTH.PSN, q.win.unacked()
	if !q.win.wasSent(psn) || wire.PSNBefore(psn, wire.PSNAdd(una, wire.PSNMask)) {
		q.stats.inc(CtrDropped)
		return compDone
	}
	if k.info.Kind == wire.KindAck && k.p.AETH.Type() != wire.SyndromeACK && wire.PSNBefore(psn, una) {
		q.stats.inc(CtrDropped) // a NAK for a PSN acknowledged since: stale
		return compDone
	}
	return compImplicit
}

// compImplicit: a response with PSN n acknowledges every request before n.
// For a plain ACK that is done in compAck (it covers n itself too).
func (q *QP) compImplicit(k *compPkt) (compState, compAction) {
	if k.info.Kind == wire.KindAck && k.p.AETH.Type() == wire.SyndromeACK {
		return compCheckAck, compActNone
	}
	prev := wire.PSNAdd(k.p.BTH.PSN, wire.PSNMask)
	before := q.win.unacked()
	retry, ok := q.ackThrough(prev)
	k.progressed = before != q.win.unacked()
	act := compActNone
	if k.progressed {
		act = compActProgress
	}
	if !ok {
		if q.win.sr.on && k.info.Kind == wire.KindReadResponse {
			return compCheckAck, act // placed where it belongs (sr_read.go)
		}
		if !q.lostResponse(k, retry) {
			return compDone, act
		}
		return compRetry, act
	}
	return compCheckAck, act
}

// ackThrough marks SEND/WRITE WQEs whose last PSN is at or before last as
// done and advances the window's unacked PSN. It stops at an unanswered
// READ/atomic WQE that last covers: its response was lost, and it returns
// the PSN to resend from with ok == false (rxe: an ACK past a READ means
// retry). A requester about to resend what this covers skips it when it
// next runs (reqProgress).
func (q *QP) ackThrough(last uint32) (retry uint32, ok bool) {
	c := &q.comp
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	next := wire.PSNAdd(last, 1)
	for i := c.head; i != posted; i++ {
		w := sq.at(i)
		if !w.started {
			break
		}
		if w.done {
			continue
		}
		if wire.PSNBefore(last, w.firstPSN) {
			break
		}
		if w.opcode.isReadOrAtomic() {
			if wire.PSNBefore(last, w.readPSN) {
				break // consistent with the responses received so far
			}
			q.win.advance(w.readPSN, q.e.now)
			return w.readPSN, false
		}
		if wire.PSNBefore(last, w.lastPSN) {
			break // partly acknowledged
		}
		w.done = true
	}
	q.win.advance(next, q.e.now)
	return 0, true
}

func (q *QP) compCheckAck(k *compPkt) compState {
	switch k.info.Kind {
	case wire.KindReadResponse:
		return compRead
	case wire.KindAtomicAck:
		return compAtomic
	}
	a := k.p.AETH
	switch a.Type() {
	case wire.SyndromeACK:
		return compAck
	case wire.SyndromeRNR:
		return compRNR
	case wire.SyndromeNAK:
		switch a.Syndrome {
		case wire.NAKPSNSeqErr:
			q.stats.inc(CtrSeqNAKsRecv)
			c := &q.comp
			if c.nakSet && c.nakPSN == k.p.BTH.PSN && !k.progressed {
				// The responder NAKs a gap once; the same NAK again is a
				// duplicate or stale copy: resending again would only waste.
				q.stats.inc(CtrDropped)
				return compDone
			}
			c.nakSet, c.nakPSN = true, k.p.BTH.PSN
			k.retry, k.seqNAK = k.p.BTH.PSN, true
			return compRetry
		default:
			k.status = nakStatus(a.Syndrome)
		}
		k.w = q.wqeAt(k.p.BTH.PSN)
		return compError
	}
	q.stats.inc(CtrDropped)
	return compDone
}

// wqeAt returns the outstanding WQE holding psn, or nil.
func (q *QP) wqeAt(psn uint32) *sendWQE {
	_, w := q.sendWQEAt(psn)
	return w
}

// oldest returns the oldest WQE not done, or nil.
func (q *QP) oldest() *sendWQE {
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	for i := q.comp.head; i != posted; i++ {
		w := sq.at(i)
		if !w.started {
			return nil
		}
		if !w.done {
			return w
		}
	}
	return nil
}

func (q *QP) compAck(k *compPkt) (compState, compAction) {
	before := q.win.unacked()
	retry, ok := q.ackThrough(k.p.BTH.PSN)
	k.progressed = before != q.win.unacked()
	if !ok {
		// It stopped at an unanswered READ/atomic, but what it passed
		// before that is acknowledged: that is progress (the retry
		// counts start again), whatever is done about the READ.
		if k.progressed {
			q.compProgress(k.ackBefore)
		}
		if !q.lostResponse(k, retry) {
			return compDone, compActNone
		}
		return compRetry, compActNone
	}
	if !k.progressed {
		return compDone, compActNone // a repeated ACK
	}
	return compDone, compActProgress
}

// compRead places one READ response (IBA 9.7): it must be the next one
// the oldest READ WQE expects; one past it means responses were lost.
func (q *QP) compRead(k *compPkt) (compState, compAction) {
	if q.win.sr.on {
		return q.srRead(k) // sr_read.go
	}
	w := q.oldest()
	psn := k.p.BTH.PSN
	if w == nil || w.opcode != WRRDMARead || wire.PSNBefore(psn, w.firstPSN) || wire.PSNBefore(w.lastPSN, psn) {
		q.stats.inc(CtrDropped)
		return compDone, compActNone
	}
	if psn != w.readPSN {
		if wire.PSNBefore(psn, w.readPSN) {
			q.stats.inc(CtrDropped) // duplicate
			return compDone, compActNone
		}
		return q.gap(k, w.readPSN)
	}
	pmtu := uint64(q.e.pmtu)
	off := uint64(wire.PSNDiff(psn, w.firstPSN)) * pmtu
	n := uint64(len(k.p.Payload))
	last := k.info.Pos == wire.PosLast || k.info.Pos == wire.PosOnly
	if (!last && n != pmtu) || (last && off+n != w.length) || off+n > w.length {
		k.w, k.status = w, WCBadRespErr // a response of the wrong length
		return compError, compActNone
	}
	if st := q.sglCopy(w.sgl, off, k.p.Payload, true); st != WCSuccess {
		k.w, k.status = w, st
		return compError, compActNone
	}
	w.readPSN = wire.PSNAdd(psn, 1)
	q.win.advance(w.readPSN, q.e.now)
	if last {
		w.done = true
	}
	q.comp.gapSet = false
	return compDone, compActProgress
}

// gap starts one go-back-N for a response that arrived past a lost one.
func (q *QP) gap(k *compPkt, from uint32) (compState, compAction) {
	if !q.lostResponse(k, from) {
		return compDone, compActNone
	}
	return compRetry, compActNone
}

// lostResponse decides on a response that shows an earlier READ response or
// atomic ACK was lost (it arrived past the hole, or acknowledges past an
// unanswered READ/atomic): the first such packet for a hole starts one
// go-back-N from `from` (true, k.retry set); every later packet past the same
// hole is dropped (false) until the hole is filled or a timer resends. On a
// real link the packets past a hole arrive one by one, each in its own
// Progress: resending the READ request for each would have the responder
// regenerate the rest of the READ once per packet.
func (q *QP) lostResponse(k *compPkt, from uint32) bool {
	c := &q.comp
	if q.win.sr.on {
		// Selective repeat re-requests the READ's missing range alone
		// (sr_read.go); an atomic goes back as before.
		if w := q.wqeAt(from); w != nil && w.opcode == WRRDMARead {
			if !w.rrOut {
				q.srReadWant(w)
			}
			return false
		}
	}
	if c.gapSet && c.gapPSN == from {
		q.stats.inc(CtrDropped)
		return false
	}
	c.gapSet, c.gapPSN = true, from
	k.retry = from
	return true
}

func (q *QP) compAtomic(k *compPkt) (compState, compAction) {
	w := q.oldest()
	psn := k.p.BTH.PSN
	if w == nil || !w.opcode.isAtomic() || psn != w.firstPSN {
		if w != nil && w.opcode.isAtomic() && wire.PSNBefore(w.firstPSN, psn) {
			return q.gap(k, w.firstPSN)
		}
		q.stats.inc(CtrDropped)
		return compDone, compActNone
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], k.p.AtomicAck.Orig) // ibverbs: host order in memory
	if st := q.sglCopy(w.sgl, 0, b[:], true); st != WCSuccess {
		k.w, k.status = w, st
		return compError, compActNone
	}
	w.done = true
	w.readPSN = wire.PSNAdd(psn, 1)
	if q.win.sr.on {
		// Selective repeat may have completed READs after it while the
		// atomic was unanswered (their responses placed past it):
		// the window moves past those too.
		q.srReadAdvance()
	} else {
		q.win.advance(w.readPSN, q.e.now)
	}
	q.comp.gapSet = false
	return compDone, compActProgress
}

// compRetry resends from k.retry. The transport retry counter (retry_cnt;
// IBA 12.7.38: timeouts, sequence errors) is spent as rxe spends it
// (rxe_comp.c, started_retry): a PSN sequence error NAK that acknowledges
// nothing new spends one retry when it starts a retry sequence; while one
// is under way (a NAK, a timeout or a lost response started it and no
// progress came since), further NAKs resend without spending, so the
// network's duplicated, reordered or stale NAKs cost nothing. The local ACK
// timer, restarted only by progress, still spends one per timeout, so a
// peer that NAKs without ever making progress ends in RETRY_EXC_ERR within
// timeout × (retry_cnt+1). A NAK that acknowledges something new, and an
// ACK or response past an unanswered READ or atomic (its response was
// lost), resend without spending.
func (q *QP) compRetry(k *compPkt) (compState, compAction) {
	c := &q.comp
	q.win.loss(k.seqNAK)
	if !k.progressed && !c.retrying && k.info.Kind == wire.KindAck && k.p.AETH.Type() == wire.SyndromeNAK {
		if c.retries == 0 {
			q.stats.inc(CtrRetryExceeded)
			k.w, k.status = q.oldest(), WCRetryExcErr
			return compError, compActNone
		}
		c.retries--
	}
	q.stats.inc(CtrCompleterRetries)
	c.retrying = true
	return compDone, compActRewind
}

// compRNR waits the RNR timer of the NAK, then resends from its PSN
// (IBA 9.7); rnr_retry 7 retries forever.
func (q *QP) compRNR(k *compPkt) (compState, compAction) {
	c := &q.comp
	q.stats.inc(CtrRNRNAKsRecv)
	if q.e.attr.RNRRetry != 7 {
		if c.rnrRetries == 0 {
			q.stats.inc(CtrRNRRetryExceeded)
			k.w, k.status = q.wqeAt(k.p.BTH.PSN), WCRNRRetryExcErr
			return compError, compActNone
		}
		c.rnrRetries--
	}
	q.win.rnr(q.e.now, rnrTimerNs[k.p.AETH.RNRTimer()])
	k.retry = k.p.BTH.PSN
	return compDone, compActRewind
}

// compProgress notes forward progress: the window responds (and may find a
// fast retransmission spurious), retry counts start over.
func (q *QP) compProgress(before uint32) {
	c := &q.comp
	if q.win.acked(before, q.e.now) {
		q.stats.inc(CtrSpuriousFastRetransmits)
	}
	c.retries = q.e.attr.RetryCnt
	c.nakSet = false
	c.retrying = false
	if !q.win.rnrPending() {
		c.rnrRetries = q.e.attr.RNRRetry
	}
}

// timers fires the send window's timers: an overdue ACK resends from the
// oldest unacknowledged PSN without spending retry_cnt; the local ACK timer
// (IBA 9.7) resends from there while retry_cnt lasts, then completes the
// oldest WQE with RETRY_EXC_ERR. With selective repeat "resends" means what
// is in flight and not held by the responder (lostInFlight), and the fast
// timer only probes with the newest of those.
func (q *QP) timers() {
	c := &q.comp
	fast, timeout := q.win.expired(q.e.now)
	if fast {
		q.stats.inc(CtrFastRetransmits)
		c.gapSet = false
		c.retrying = true
		q.lostInFlight(true)
	}
	if !timeout {
		return
	}
	q.stats.inc(CtrTimeouts)
	if c.retries == 0 {
		q.stats.inc(CtrRetryExceeded)
		q.compAct(compActFail, &compPkt{w: q.oldest(), status: WCRetryExcErr})
		return
	}
	c.retries--
	q.stats.inc(CtrCompleterRetries)
	c.gapSet = false
	c.retrying = true
	q.lostInFlight(false)
}

// retire completes done send WQEs in order: a WC for signaled or failed ones.
// The WQE's slot is released (sqDone) before its WC is pushed, so an
// application that reposts as soon as it polls the WC finds room.
func (q *QP) retire() {
	c := &q.comp
	posted := q.sqPosted.Load()
	sq := q.sq.Load() // after posted: it covers every index below
	for c.head != posted {
		w := sq.at(c.head)
		if !w.done {
			break
		}
		signal := w.status != WCSuccess || w.flags&Signaled != 0
		wc := WC{ID: w.id, Status: w.status, Opcode: w.opcode.wcOpcode(), QPN: q.qpn}
		if w.status == WCSuccess {
			wc.ByteLen = uint32(w.length) // as rxe reports it for every send WC
		}
		q.req.retired(w)
		w.started = false
		if w.opcode.isSend() && w.status != WCWRFlushErr {
			q.stats.inc(CtrSendsDone)
		}
		c.head++
		q.sqDone.Store(c.head) // from here the slot belongs to the poster
		if signal {
			q.scq.push(&wc)
		}
	}
}

// nakStatus is the work completion status a NAK syndrome means.
func nakStatus(syndrome uint8) WCStatus {
	switch syndrome {
	case wire.NAKInvalidRequest:
		return WCRemInvReqErr
	case wire.NAKRemoteAccess:
		return WCRemAccessErr
	case wire.NAKInvalidRDRequest:
		return WCRemInvRDReqErr
	}
	return WCRemOpErr
}
