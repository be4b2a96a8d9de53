package qp

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/xdproce/xdproce/roce/wire"
)

// srBoard is the send window's selective-repeat scoreboard
// (docs/sr-wire.md): which PSNs in flight the responder holds (from its
// SR_SACKs) and which are presumed lost. The completer feeds it (sack,
// lostAll on a timer); the requester asks it for the next PSN to resend
// (nextHole) and the window reports every packet sent (sent).
//
// Loss is judged by transmission order, as TCP's RACK does by time: every
// packet sent gets the next transmission number, and once a SACK or an ACK
// shows that transmission n arrived, every PSN whose latest transmission
// came before n and that is neither held nor acknowledged is lost (on a
// path that keeps order it would have arrived first). A packet past a hole
// thus marks the hole lost, and a resend that arrived marks lost both the
// earlier resends that did not and the new packets sent before it, even
// when the window is full and nothing new follows them. Each transmission
// is judged once (log), so the work is constant per packet. The arrival of
// a PSN that was resent is the resend's only when it is known at least
// max(minimum round trip, srtt/2) after the resend, or when the copy sent
// before the resend is older than 2·srtt + 4·rttvar (ambiguity): otherwise
// it may be that copy, late (reordered), which says nothing about what was
// sent since; without this, a reordered packet resent and then arriving
// would mark lost every packet in flight. (RACK takes the minimum round
// trip alone; srtt/2 keeps a stall of this loaded host between two SACKs
// from passing for a round trip.) A copy that old was lost, not delayed:
// without that bound, when the resends of a burst loss were lost again and
// each later resend (the fast timer's probes, one per 2·srtt) came back
// within srtt/2, no arrival counted and the holes were repaired one probe
// at a time (a daemon's bench client took 6 s over 134 holes).
//
// PSNs index the bitmaps modulo srSlots: the window never has more than
// srSlots PSNs in flight when it is on (enable caps it), so the PSNs from
// unacked on map to distinct bits; advance clears what it passes. Its
// arrays are allocated when it is turned on: a queue pair without
// selective repeat has none.
type srBoard struct {
	on     bool
	sacked *[srWords]uint64 // the responder holds it (or it is not a request: READ responses)
	rdHeld *[srWords]uint64 // READ responses placed past their READ's next expected one (sr_read.go)
	lost   *[srWords]uint64 // presumed lost and not resent since
	seq    *[srSlots]uint32 // each PSN's latest transmission number
	txAt   *[srSlots]int64  // when its latest transmission went
	gap    *[srSlots]uint32 // µs from the transmission before to the latest (0: sent once)
	log    *[srLog]uint32   // the PSN of transmission n, at n % srLog
	txSeq  uint32           // the next transmission number
	judged uint32           // transmissions before this one are judged
	mark   uint32           // transmission mark-1 arrived (0: none known)
	scan   uint32           // nextHole looks from here
	high   uint32           // and up to here (one past the highest PSN marked lost)
}

// srLog is how many transmissions the log remembers: more than can be in
// flight unjudged (a window of srSlots PSNs and its resends). An older
// transmission not judged in time is left to the timers.
const srLog = 2 * srSlots

// enable turns the scoreboard on or off for a window w that start has just
// opened; on caps the window at peer PSNs, what the responder holds past a
// hole (Attr.SRWindow; 0: srLegacyWindow, at most srSlots). Selective
// repeat keeps the window when a SACK reports a hole: only the timers
// shrink it (and back off).
func (b *srBoard) enable(on bool, w *sendWindow, peer uint32) {
	old := *b
	*b = srBoard{on: on}
	if !on {
		return
	}
	if old.sacked == nil {
		old.sacked, old.lost, old.rdHeld = new([srWords]uint64), new([srWords]uint64), new([srWords]uint64)
		old.seq, old.log = new([srSlots]uint32), new([srLog]uint32)
		old.txAt, old.gap = new([srSlots]int64), new([srSlots]uint32)
	}
	clear(old.sacked[:])
	clear(old.lost[:])
	clear(old.rdHeld[:])
	b.sacked, b.lost, b.seq, b.log, b.txAt, b.gap, b.rdHeld = old.sacked, old.lost, old.seq, old.log, old.txAt, old.gap, old.rdHeld
	b.scan, b.high = w.una, w.una
	if peer == 0 {
		peer = srLegacyWindow
	}
	w.limit = min(w.limit, peer, srSlots)
	w.cwnd = min(w.cwnd, w.limit)
	w.ssthresh = min(w.ssthresh, w.limit)
}

func bit(a *[srWords]uint64, psn uint32) bool {
	i := psn & srMask
	return a[i/64]&(1<<(i%64)) != 0
}

func setBit(a *[srWords]uint64, psn uint32, v bool) {
	i := psn & srMask
	if v {
		a[i/64] |= 1 << (i % 64)
	} else {
		a[i/64] &^= 1 << (i % 64)
	}
}

// seqBefore reports whether transmission a came before b.
func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }

// sent numbers the transmission at now of the packet at psn (next is the
// PSN after it: a READ request covers its responses' PSNs), a resend if
// resent.
func (b *srBoard) sent(psn, next uint32, resent bool, now int64) {
	if !b.on {
		return
	}
	n := b.txSeq
	b.txSeq++
	b.log[n%srLog] = psn
	for p, k := psn, 0; p != next && k < srSlots; p, k = wire.PSNAdd(p, 1), k+1 {
		i := p & srMask
		b.seq[i] = n
		b.gap[i] = 0
		if resent {
			b.gap[i] = uint32(min(max((now-b.txAt[i])/1000, 1), math.MaxUint32))
		}
		b.txAt[i] = now
	}
	setBit(b.lost, psn, false)
	if d := b.txSeq - b.judged; d > srLog {
		b.judged = b.txSeq - srLog // overwritten unjudged: the timers take them
	}
}

// ambiguity bounds when the arrival of a resent PSN may be its earlier
// copy's (arrived): known sooner than resend after the resend, with that
// copy younger than prior.
type ambiguity struct{ resend, prior int64 }

// arrived notes that psn arrived (held or acknowledged), known at now. A
// resent PSN that may have been its earlier copy (a) says nothing new.
func (b *srBoard) arrived(psn uint32, now int64, a ambiguity) {
	i := psn & srMask
	if g := b.gap[i]; g != 0 && now-b.txAt[i] < a.resend && now-b.txAt[i]+int64(g)*1000 < a.prior {
		return
	}
	if n := b.seq[i] + 1; seqBefore(b.mark, n) || b.mark == 0 {
		b.mark = n
	}
}

// forget clears the PSNs from..to-1 (acknowledged at now: unacked moved
// past them) and notes them arrived.
func (b *srBoard) forget(from, to uint32, now int64, ambig ambiguity) {
	if wire.PSNDiff(to, from) >= srSlots {
		clear(b.sacked[:])
		clear(b.lost[:])
		b.arrived(wire.PSNAdd(to, wire.PSNMask), now, ambig)
		return
	}
	for psn := from; wire.PSNBefore(psn, to); psn = wire.PSNAdd(psn, 1) {
		b.arrived(psn, now, ambig)
		setBit(b.sacked, psn, false)
		setBit(b.lost, psn, false)
	}
}

// sack records an SR_SACK: base is the first missing PSN, bm its bitmap
// (bit j: PSN base+1+j held; a multiple of 8 bytes); max is one past the
// highest PSN sent, now the time it came, ambig as for arrived.
// PSNs never sent are ignored. It reports whether the SACK named a PSN
// held that was not known to be (the responder is receiving). A base the
// scoreboard has as held was dropped by the responder after it was
// SACKed (a SEND it held found no receive WQE when its turn came: its RNR
// NAK may be lost), so it is lost: without this nothing but a timeout
// would resend it, and a timeout resends only what is not held (lostAll).
func (b *srBoard) sack(base uint32, bm []byte, max uint32, now int64, ambig ambiguity) (news bool) {
	if !b.on {
		return false
	}
	b.renege(base)
	first := wire.PSNAdd(base, 1)
	n := min(int(wire.PSNDiff(max, first)), 8*len(bm)) // bits that name a PSN sent
	for k := 0; k < n; k += 64 {
		v := binary.LittleEndian.Uint64(bm[k/8:])
		if n-k < 64 {
			v &= 1<<(n-k) - 1
		}
		if v == 0 {
			continue
		}
		psn := wire.PSNAdd(first, uint32(k))
		i := psn & srMask
		w, s := i/64, i%64
		old := b.sacked[w] >> s
		if s != 0 {
			old |= b.sacked[(w+1)%srWords] << (64 - s)
		}
		b.sacked[w] |= v << s
		if s != 0 {
			b.sacked[(w+1)%srWords] |= v >> (64 - s)
		}
		for fresh := v &^ old; fresh != 0; fresh &= fresh - 1 {
			b.arrived(wire.PSNAdd(psn, uint32(bits.TrailingZeros64(fresh))), now, ambig)
			news = true
		}
	}
	return news
}

// judge marks lost every transmission before mark whose PSN, in una..max-1,
// is neither held nor sent again since.
func (b *srBoard) judge(una, max uint32) {
	if b.mark == 0 {
		return
	}
	inFlight := uint32(wire.PSNDiff(max, una))
	for ; seqBefore(b.judged, b.mark) && seqBefore(b.judged, b.txSeq); b.judged++ {
		psn := b.log[b.judged%srLog]
		if b.seq[psn&srMask] != b.judged || uint32(wire.PSNDiff(psn, una)) >= inFlight || bit(b.sacked, psn) {
			continue
		}
		b.markLost(psn)
	}
}

// renege takes back what a SACK said of psn: the responder does not hold
// it (any more), so it is lost. (As RFC 2018's sender, which after a
// timeout no longer trusts SACKed data, but only where the responder can
// drop: the PSN it expects next.)
func (b *srBoard) renege(psn uint32) {
	if bit(b.sacked, psn) {
		setBit(b.sacked, psn, false)
		b.markLost(psn)
	}
}

// lostAll presumes everything in flight and not held lost (a timer fired):
// every such PSN up to max is resent once more. The oldest, una, is lost
// even if a SACK said it was held: a responder holding it would have run it
// and acknowledged it, so it dropped it since (renege).
func (b *srBoard) lostAll(una, max uint32) {
	if wire.PSNBefore(una, max) {
		b.renege(una)
	}
	for psn := una; wire.PSNBefore(psn, max); psn = wire.PSNAdd(psn, 1) {
		setBit(b.lost, psn, !bit(b.sacked, psn))
	}
	b.scan, b.high = una, max
	b.judged = b.txSeq // what is lost now is marked
}

// probe marks lost the newest PSN in flight (una..max-1) not held; when
// all are held, una (renege).
func (b *srBoard) probe(una, max uint32) {
	for psn := wire.PSNAdd(max, wire.PSNMask); wire.PSNDiff(psn, una) >= 0; psn = wire.PSNAdd(psn, wire.PSNMask) {
		if !bit(b.sacked, psn) {
			b.markLost(psn)
			return
		}
	}
	if wire.PSNBefore(una, max) {
		b.renege(una)
	}
}

// markLost marks psn lost and within nextHole's range.
func (b *srBoard) markLost(psn uint32) {
	setBit(b.lost, psn, true)
	if wire.PSNBefore(psn, b.scan) {
		b.scan = psn
	}
	if next := wire.PSNAdd(psn, 1); wire.PSNBefore(b.high, next) {
		b.high = next
	}
}

// nextHole returns the next PSN to resend: at or after una, before max,
// presumed lost, not held and not resent since.
func (b *srBoard) nextHole(una, max uint32) (uint32, bool) {
	if !b.on {
		return 0, false
	}
	b.judge(una, max)
	if wire.PSNBefore(b.high, una) {
		b.high = una
	}
	psn := b.scan
	if wire.PSNBefore(psn, una) {
		psn = una
	}
	for ; wire.PSNBefore(psn, b.high) && wire.PSNBefore(psn, max); psn = wire.PSNAdd(psn, 1) {
		if bit(b.lost, psn) && !bit(b.sacked, psn) {
			b.scan = psn
			return psn, true
		}
	}
	b.scan = psn
	return 0, false
}

// skip takes psn off the holes: it is not a request the responder holds (a
// READ response's PSN), or it cannot be rebuilt; the go-back-N paths and
// the timers recover it.
func (b *srBoard) skip(psn uint32) {
	setBit(b.sacked, psn, true)
	setBit(b.lost, psn, false)
	b.scan = wire.PSNAdd(psn, 1)
}

// timeout responds to a local ACK timeout: 67 ms (by default) without any
// answer is congestion or a stall, so the window halves (at each timeout
// in a row, not below the floor) and what is resent stays within it;
// ssthresh keeps the window before, so progress slow-starts back to it
// within a few round trips. A stall of this host costs little; a
// bottleneck that drops every resend sees the load fall quickly.
func (b *srBoard) timeout(w *sendWindow) {
	if w.fixed {
		return
	}
	w.ssthresh = max(w.ssthresh, w.cwnd)
	w.cwnd = max(w.cwnd/2, w.floor())
	w.cwndAcc = 0
}

// srFastMaxTries bounds the fast retransmissions without progress under
// selective repeat (go-back-N: fastMaxTries); each doubles the timeout, and
// none is armed past the local ACK timeout.
const srFastMaxTries = 8

// keepFast keeps the window's fast retransmission timer running while
// requests are outstanding (after progress, and after it fired, backed off
// by fastTries up to srFastMaxTries): with selective repeat a lost resend
// may have nothing after it that a SACK could show arrived, and resends do
// not arm the timer themselves (sr_req.go). Without selective repeat it
// does nothing.
func (b *srBoard) keepFast(w *sendWindow, now int64) {
	if b.on && w.srtt != 0 && w.outstanding() && w.fastTries < srFastMaxTries {
		if rto := w.rto(); w.timeout == 0 || rto < w.timeout {
			w.fastDeadline = now + rto
		}
	}
}

// sackNews responds to a SACK at now that showed new PSNs held: the
// responder is receiving, so the local ACK timer starts again (it is
// IBA's detector of a silent peer, and a path at 5 % loss may keep the
// oldest PSN unacknowledged for longer than it while everything else
// arrives) and the fast timer goes back to its first timeout.
func (b *srBoard) sackNews(w *sendWindow, now int64) {
	w.fastTries = 0
	w.armTimer(now)
	w.fastDeadline = 0
	b.keepFast(w, now)
}

// ambig is when an arrival of a resent PSN may still be the earlier copy's
// (arrived): within max(minRTT, srtt/2) of the resend, that copy younger
// than the go-back-N fast timeout's 2·srtt + 4·rttvar (before backoff).
func (w *sendWindow) ambig() ambiguity {
	return ambiguity{resend: max(w.minRTT, w.srtt/2), prior: max(2*w.srtt+4*w.rttvar, fastMinRTO)}
}

// sackRTT takes the window's RTT sample when a SACK at now shows its packet
// arrived: with selective repeat a packet past a hole is answered by SACKs
// until the hole is filled, and a sample taken only when unacked passes it
// would add the repair time to the round trip (and push the fast timer's
// timeout past the local ACK timeout, where it is not armed at all).
func (b *srBoard) sackRTT(w *sendWindow, now int64) {
	if b.on && w.sampling && bit(b.sacked, w.sampPSN) && !wire.PSNBefore(w.sampPSN, w.una) {
		w.rttSample(now - w.sampAt)
		w.sampling = false
	}
}
