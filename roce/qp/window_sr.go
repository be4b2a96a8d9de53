package qp

import "github.com/xdproce/xdproce/roce/wire"

// srBoard is the send window's selective-repeat scoreboard
// (docs/sr-wire.md): which PSNs in flight the responder holds (from its
// SR_SACKs), which were resent, and up to where a PSN not held counts as
// lost. The completer feeds it (sack, lostAll on a timer); the requester
// asks it for the next PSN to resend (nextHole) and reports the resend
// (resent). PSNs index it modulo srSlots: the window never has more than
// srSlots PSNs in flight when it is on (enable caps it), so the PSNs from
// unacked on map to distinct bits; advance clears what it passes.
type srBoard struct {
	on     bool
	sacked [srSlots / 64]uint64 // the responder holds it (or it is not a request: READ responses)
	resent [srSlots / 64]uint64 // resent since last found missing
	// resentMax is the window's max when the PSN was resent (nil until the
	// first resend; valid where resent is set): a SACK of a
	// PSN at or past it shows the resend was lost too.
	resentMax *[srSlots]uint32
	high      uint32 // PSNs before this not SACKed are missing
	highSet   bool
	scan      uint32 // nextHole looks from here
}

// enable turns the scoreboard on or off for a window w that start has just
// opened; on caps the window at srSlots PSNs, the hold buffer of the
// responder. Selective repeat keeps the window when a SACK reports a hole:
// only the timers shrink it (and back off).
func (b *srBoard) enable(on bool, w *sendWindow) {
	*b = srBoard{on: on, resentMax: b.resentMax}
	if !on {
		return
	}
	w.limit = min(w.limit, srSlots)
	w.cwnd = min(w.cwnd, w.limit)
	w.ssthresh = min(w.ssthresh, w.limit)
}

func bit(a *[srSlots / 64]uint64, psn uint32) bool {
	i := psn & srMask
	return a[i/64]&(1<<(i%64)) != 0
}

func setBit(a *[srSlots / 64]uint64, psn uint32, v bool) {
	i := psn & srMask
	if v {
		a[i/64] |= 1 << (i % 64)
	} else {
		a[i/64] &^= 1 << (i % 64)
	}
}

// forget clears the PSNs from..to-1 (acknowledged: unacked moved past them).
func (b *srBoard) forget(from, to uint32) {
	if wire.PSNDiff(to, from) >= srSlots {
		clear(b.sacked[:])
		clear(b.resent[:])
		return
	}
	for psn := from; wire.PSNBefore(psn, to); psn = wire.PSNAdd(psn, 1) {
		setBit(&b.sacked, psn, false)
		setBit(&b.resent, psn, false)
	}
}

// sack records an SR_SACK: base is the first missing PSN, bm its bitmap
// (bit j: PSN base+1+j held); max is one past the highest PSN sent. PSNs
// never sent are ignored. The scan starts again at una.
func (b *srBoard) sack(base uint32, bm []byte, una, max uint32) {
	psn := wire.PSNAdd(base, 1)
	for j := 0; j < srSlots && j/8 < len(bm) && wire.PSNBefore(psn, max); j++ {
		if bm[j/8]&(1<<(j%8)) != 0 {
			setBit(&b.sacked, psn, true)
			if next := wire.PSNAdd(psn, 1); !b.highSet || wire.PSNBefore(b.high, next) {
				b.high, b.highSet = next, true
			}
		}
		psn = wire.PSNAdd(psn, 1)
	}
	b.scan = una
}

// lostAll presumes everything in flight and not held lost (a timer fired):
// every such PSN up to max is resent once more.
func (b *srBoard) lostAll(una, max uint32) {
	b.high, b.highSet = max, true
	clear(b.resent[:])
	b.scan = una
}

// nextHole returns the next PSN to resend: at or after una, before high,
// not held by the responder, and not resent already unless a SACK showed
// the resend lost too.
func (b *srBoard) nextHole(una uint32) (uint32, bool) {
	if !b.on || !b.highSet {
		return 0, false
	}
	psn := b.scan
	if wire.PSNBefore(psn, una) {
		psn = una
	}
	for ; wire.PSNBefore(psn, b.high); psn = wire.PSNAdd(psn, 1) {
		if bit(&b.sacked, psn) {
			continue
		}
		if !bit(&b.resent, psn) || wire.PSNBefore(b.resentMax[psn&srMask], b.high) {
			b.scan = psn
			return psn, true
		}
	}
	b.scan = psn
	return 0, false
}

// markResent notes that psn was resent while max was one past the highest PSN
// sent.
func (b *srBoard) markResent(psn, max uint32) {
	setBit(&b.resent, psn, true)
	if b.resentMax == nil {
		b.resentMax = new([srSlots]uint32)
	}
	b.resentMax[psn&srMask] = max
	b.scan = wire.PSNAdd(psn, 1)
}

// skip takes psn off the holes: it is not a request the responder holds (a
// READ response's PSN), or it cannot be rebuilt; the go-back-N paths and
// the timers recover it.
func (b *srBoard) skip(psn uint32) {
	setBit(&b.sacked, psn, true)
	b.scan = wire.PSNAdd(psn, 1)
}

// keepFast keeps the window's fast retransmission timer running while
// requests are outstanding (after progress, and after it fired, backed off
// by fastTries up to fastMaxTries): with selective repeat a lost resend
// may have nothing after it that a SACK could show arrived, and resends do
// not arm the timer themselves (sr_req.go). Without selective repeat it
// does nothing.
func (b *srBoard) keepFast(w *sendWindow, now int64) {
	if b.on && w.srtt != 0 && w.outstanding() && w.fastTries < fastMaxTries {
		if rto := w.rto(); w.timeout == 0 || rto < w.timeout {
			w.fastDeadline = now + rto
		}
	}
}

// sackRTT takes the window's RTT sample when a SACK at now shows its packet
// arrived: with selective repeat a packet past a hole is answered by SACKs
// until the hole is filled, and a sample taken only when unacked passes it
// would add the repair time to the round trip (and push the fast timer's
// timeout past the local ACK timeout, where it is not armed at all).
func (b *srBoard) sackRTT(w *sendWindow, now int64) {
	if b.on && w.sampling && bit(&b.sacked, w.sampPSN) && !wire.PSNBefore(w.sampPSN, w.una) {
		w.rttSample(now - w.sampAt)
		w.sampling = false
	}
}
