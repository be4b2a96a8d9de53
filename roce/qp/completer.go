package qp

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/roce/wire"
)

// The completer handles what comes back to a requester (IBA 9.7;
// rxe_comp.c): ACKs, NAKs, READ responses and atomic ACKs. It completes send
// WQEs, rewinds the requester for go-back-N, runs the local ACK timer and the
// RNR wait, and turns NAKs into error completions.

type completer struct {
	head       uint32 // oldest WQE not retired
	ackPSN     uint32 // oldest PSN not yet acknowledged (or answered)
	deadline   int64  // local ACK timer (0: off)
	retries    uint8  // retry_cnt left
	rnrRetries uint8  // rnr_retry left (7: infinite)
	gapPSN     uint32 // a retry for a lost response was started at this PSN
	gapSet     bool
	nakPSN     uint32 // the last PSN sequence error NAK acted on
	nakSet     bool
	retrying   bool // a retry sequence was started and no progress came since

	// The send window in use (PSNs), up to Config.SendWindow: it starts at
	// initialWindow and doubles per round trip (one PSN per PSN
	// acknowledged) up to ssthresh, as TCP's slow start; on a loss (a PSN
	// sequence NAK, a lost response) it halves, at most once per window's
	// worth of packets and not below floor(), then grows by one PSN per
	// window of acknowledged PSNs; a fast retransmission halves it the
	// same way (and is undone if it proves spurious). When the local ACK
	// timer finds the loss (everything in flight was lost, the NAK too),
	// it restarts from floor() and slow-starts to half the window before
	// the loss. Without loss it reaches its maximum.
	cwnd       uint32
	cwndAcc    uint32 // acknowledged PSNs towards the next increase
	ssthresh   uint32 // slow start below this window
	recoverPSN uint32 // no further decrease until this PSN is acknowledged
	recovering bool

	// Fast retransmission, on top of IBA's local ACK timer (which alone
	// spends retry_cnt and ends in RETRY_EXC_ERR): when an ACK the requester
	// asked for (AckReq) is overdue by the measured round trip, it resends
	// from the oldest unacknowledged PSN. After a lost NAK or a lost resent
	// packet the responder stays silent until the timer, so without this a
	// single loss there costs a whole local ACK timeout.
	srtt, rttvar int64  // smoothed round trip and its variation (ns); srtt 0: no sample yet
	minRTT       int64  // the smallest round trip sampled (ns): the path without queues
	sampling     bool   // an RTT sample is under way (never on resent packets)
	sampleResent bool   // a NAK rewound: the next resent AckReq packet may be sampled
	sampPSN      uint32 // its packet
	sampAt       int64
	fastPSN      uint32 // the last packet sent with AckReq
	fastSentAt   int64  // when it was sent
	fastDeadline int64  // its ACK is overdue at this time (0: off)
	fastTries    uint8  // fast retransmissions since the last progress

	// Spurious fast retransmission (as TCP's Eifel, RFC 3522, without
	// timestamps): an ACK past the overdue packet that comes back sooner
	// than the path's minimum round trip after the resend, or before the
	// resend (held back by the halved window) sent that packet again,
	// answers the original transmission, so nothing was lost; the
	// window before the resend is restored and the ACK's round trip, late
	// as it was, is sampled so that the timeout grows.
	undo           bool   // a fast retransmission may yet prove spurious
	undoAt         int64  // when it resent
	undoPSN        uint32 // the overdue packet
	undoSentAt     int64  // when that packet was first sent
	undoCwnd       uint32 // the window state before it
	undoSsthresh   uint32
	undoRecovering bool
	undoRecoverPSN uint32
	reqPSN         uint32 // the requester's next PSN when the packet arrived
}

const (
	fastMinRTO   = 20_000 // ns
	fastMaxTries = 3
)

// rto is the fast retransmission timeout: 2·srtt + 4·rttvar, at least
// fastMinRTO, doubled for each fast retransmission without progress.
func (c *completer) rto() int64 {
	return max(2*c.srtt+4*c.rttvar, fastMinRTO) << c.fastTries
}

// sentAckReq notes a packet sent with AckReq at psn.
func (c *completer) sentAckReq(q *QP, psn uint32, resent bool) {
	now := q.e.now
	if (!resent || c.sampleResent) && !c.sampling {
		c.sampling, c.sampPSN, c.sampAt = true, psn, now
		c.sampleResent = false
	}
	c.fastPSN, c.fastSentAt = psn, now
	c.fastDeadline = 0
	if c.srtt != 0 && c.fastTries < fastMaxTries {
		rto := c.rto()
		if t := timeoutNs(q.e.attr.Timeout); t == 0 || rto < t {
			c.fastDeadline = now + rto
		}
	}
}

// spurious undoes a fast retransmission that an ACK for the original
// transmission proved needless: the window goes back to what it was, and
// the late round trip is sampled with the variation raised to a quarter of
// it, so that the next timeout waits at least that long (RFC 4015's
// response, roughly) and the variation decays over the following samples.
func (c *completer) spurious(q *QP) {
	q.stats.inc(CtrSpuriousFastRetransmits)
	r := q.e.now - c.undoSentAt
	c.rttSample(r)
	c.rttvar = max(c.rttvar, r/4)
	if !q.fixedWin {
		c.cwnd, c.ssthresh = max(c.cwnd, c.undoCwnd), c.undoSsthresh
		c.recovering, c.recoverPSN = c.undoRecovering, c.undoRecoverPSN
	}
}

// rttSample folds one round trip into srtt and rttvar (RFC 6298).
func (c *completer) rttSample(r int64) {
	r = max(r, 1)
	if c.minRTT == 0 || r < c.minRTT {
		c.minRTT = r
	}
	if c.srtt == 0 {
		c.srtt, c.rttvar = r, r/2
		return
	}
	d := c.srtt - r
	if d < 0 {
		d = -d
	}
	c.rttvar = (3*c.rttvar + d) / 4
	c.srtt = (7*c.srtt + r) / 8
}

// Bounds of the send window's response to loss. Go-back-N resends all that
// is in flight after a lost packet, so the best window under random loss is
// about the path's bandwidth-delay product: smaller leaves the link idle,
// larger only queues packets that are resent. On a loss the window goes no
// lower than that estimate, cwnd × minimum RTT / smoothed RTT (the queued
// part of the window taken off), kept within [lossFloorMin, lossFloorMax];
// before any RTT sample, lossFloor. A connection starts at initialWindow
// and slow-starts towards Config.SendWindow. Measured with
// TestGoodputUnderLoss (5 % loss each way; relay, veth, fast paths):
// floor 16 fixed gave 25/41/5 % of loss-free goodput, the estimate
// clamped to [12, 32] with initialWindow 128 and AckReq every 2nd to 4th
// packet at such windows 33/54/6 %; fixed floors of 8, 12, 20, 24 and 32
// each lost on one path what they gained on another.
const (
	lossFloor     = 16
	lossFloorMin  = 12
	lossFloorMax  = 32
	initialWindow = 128
)

// floor is the lowest window a loss may leave.
func (c *completer) floor(q *QP) uint32 {
	f := uint32(lossFloor)
	if c.minRTT > 0 && c.srtt > 0 {
		f = min(max(uint32(int64(c.cwnd)*c.minRTT/c.srtt), lossFloorMin), lossFloorMax)
	}
	return min(f, q.window)
}

// lossEvent shrinks the send window (multiplicative decrease). severe (the
// local ACK timer fired: the path lost everything in flight) restarts from
// the floor and grows back quickly to half the old window (slow start).
func (c *completer) lossEvent(q *QP, severe bool) {
	if q.fixedWin {
		return
	}
	if c.recovering && wire.PSNBefore(c.ackPSN, c.recoverPSN) && !severe {
		return // the same loss episode
	}
	lo := c.floor(q)
	if !c.recovering || !wire.PSNBefore(c.ackPSN, c.recoverPSN) {
		c.ssthresh = max(c.cwnd/2, lo)
	}
	c.cwnd = c.ssthresh
	if severe {
		c.cwnd = lo
	}
	c.cwndAcc = 0
	c.recovering, c.recoverPSN = true, q.req.maxPSN
}

// grow widens the window by acked PSNs: by each below ssthresh (slow start),
// by one per window above it (additive increase).
func (c *completer) grow(q *QP, acked uint32) {
	if c.cwnd >= q.window {
		return
	}
	if c.cwnd < c.ssthresh {
		c.cwnd = min(c.cwnd+acked, c.ssthresh)
		return
	}
	c.cwndAcc += acked
	for c.cwndAcc >= c.cwnd && c.cwnd < q.window {
		c.cwndAcc -= c.cwnd
		c.cwnd++
	}
}

// compState is a stage of the completer.
type compState uint8

const (
	compCheckPSN compState = iota // is the packet about something outstanding?
	compImplicit                  // acknowledge everything before it
	compCheckAck                  // classify: ACK, RNR NAK, NAK, READ response, atomic ACK
	compAck                       // ACK: complete SEND/WRITE WQEs up to its PSN
	compRead                      // place READ response data
	compAtomic                    // place the atomic result
	compRetry                     // go-back-N from comp.retryPSN
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
	compActRewind              // resend from c.retry
	compActFail                // complete the WQE with the status, QP to Error
)

// compPkt is the scratch of one completer run.
type compPkt struct {
	p      *wire.Packet
	info   *wire.OpInfo
	w      *sendWQE
	retry  uint32
	status WCStatus
	// progressed: the implicit acknowledgement moved ackPSN.
	progressed bool
	ackBefore  uint32 // ackPSN when the packet arrived
}

func (q *QP) complete(p *wire.Packet, info *wire.OpInfo) {
	k := compPkt{p: p, info: info, ackBefore: q.comp.ackPSN}
	q.comp.reqPSN = q.req.psn
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
		switch act {
		case compActProgress:
			q.comp.progress(q, k.ackBefore)
		case compActRewind:
			q.rewind(k.retry)
		case compActFail:
			if k.w != nil {
				k.w.done, k.w.status = true, k.status
			}
			q.fail()
			return
		}
	}
}

// compCheckPSN drops packets about nothing outstanding: PSNs before the
// oldest unacknowledged one (minus one: a repeated ACK) or never sent.
func (q *QP) compCheckPSN(k *compPkt) compState {
	c, r := &q.comp, &q.req
	psn := k.p.BTH.PSN
	if !r.sent || !wire.PSNBefore(psn, r.maxPSN) || wire.PSNBefore(psn, wire.PSNAdd(c.ackPSN, wire.PSNMask)) {
		q.stats.inc(CtrDropped)
		return compDone
	}
	if k.info.Kind == wire.KindAck && k.p.AETH.Type() != wire.SyndromeACK && wire.PSNBefore(psn, c.ackPSN) {
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
	before := q.comp.ackPSN
	retry, ok := q.ackThrough(prev)
	k.progressed = before != q.comp.ackPSN
	act := compActNone
	if k.progressed {
		act = compActProgress
	}
	if !ok {
		if !q.lostResponse(k, retry) {
			return compDone, act
		}
		return compRetry, act
	}
	return compCheckAck, act
}

// ackThrough marks SEND/WRITE WQEs whose last PSN is at or before last as
// done and moves ackPSN. It stops at an unanswered READ/atomic WQE that
// last covers: its response was lost, and it returns the PSN to resend
// from with ok == false (rxe: an ACK past a READ means retry).
func (q *QP) ackThrough(last uint32) (retry uint32, ok bool) {
	c, r := &q.comp, &q.req
	posted := q.sqPosted.Load()
	next := wire.PSNAdd(last, 1)
	for i := c.head; i != posted; i++ {
		w := &q.sq[i&q.sqMask]
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
			if wire.PSNBefore(c.ackPSN, w.readPSN) {
				c.ackPSN = w.readPSN
			}
			return w.readPSN, false
		}
		if wire.PSNBefore(last, w.lastPSN) {
			break // partly acknowledged
		}
		w.done = true
	}
	if wire.PSNBefore(c.ackPSN, next) {
		c.ackPSN = next
	}
	if wire.PSNBefore(r.psn, c.ackPSN) {
		q.rewind(c.ackPSN) // a late ACK covered what we were about to resend
	}
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
			k.retry = k.p.BTH.PSN
			// The responder drops every packet after the NAKed one until it
			// comes again, so an ACK of a packet resent now can only answer
			// the resent copy: a clean RTT sample even though resent (on a
			// lossy path the originals rarely go unNAKed long enough for
			// Karn's rule to allow one).
			c.sampleResent = true
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
	posted := q.sqPosted.Load()
	for i := q.comp.head; i != posted; i++ {
		w := &q.sq[i&q.sqMask]
		if !w.started {
			break
		}
		if !w.done && !wire.PSNBefore(psn, w.firstPSN) && !wire.PSNBefore(w.lastPSN, psn) {
			return w
		}
	}
	return nil
}

// oldest returns the oldest WQE not done, or nil.
func (q *QP) oldest() *sendWQE {
	posted := q.sqPosted.Load()
	for i := q.comp.head; i != posted; i++ {
		w := &q.sq[i&q.sqMask]
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
	before := q.comp.ackPSN
	retry, ok := q.ackThrough(k.p.BTH.PSN)
	if !ok {
		if !q.lostResponse(k, retry) {
			return compDone, compActNone
		}
		return compRetry, compActNone
	}
	if before == q.comp.ackPSN {
		return compDone, compActNone // a repeated ACK
	}
	return compDone, compActProgress
}

// compRead places one READ response (IBA 9.7): it must be the next one
// the oldest READ WQE expects; one past it means responses were lost.
func (q *QP) compRead(k *compPkt) (compState, compAction) {
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
	q.comp.ackPSN = w.readPSN
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
	q.comp.ackPSN = w.readPSN
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
	c.lossEvent(q, false)
	if !k.progressed && !c.retrying && k.info.Kind == wire.KindAck && k.p.AETH.Type() == wire.SyndromeNAK {
		if c.retries == 0 {
			k.w, k.status = q.oldest(), WCRetryExcErr
			return compError, compActNone
		}
		c.retries--
	}
	c.retrying = true
	c.undo = false // a loss the NAK reports: the resend stands
	// The resend starts now; an ACK overdue from before it must not start
	// another one (the resent AckReq packets arm the fast timer again).
	c.fastDeadline = 0
	return compDone, compActRewind
}

// compRNR waits the RNR timer of the NAK, then resends from its PSN
// (IBA 9.7); rnr_retry 7 retries forever.
func (q *QP) compRNR(k *compPkt) (compState, compAction) {
	c := &q.comp
	q.stats.inc(CtrRNRNAKsRecv)
	if q.e.attr.RNRRetry != 7 {
		if c.rnrRetries == 0 {
			k.w, k.status = q.wqeAt(k.p.BTH.PSN), WCRNRRetryExcErr
			return compError, compActNone
		}
		c.rnrRetries--
	}
	q.req.rnrUntil = q.e.now + rnrTimerNs[k.p.AETH.RNRTimer()]
	if q.req.rnrUntil == 0 {
		q.req.rnrUntil = 1
	}
	k.retry = k.p.BTH.PSN
	c.deadline = 0
	c.fastDeadline = 0
	c.undo = false
	return compDone, compActRewind
}

// progress notes forward progress: retry counts start over, the timer
// restarts (or stops when nothing is outstanding).
func (c *completer) progress(q *QP, before uint32) {
	if d := wire.PSNDiff(c.ackPSN, before); d > 0 {
		c.grow(q, uint32(d))
	}
	if c.recovering && !wire.PSNBefore(c.ackPSN, c.recoverPSN) {
		c.recovering = false
	}
	if c.sampling && wire.PSNBefore(c.sampPSN, c.ackPSN) {
		c.rttSample(q.e.now - c.sampAt)
		c.sampling = false
	}
	if c.undo && wire.PSNBefore(c.undoPSN, c.ackPSN) {
		c.undo = false
		// Answered by the original transmission: sooner than a resend
		// could have made the round trip, or before the resend reached it.
		if q.e.now-c.undoAt < c.minRTT || !wire.PSNBefore(c.undoPSN, c.reqPSN) {
			c.spurious(q)
		}
	}
	c.fastTries = 0
	if wire.PSNBefore(c.fastPSN, c.ackPSN) {
		c.fastDeadline = 0 // what was asked for is answered
	} else if c.fastDeadline != 0 {
		c.fastDeadline = q.e.now + c.rto() // overdue means no progress for a while
	}
	c.retries = q.e.attr.RetryCnt
	c.nakSet = false
	c.retrying = false
	if q.req.rnrUntil == 0 {
		c.rnrRetries = q.e.attr.RNRRetry
	}
	c.deadline = 0
	if q.outstanding() {
		c.armTimer(q)
	}
}

func (c *completer) armTimer(q *QP) {
	if t := timeoutNs(q.e.attr.Timeout); t != 0 {
		c.deadline = q.e.now + t
	}
}

// outstanding reports whether a sent request is unanswered.
func (q *QP) outstanding() bool {
	return q.req.sent && wire.PSNBefore(q.comp.ackPSN, q.req.maxPSN)
}

// timers fires the local ACK timer (IBA 9.7): resend from the oldest
// unacknowledged PSN while retry_cnt lasts, then RETRY_EXC_ERR.
func (q *QP) timers() {
	c := &q.comp
	now := q.e.now
	if c.fastDeadline != 0 && now >= c.fastDeadline {
		c.fastDeadline = 0
		if q.outstanding() && q.req.rnrUntil == 0 {
			c.fastTries++
			q.stats.inc(CtrFastRetransmits)
			if !c.undo && c.minRTT > 0 {
				c.undo, c.undoAt, c.undoPSN, c.undoSentAt = true, now, c.fastPSN, c.fastSentAt
				c.undoCwnd, c.undoSsthresh = c.cwnd, c.ssthresh
				c.undoRecovering, c.undoRecoverPSN = c.recovering, c.recoverPSN
			}
			c.lossEvent(q, false)
			c.gapSet = false
			c.retrying = true
			q.rewind(c.ackPSN)
		}
	}
	if c.deadline == 0 || now < c.deadline {
		return
	}
	c.deadline = 0
	if !q.outstanding() {
		return
	}
	q.stats.inc(CtrTimeouts)
	c.undo = false
	c.lossEvent(q, true)
	if c.retries == 0 {
		if w := q.oldest(); w != nil {
			w.done, w.status = true, WCRetryExcErr
		}
		q.fail()
		return
	}
	c.retries--
	c.gapSet = false
	c.retrying = true
	q.rewind(c.ackPSN)
	c.armTimer(q)
}
