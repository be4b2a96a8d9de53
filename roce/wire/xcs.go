package wire

import "encoding/binary"

// XCS is the OOO Completion Status, xdproce's own (docs/ooo-wire.md), 4
// bytes, carried by OOO_COMPLETION after the XRH (whose context, tid, total
// and tag name the operation that completed):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    Status     |                   Reserved                    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type XCS struct {
	Status uint8  // XCSSuccess; other values are reserved
	Resv   uint32 // 24 bits, kept so re-encoding is byte-exact
}

// XCSLen is the length of the XCS in bytes.
const XCSLen = 4

// XCSSuccess is the status of a completion: every byte was placed. The
// transport sends no failure completions (a protection error means the tid
// never completes); the other values are reserved.
const XCSSuccess = 0

func (h *XCS) decode(b []byte) {
	_ = b[XCSLen-1]
	h.Status = b[0]
	h.Resv = binary.BigEndian.Uint32(b) & PSNMask
}

func (h *XCS) encode(b []byte) {
	_ = b[XCSLen-1]
	binary.BigEndian.PutUint32(b, h.Resv&PSNMask)
	b[0] = h.Status
}
