package wire

import "encoding/binary"

// XTP is one half of the OOO Third-Party header, xdproce's own
// (docs/ooo-wire.md), 24 bytes: a node taking part in a third-party
// operation. OOO_3P_READ_REQ carries two, the target (the data sink) then
// the controller (who gets the completion); OOO_3P_WRITE carries the
// controller only.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                                                               |
//	+                                                               +
//	|                       GID (128 bits)                          |
//	+                                                               +
//	|                                                               |
//	+                                                               +
//	|                                                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|   Reserved    |                 QPN (24 bits)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Context id (24 bits)               |  Context key  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type XTP struct {
	GID  [16]byte // RoCEv2 GID: the IPv6 address or ::ffff:a.b.c.d
	Resv uint8
	QPN  uint32 // 24 bits
	Ctx  Ctx
}

// XTPLen is the length of one XTP in bytes.
const XTPLen = 24

func (h *XTP) decode(b []byte) {
	_ = b[XTPLen-1]
	copy(h.GID[:], b)
	h.Resv = b[16]
	h.QPN = binary.BigEndian.Uint32(b[16:]) & PSNMask
	h.Ctx = Ctx(binary.BigEndian.Uint32(b[20:]))
}

func (h *XTP) encode(b []byte) {
	_ = b[XTPLen-1]
	copy(b, h.GID[:])
	binary.BigEndian.PutUint32(b[16:], h.QPN&PSNMask)
	b[16] = h.Resv
	binary.BigEndian.PutUint32(b[20:], uint32(h.Ctx))
}
