package qp

import (
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
// (everything before it is acknowledged) and its 32-byte payload says which
// of the next srSlots PSNs are held.
//
// Holding, not placing: a held WRITE packet's bytes reach memory when the
// hole before it is filled (one copy into the slot, one out), which keeps
// every check of the pipeline (rkey, lengths, receive WQEs, opcode order)
// where it is.

// srSlots is how many PSNs past the expected one are held (and how far the
// SACK bitmap reaches); srMask indexes a slot by PSN.
const (
	srSlots = wire.SACKLen * 8
	srMask  = srSlots - 1
)

// srHold is the responder's hold buffer.
type srHold struct {
	on   bool
	n    int                  // slots in use
	held [srSlots / 64]uint64 // by PSN & srMask
	pkts []wire.Packet        // the held requests (Payload in bufs)
	bufs []byte               // srSlots × wire.MaxPayload
}

// enable turns selective repeat on or off.
func (h *srHold) enable(on bool) {
	h.on = on
	h.reset()
}

// alloc allocates the buffer (srSlots × 4 KiB), once, for the first request
// held: a queue pair whose packets all come in order never pays for it.
func (h *srHold) alloc() {
	if h.pkts == nil {
		h.pkts = make([]wire.Packet, srSlots)
		h.bufs = make([]byte, srSlots*wire.MaxPayload)
	}
}

// reset forgets everything held (the buffer stays).
func (h *srHold) reset() {
	h.n = 0
	clear(h.held[:])
}

func (h *srHold) has(psn uint32) bool {
	i := psn & srMask
	return h.held[i/64]&(1<<(i%64)) != 0
}

func (h *srHold) take(psn uint32) *wire.Packet {
	i := psn & srMask
	h.held[i/64] &^= 1 << (i % 64)
	h.n--
	return &h.pkts[i]
}

// purge drops what is held for PSNs from..to-1 (a READ request at the hole
// covered them: a confused requester).
func (h *srHold) purge(from, to uint32) {
	for psn := from; h.n > 0 && wire.PSNBefore(psn, to); psn = wire.PSNAdd(psn, 1) {
		if h.has(psn) {
			h.take(psn)
		}
	}
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
		h.alloc()
		i := psn & srMask
		x := &h.pkts[i]
		*x = *p
		x.IPOptions = nil
		b := h.bufs[int(i)*wire.MaxPayload : (int(i)+1)*wire.MaxPayload]
		x.Payload = b[:copy(b, p.Payload)]
		h.held[i/64] |= 1 << (i % 64)
		h.n++
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
		x := h.take(psn)
		info, ok := x.BTH.Opcode.Info()
		if !ok || x.BTH.PSN != psn {
			continue
		}
		q.respondOne(x, &info)
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
	b := buf[p.HeaderLen() : p.HeaderLen()+wire.SACKLen]
	clear(b)
	psn := wire.PSNAdd(r.epsn, 1)
	for j := range srSlots {
		if r.sr.has(psn) {
			b[j/8] |= 1 << (j % 8)
		}
		psn = wire.PSNAdd(psn, 1)
	}
	q.stats.inc(CtrSACKsSent)
	return wire.SACKLen
}
