package qp

import "github.com/xdproce/xdproce/roce/wire"

// sendWindow is an RC requester's send window. It owns how many PSNs may be
// in flight, the response to loss (halving, fast retransmission, undo of a
// fast retransmission that proves spurious), round-trip sampling, the fast
// retransmission timer, the local ACK timer (IBA 9.7) and the RNR wait. It
// decides; the engines act: the requester asks canSend and wantAckReq
// before a packet and reports it with sent, and tells resend where a
// go-back-N restarts; the completer moves the acknowledged PSN with advance
// and reports progress with acked, a loss with loss, an RNR NAK with rnr,
// and runs expired from the engine's timer step. The completer turns the
// window's verdicts into its action (resend from unacked, complete in
// error); the window never touches the send queue or the requester.
//
// Extensions (issue 16/20: selective repeat, DCQCN rate pacing):
//   - DCQCN's rate pacer (pacer.go, cc_dcqcn.go, docs/cc.md) sits behind
//     canSend and wake: canSend also refuses a packet the pacer's rate does
//     not allow yet, wake returns the pacer's next release time (the device
//     runs Progress then), sent charges the pacer with the frame's length,
//     and cnp, beside rnr, hands it a CNP. The requester's packet building
//     stays as it is: it stops at reqWait when canSend says no.
//   - Selective repeat (window_sr.go, docs/sr-wire.md) is in: with
//     Attr.SelectiveRepeat the window keeps a scoreboard (sr) of the PSNs
//     the responder holds, fed by the completer's SR_SACKs and its timers,
//     and hands the requester single PSNs to resend instead of a rewind
//     (judged lost by transmission order: sent numbers every packet);
//     advance clears what it passes. Loss leaves the window alone (no
//     lossEvent, no undo), the fast timer probes (rto 2·srtt), a local ACK
//     timeout halves the window (srBoard.timeout); the RTT sampling stays.
//
// All times are nanoseconds of the engine's clock, passed in by the caller,
// so the window can be driven alone (window_test.go).
type sendWindow struct {
	una      uint32 // oldest PSN not yet acknowledged (or answered)
	max      uint32 // one past the highest PSN ever sent
	anySent  bool   // max valid
	limit    uint32 // Config.SendWindow: the largest window
	fixed    bool   // Config.FixedWindow: cwnd stays at limit
	timeout  int64  // local ACK timeout (ns; 0: infinite)
	deadline int64  // local ACK timer (0: off)
	rnrUntil int64  // after an RNR NAK: no transmission before this time (0: none)

	// The send window in use (PSNs), up to limit: it starts at
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
	undoResent     bool   // the resend has sent undoPSN again
	undoCwnd       uint32 // the window state before it
	undoSsthresh   uint32
	undoRecovering bool
	undoRecoverPSN uint32

	cnpUntil int64 // no window cut for a CNP before this time (cnp)

	sr   srBoard // selective repeat (window_sr.go); off: go-back-N
	pace pacer   // DCQCN's rate limiter (pacer.go); off: no pacing
}

const (
	fastMinRTO   = 20_000 // ns
	fastMaxTries = 3
	ackReqEvery  = 64 // AckReq at least every this many packets of a long message
	// With selective repeat (only between xdproce peers), AckReq every
	// half window up to this many packets (wantAckReq).
	srAckReqEvery = 1024
)

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

// start opens the window at psn (the QP enters RTS): limit PSNs at most,
// slow-starting from initialWindow unless fixed.
func (w *sendWindow) start(psn, limit uint32, fixed bool) {
	w.una, w.limit, w.fixed = psn, limit, fixed
	w.cwnd = limit
	if !fixed {
		w.cwnd = min(limit, initialWindow)
	}
	w.ssthresh = limit
	w.cnpUntil = 0
}

// setTimeout sets the local ACK timeout (ns; 0: infinite).
func (w *sendWindow) setTimeout(ns int64) { w.timeout = ns }

// unacked is the oldest PSN not yet acknowledged.
func (w *sendWindow) unacked() uint32 { return w.una }

// outstanding reports whether a sent request is unanswered.
func (w *sendWindow) outstanding() bool { return w.anySent && wire.PSNBefore(w.una, w.max) }

// wasSent reports whether psn was sent (it is before the highest PSN sent).
func (w *sendWindow) wasSent(psn uint32) bool { return w.anySent && wire.PSNBefore(psn, w.max) }

// canSend reports whether the packet at psn may go out now: no RNR wait,
// fewer than cwnd PSNs in flight before it, and the pacer's rate allows it.
func (w *sendWindow) canSend(psn uint32, now int64) bool {
	if w.rnrUntil != 0 {
		if now < w.rnrUntil {
			return false
		}
		w.rnrUntil = 0
	}
	return uint32(wire.PSNDiff(psn, w.una)) < w.cwnd && w.pace.allow(now)
}

// wantAckReq reports whether the packet at psn, since packets after the
// last AckReq (itself included), should ask for an ACK: when it fills the
// window, or every cwnd²/256 packets, between 2 and ackReqEvery: every
// 64th at windows of 128 and more (as before the window adapted; the golden
// captures keep their bytes), every 2nd to 4th at the small windows of a
// lossy path, where frequent ACKs keep a lost one from stalling the window
// until a timer. With selective repeat (negotiated: the peer is an xdproce
// whose responder ACKs every srAckEvery) it asks every half window from
// 256 PSNs on, up to srAckReqEvery: every 256th at 512, every 1024th at
// selective repeat's default window with DCQCN, 2048 (DefaultSRSendWindow); small
// windows keep their cadence. The responder SACKs a hole as soon as a
// packet past it arrives, whatever the cadence, and the fast timer still
// follows the last packet that asked; most ACK frames leave the reverse
// path, each a transmission and a wake-up at both ends and at any
// forwarder between (docs/status.md, "lmrm get against the READ get"). The
// last packet of a message asks regardless (the requester's rule).
func (w *sendWindow) wantAckReq(psn, since uint32) bool {
	full := uint32(wire.PSNDiff(psn, w.una))+1 >= w.cwnd
	every := min(ackReqEvery, max(w.cwnd*w.cwnd/256, 2))
	if w.sr.on && w.cwnd >= 4*ackReqEvery {
		every = min(w.cwnd/2, srAckReqEvery)
	}
	return full || since >= every
}

// sent notes the packet at psn, next being the PSN after it (a READ request
// covers its responses' PSNs), a frame of size bytes sent at now, with
// AckReq if ackReq. It reports whether the packet was sent before (a
// retransmission). It charges the pacer, starts an RTT sample (never on a
// resent packet, Karn, except the first after a NAK), arms the fast
// retransmission timer on AckReq and the local ACK timer if it is off.
func (w *sendWindow) sent(psn, next uint32, ackReq bool, size int, now int64) (resent bool) {
	resent = w.wasSent(psn)
	w.pace.charge(size, now)
	if ackReq {
		if (!resent || w.sampleResent) && !w.sampling {
			w.sampling, w.sampPSN, w.sampAt = true, psn, now
			w.sampleResent = false
		}
		w.fastPSN, w.fastSentAt = psn, now
		w.fastDeadline = 0
		if w.srtt != 0 && (w.fastTries < fastMaxTries || w.sr.on && w.fastTries < srFastMaxTries) {
			if rto := w.rto(); w.timeout == 0 || rto < w.timeout {
				w.fastDeadline = now + rto
			}
		}
	}
	w.sr.sent(psn, next, resent, now)
	if !w.anySent || wire.PSNBefore(w.max, next) {
		w.max, w.anySent = next, true
	}
	if w.undo && wire.PSNBefore(w.undoPSN, next) {
		w.undoResent = true
	}
	if w.deadline == 0 {
		w.armTimer(now)
	}
	return resent
}

// resend notes that the requester goes back to psn: no RTT sample from a
// packet at or after it (Karn: its ACK may answer either copy).
func (w *sendWindow) resend(psn uint32) {
	if w.sampling && !wire.PSNBefore(w.sampPSN, psn) {
		w.sampling = false
	}
}

// advance moves the oldest unacknowledged PSN forward to psn (an ACK at
// now); it reports whether it moved.
func (w *sendWindow) advance(psn uint32, now int64) bool {
	if !wire.PSNBefore(w.una, psn) {
		return false
	}
	if w.sr.on {
		w.sr.forget(w.una, psn, now, w.ambig())
	}
	w.una = psn
	return true
}

// acked responds to progress: the oldest unacknowledged PSN moved from
// before (advance) at now. The window grows, a loss episode it covers ends,
// an RTT sample it answers is taken, the fast and local ACK timers restart
// (or stop when nothing is outstanding). It reports whether the progress
// proved a fast retransmission spurious (the window is then restored).
func (w *sendWindow) acked(before uint32, now int64) (spurious bool) {
	if d := wire.PSNDiff(w.una, before); d > 0 {
		w.grow(uint32(d))
	}
	if w.recovering && !wire.PSNBefore(w.una, w.recoverPSN) {
		w.recovering = false
	}
	if w.sampling && wire.PSNBefore(w.sampPSN, w.una) {
		w.rttSample(now - w.sampAt)
		w.sampling = false
	}
	if w.undo && wire.PSNBefore(w.undoPSN, w.una) {
		w.undo = false
		// Answered by the original transmission: sooner than a resend
		// could have made the round trip, or before the resend reached it.
		if now-w.undoAt < w.minRTT || !w.undoResent {
			w.spurious(now)
			spurious = true
		}
	}
	w.fastTries = 0
	if wire.PSNBefore(w.fastPSN, w.una) {
		w.fastDeadline = 0 // what was asked for is answered
	} else if w.fastDeadline != 0 {
		w.fastDeadline = now + w.rto() // overdue means no progress for a while
	}
	w.sr.keepFast(w, now) // selective repeat: the fast timer runs while anything is outstanding
	w.deadline = 0
	if w.outstanding() {
		w.armTimer(now)
	}
	return spurious
}

// loss responds to a loss the peer reported: a PSN sequence error NAK
// (seqNAK) or a response that shows an earlier one was lost. The window
// halves (once per episode); the resend it causes stands (no undo) and
// arms the fast timer again from its own AckReq packets. After a sequence
// NAK the responder drops everything past the NAKed PSN until it comes
// again, so an ACK of a packet resent now can only answer the resent copy:
// a clean RTT sample even though resent (on a lossy path the originals
// rarely go unNAKed long enough for Karn's rule to allow one).
func (w *sendWindow) loss(seqNAK bool) {
	if seqNAK {
		w.sampleResent = true
	}
	w.lossEvent(false)
	w.undo = false
	w.fastDeadline = 0
}

// rnr starts the wait of an RNR NAK received at now: nothing is sent for
// wait ns, and the timers stop (the resend after the wait restarts them).
func (w *sendWindow) rnr(now, wait int64) {
	w.rnrUntil = now + wait
	if w.rnrUntil == 0 {
		w.rnrUntil = 1
	}
	w.deadline = 0
	w.fastDeadline = 0
	w.undo = false
}

// rnrPending reports whether an RNR wait is set and has not been passed by
// a send attempt since.
func (w *sendWindow) rnrPending() bool { return w.rnrUntil != 0 }

// expired fires the timers due at now. fast: an ACK asked for is overdue
// by the round trip (not during an RNR wait): the window halves, and may
// be restored if the ACK for the original comes after all. timeout: the
// local ACK timer fired with requests outstanding: the window restarts from
// the floor and the timer is armed again. Either way the caller resends
// from unacked (and spends retry_cnt on a timeout). With selective repeat
// loss does not change the window (as IRN: it is capped, and congestion is
// DCQCN's) and the caller resends only what the scoreboard says; only a
// local ACK timeout halves it for a while (window_sr.go).
func (w *sendWindow) expired(now int64) (fast, timeout bool) {
	if w.fastDeadline != 0 && now >= w.fastDeadline {
		w.fastDeadline = 0
		if w.outstanding() && w.rnrUntil == 0 {
			fast = true
			w.fastTries++
			if !w.sr.on {
				if !w.undo && w.minRTT > 0 {
					w.undo, w.undoAt, w.undoPSN, w.undoSentAt = true, now, w.fastPSN, w.fastSentAt
					w.undoCwnd, w.undoSsthresh = w.cwnd, w.ssthresh
					w.undoRecovering, w.undoRecoverPSN = w.recovering, w.recoverPSN
				}
				w.undoResent = false // the resend starts again at unacked, before undoPSN
				w.lossEvent(false)
			}
			w.sr.keepFast(w, now)
		}
	}
	if w.deadline == 0 || now < w.deadline {
		return fast, false
	}
	w.deadline = 0
	if !w.outstanding() {
		return fast, false
	}
	w.undo = false
	if w.sr.on {
		w.sr.timeout(w)
	} else {
		w.lossEvent(true)
	}
	w.armTimer(now)
	return fast, true
}

// stop turns the timers off (the QP entered Error).
func (w *sendWindow) stop() { w.deadline, w.fastDeadline = 0, 0 }

// wake is the earliest time the window wants the engine to run (0: none):
// a timer, the end of an RNR wait, or the pacer's release time.
func (w *sendWindow) wake() int64 {
	d := w.deadline
	for _, t := range [...]int64{w.fastDeadline, w.rnrUntil, w.pace.release()} {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

// cnp hands the pacer a CNP received at now; it reports whether the rate
// was cut (false: DCQCN is off, or a cut was made within its reduce
// period). With selective repeat the window halves too, at most once per
// round trip (srtt, at least cnpCutGap) and not below cnpWindowMin, then
// grows by one PSN per window acknowledged: N flows into one bottleneck
// each keep their whole window in flight, and the rate alone, which DCQCN
// soon raises again to where pacing stops, lets N windows of 1024 PSNs
// overflow a queue of a few hundred frames (docs/cc.md, the incast
// figures). A path that never marks never sends a CNP: its window is as
// before.
func (w *sendWindow) cnp(now int64) bool {
	if !w.pace.on {
		return false
	}
	if w.sr.on && now >= w.cnpUntil {
		w.cwnd = max(min(w.cwnd, cnpWindowMin), w.cwnd/2)
		w.ssthresh, w.cwndAcc = w.cwnd, 0
		w.cnpUntil = now + max(w.srtt, cnpCutGap)
	}
	return w.pace.cnp(now)
}

// The window's response to CNPs (cnp).
const (
	cnpWindowMin = 32      // PSNs
	cnpCutGap    = 100_000 // ns: the least time between two cuts
)

func (w *sendWindow) armTimer(now int64) {
	if w.timeout != 0 {
		w.deadline = now + w.timeout
	}
}

// rto is the fast retransmission timeout: 2·srtt + 4·rttvar, at least
// fastMinRTO, doubled for each fast retransmission without progress. With
// selective repeat it is 2·srtt (as TCP's tail loss probe timeout): what
// fires then is a probe of one packet (window_sr.go), and on a path whose
// round trip swings by tens of milliseconds 4·rttvar would put it past the
// local ACK timeout, leaving a lost tail to that.
func (w *sendWindow) rto() int64 {
	if w.sr.on {
		return max(2*w.srtt, fastMinRTO) << w.fastTries
	}
	return max(2*w.srtt+4*w.rttvar, fastMinRTO) << w.fastTries
}

// spurious undoes a fast retransmission that an ACK for the original
// transmission proved needless: the window goes back to what it was, and
// the late round trip is sampled with the variation raised to a quarter of
// it, so that the next timeout waits at least that long (RFC 4015's
// response, roughly) and the variation decays over the following samples.
func (w *sendWindow) spurious(now int64) {
	r := now - w.undoSentAt
	w.rttSample(r)
	w.rttvar = max(w.rttvar, r/4)
	if !w.fixed {
		w.cwnd, w.ssthresh = max(w.cwnd, w.undoCwnd), w.undoSsthresh
		w.recovering, w.recoverPSN = w.undoRecovering, w.undoRecoverPSN
	}
}

// rttSample folds one round trip into srtt and rttvar (RFC 6298).
func (w *sendWindow) rttSample(r int64) {
	r = max(r, 1)
	if w.minRTT == 0 || r < w.minRTT {
		w.minRTT = r
	}
	if w.srtt == 0 {
		w.srtt, w.rttvar = r, r/2
		return
	}
	d := w.srtt - r
	if d < 0 {
		d = -d
	}
	w.rttvar = (3*w.rttvar + d) / 4
	w.srtt = (7*w.srtt + r) / 8
}

// floor is the lowest window a loss may leave.
func (w *sendWindow) floor() uint32 {
	f := uint32(lossFloor)
	if w.minRTT > 0 && w.srtt > 0 {
		f = min(max(uint32(int64(w.cwnd)*w.minRTT/w.srtt), lossFloorMin), lossFloorMax)
	}
	return min(f, w.limit)
}

// lossEvent shrinks the send window (multiplicative decrease). severe (the
// local ACK timer fired: the path lost everything in flight) restarts from
// the floor and grows back quickly to half the old window (slow start).
func (w *sendWindow) lossEvent(severe bool) {
	if w.fixed {
		return
	}
	if w.recovering && wire.PSNBefore(w.una, w.recoverPSN) && !severe {
		return // the same loss episode
	}
	lo := w.floor()
	if !w.recovering || !wire.PSNBefore(w.una, w.recoverPSN) {
		w.ssthresh = max(w.cwnd/2, lo)
	}
	w.cwnd = w.ssthresh
	if severe {
		w.cwnd = lo
	}
	w.cwndAcc = 0
	w.recovering, w.recoverPSN = true, w.max
}

// grow widens the window by acked PSNs: by each below ssthresh (slow start),
// by one per window above it (additive increase).
func (w *sendWindow) grow(acked uint32) {
	if w.cwnd >= w.limit {
		return
	}
	if w.cwnd < w.ssthresh {
		w.cwnd = min(w.cwnd+acked, w.ssthresh)
		return
	}
	w.cwndAcc += acked
	for w.cwndAcc >= w.cwnd && w.cwnd < w.limit {
		w.cwndAcc -= w.cwnd
		w.cwnd++
	}
}
