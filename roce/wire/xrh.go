package wire

import "encoding/binary"

// XRH is the OOO Request Header, xdproce's own (docs/ooo-wire.md), 24
// bytes, carried by every OOO packet right after the RETH (or the BTH, for
// OOO_COMPLETION):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Context id (24 bits)               |  Context key  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                     Transaction id (tid)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Total length of the operation                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|       Initiator context id (24 bits)          | Initiator key |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R R R R|S|R|Who|   Segment     |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                              Tag                              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Context is the receiver's context (id and key, the key being the
// generation a recovery bumps); the initiator context is where completions
// and READ response data go. Who (byte 16, bits 1..0) says who gets a
// completion, S (bit 3) asks for one to self (conditional operations); R
// bits are reserved. Segment is the path MTU enum of the operation's
// segment size: packet i of an operation (BTH.PSN = i) carries the bytes at
// offset i × segment. Every packet carries every field, because any packet
// of an operation may be the first or the last to arrive.
type XRH struct {
	Ctx       Ctx    // the receiver's context
	TID       uint32 // transaction id: larger is newer
	Total     uint32 // bytes in the whole operation
	Initiator Ctx    // the initiator's context: completions and READ responses go there
	Notify    Notify // byte 16, reserved bits kept so re-encoding is byte-exact
	Seg       MTU    // segment size of data packets (READ requests: of the response); 0 in completions
	Resv      uint16 // bytes 18..19
	Tag       uint32 // the initiator's tag, echoed in the completion
}

// XRHLen is the length of the XRH in bytes.
const XRHLen = 24

func (h *XRH) decode(b []byte) {
	_ = b[XRHLen-1]
	h.Ctx = Ctx(binary.BigEndian.Uint32(b))
	h.TID = binary.BigEndian.Uint32(b[4:])
	h.Total = binary.BigEndian.Uint32(b[8:])
	h.Initiator = Ctx(binary.BigEndian.Uint32(b[12:]))
	h.Notify = Notify(b[16])
	h.Seg = MTU(b[17])
	h.Resv = binary.BigEndian.Uint16(b[18:])
	h.Tag = binary.BigEndian.Uint32(b[20:])
}

func (h *XRH) encode(b []byte) {
	_ = b[XRHLen-1]
	binary.BigEndian.PutUint32(b, uint32(h.Ctx))
	binary.BigEndian.PutUint32(b[4:], h.TID)
	binary.BigEndian.PutUint32(b[8:], h.Total)
	binary.BigEndian.PutUint32(b[12:], uint32(h.Initiator))
	b[16] = byte(h.Notify)
	b[17] = byte(h.Seg)
	binary.BigEndian.PutUint16(b[18:], h.Resv)
	binary.BigEndian.PutUint32(b[20:], h.Tag)
}

// Offset returns the offset in the operation of the data packet with index
// idx (BTH.PSN): idx × the segment size. It is 0 when Seg is not a valid MTU.
func (h *XRH) Offset(idx uint32) uint64 { return uint64(idx) * uint64(h.Seg.Bytes()) }

// Packets returns the number of data packets of the operation: Total
// divided by the segment size, rounded up, and 1 for an empty operation
// (one packet with no payload). It is 0 when Seg is not a valid MTU.
func (h *XRH) Packets() uint32 {
	s := uint64(h.Seg.Bytes())
	if s == 0 {
		return 0
	}
	if h.Total == 0 {
		return 1
	}
	return uint32((uint64(h.Total) + s - 1) / s)
}
