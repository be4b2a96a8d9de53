package qp

import (
	"encoding/binary"

	"github.com/xdproce/xdproce/roce/wire"
)

// Selective repeat, the responder's half (docs/sr-wire.md): on an RC queue
// pair that negotiated it (Attr.SelectiveRepeat), a request that arrives
// past a hole, up to srSlots PSNs past the expected one, is copied into a
// slot of the QP's hold buffer instead of being NAKed and dropped. When the
// hole is filled the held requests run through the pipeline in PSN order,
// so data lands, receive WQEs are consumed and completions appear exactly
// as if the packets had come in order. While anything is held, every ACK
// the responder sends is an SR_SACK: its BTH PSN is the first missing PSN
// (everything before it is acknowledged) and its payload, a bitmap of 32
// bytes per 256 PSNs up to the highest held, says which PSNs past it are
// held.
//
// Holding, not placing: a held WRITE packet's bytes reach memory when the
// hole before it is filled (one copy into the slot, one out), which keeps
// every check of the pipeline (rkey, lengths, receive WQEs, opcode order)
// where it is.

// srSlots is how many PSNs past the expected one are held at most (and how
// far the longest SACK bitmap reaches); srMask indexes a slot by PSN;
// srWords is the length of a bitmap over the slots. srLegacyWindow is the
// window of a peer that did not say how much it holds (Attr.SRWindow 0):
// the first SR_SACK format, a 32-byte bitmap.
const (
	srSlots        = wire.SACKMaxLen * 8
	srMask         = srSlots - 1
	srWords        = srSlots / 64
	srLegacyWindow = wire.SACKLen * 8
)

// SRHold is how many PSNs past a hole this responder holds: what this side
// tells a peer for its Attr.SRWindow.
const SRHold = srSlots

// srSlot is one held request: its headers and its payload's bytes (a
// buffer of the path MTU).
type srSlot struct {
	p   wire.Packet // Payload in buf
	buf []byte
}

// srHold is the responder's hold buffer. Slots are allocated as they are
// first needed and go back to a free list when their request runs, so the
// buffer grows to the most requests ever held at once (at most srSlots, the
// requester's window, × the path MTU) and allocates nothing once there; a
// queue pair that never held a request has none.
type srHold struct {
	on   bool
	n    int              // slots in use
	top  uint32           // the highest PSN held (while n > 0)
	held *[srWords]uint64 // by PSN & srMask; nil until the first request held
	slot []*srSlot        // by PSN & srMask
	free []*srSlot        // slots not in use
}

// enable turns selective repeat on or off.
func (h *srHold) enable(on bool) {
	h.on = on
	h.reset()
}

// reset forgets everything held (the slots stay, on the free list).
func (h *srHold) reset() {
	for i, s := range h.slot {
		if s != nil {
			h.free = append(h.free, s)
			h.slot[i] = nil
		}
	}
	h.n = 0
	if h.held != nil {
		clear(h.held[:])
	}
}

func (h *srHold) has(psn uint32) bool {
	if h.held == nil {
		return false
	}
	i := psn & srMask
	return h.held[i/64]&(1<<(i%64)) != 0
}

// put copies the request p into the slot for its PSN (not held yet); a
// new slot's buffer takes mtu bytes.
func (h *srHold) put(p *wire.Packet, mtu int) {
	if h.held == nil {
		h.held = new([srWords]uint64)
		h.slot = make([]*srSlot, srSlots)
	}
	var s *srSlot
	if k := len(h.free); k > 0 {
		s, h.free = h.free[k-1], h.free[:k-1]
	} else {
		s = new(srSlot)
	}
	if len(s.buf) < len(p.Payload) {
		s.buf = make([]byte, max(mtu, len(p.Payload)))
	}
	psn := p.BTH.PSN
	i := psn & srMask
	s.p = *p
	s.p.IPOptions = nil
	s.p.Payload = s.buf[:copy(s.buf, p.Payload)]
	h.slot[i] = s
	h.held[i/64] |= 1 << (i % 64)
	if h.n == 0 || wire.PSNBefore(h.top, psn) {
		h.top = psn
	}
	h.n++
}

// take removes the request held for psn; its slot stays valid until the
// next put (release hands it back).
func (h *srHold) take(psn uint32) *srSlot {
	i := psn & srMask
	h.held[i/64] &^= 1 << (i % 64)
	h.n--
	s := h.slot[i]
	h.slot[i] = nil
	return s
}

// release puts a slot taken back on the free list.
func (h *srHold) release(s *srSlot) { h.free = append(h.free, s) }

// purge drops what is held for PSNs from..to-1 (a READ request at the hole
// covered them: a confused requester).
func (h *srHold) purge(from, to uint32) {
	for psn := from; h.n > 0 && wire.PSNBefore(psn, to); psn = wire.PSNAdd(psn, 1) {
		if h.has(psn) {
			h.release(h.take(psn))
		}
	}
}

// word returns the 64 hold bits from slot index i on (wrapping).
func (h *srHold) word(i uint32) uint64 {
	i &= srMask
	w, s := i/64, i%64
	v := h.held[w] >> s
	if s != 0 {
		v |= h.held[(w+1)%srWords] << (64 - s)
	}
	return v
}

// srHoldPacket holds the request p, d PSNs past the expected one, and asks
// for a SACK. Beyond the hold buffer it is dropped (the requester's window
// never sends that far).
func (q *QP) srHoldPacket(p *wire.Packet, d int32) {
	h := &q.resp.sr
	if d > srSlots {
		q.stats.inc(CtrDropped)
		return
	}
	psn := p.BTH.PSN
	if h.has(psn) {
		q.stats.inc(CtrDuplicates)
	} else {
		h.put(p, int(q.e.pmtu))
		q.stats.inc(CtrSROutOfSequence)
	}
	q.queueAck(wire.ACKSyndrome(wire.UnlimitedCredits), wire.PSNAdd(q.resp.epsn, wire.PSNMask))
}

// srDrain runs the held requests that follow the expected PSN, in order, and
// acknowledges what they completed.
func (q *QP) srDrain() {
	r := &q.resp
	h := &r.sr
	moved, lastRead := false, false
	for h.n > 0 && h.has(r.epsn) && (q.e.state == RTR || q.e.state == RTS) && !r.tooMany {
		psn := r.epsn
		s := h.take(psn)
		x := &s.p
		info, ok := x.BTH.Opcode.Info()
		if !ok || x.BTH.PSN != psn {
			h.release(s)
			continue
		}
		q.respondOne(x, &info)
		h.release(s) // nothing was held meanwhile: respondOne ran the expected PSN
		if r.epsn == psn {
			break // not consumed (RNR NAK, an error): the requester resends it
		}
		if d := wire.PSNDiff(r.epsn, psn); d > 1 {
			h.purge(wire.PSNAdd(psn, 1), r.epsn)
		}
		moved = true
		lastRead = info.Kind == wire.KindReadRequest || info.Kind == wire.KindCompareSwap || info.Kind == wire.KindFetchAdd
	}
	// The requests drained may not have asked for an ACK: acknowledge the
	// filled hole (a READ's or atomic's responses acknowledge it instead).
	if moved && !lastRead && (q.e.state == RTR || q.e.state == RTS) && !(r.ack.want && r.ack.syndrome>>5 != 0) {
		q.queueAck(wire.ACKSyndrome(wire.UnlimitedCredits), wire.PSNAdd(r.epsn, wire.PSNMask))
	}
}

// srSack turns the ACK being built in q.e.pkt into an SR_SACK: the first
// missing PSN and the bitmap of what is held past it, written after the
// headers in buf. It returns the payload length.
func (q *QP) srSack(buf []byte) int {
	r := &q.resp
	p := &q.e.pkt
	p.BTH.Opcode = wire.SRSack
	p.BTH.PSN = r.epsn
	q.stats.inc(CtrSACKsSent)
	return r.sr.bitmap(buf[p.HeaderLen():], r.epsn)
}

// bitmap writes the SACK bitmap of what is held past the first missing PSN
// epsn into b, as long as the highest PSN held needs (32 bytes per 256
// PSNs), and returns its length.
func (h *srHold) bitmap(b []byte, epsn uint32) int {
	n := wire.SACKLen
	if d := wire.PSNDiff(h.top, epsn); h.n > 0 && d > 0 {
		n = min((int(d)-1)/(wire.SACKLen*8)+1, wire.SACKMaxLen/wire.SACKLen) * wire.SACKLen
	}
	first := wire.PSNAdd(epsn, 1)
	for k := 0; k < n; k += 8 {
		v := uint64(0)
		if h.held != nil {
			v = h.word(first + uint32(k*8))
		}
		binary.LittleEndian.PutUint64(b[k:], v)
	}
	return n
}
