package wire

import "encoding/binary"

// XRR is the OOO READ Return header, xdproce's own (docs/ooo-wire.md), 12
// bytes, carried by OOO_READ_REQ and OOO_3P_READ_REQ after the XRH: where
// the data source sends the response (as OOO_WRITE packets, or
// OOO_3P_WRITE to the third-party target), the sink's buffer address and
// rkey. The source VA, its rkey and the total length are in the RETH.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Sink Virtual Address (63..32)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Sink Virtual Address (31..0)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                          Sink R_Key                           |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type XRR struct {
	VA   uint64 // where the first byte of the response goes
	RKey uint32 // the sink's rkey for it
}

// XRRLen is the length of the XRR in bytes.
const XRRLen = 12

func (h *XRR) decode(b []byte) {
	_ = b[XRRLen-1]
	h.VA = binary.BigEndian.Uint64(b)
	h.RKey = binary.BigEndian.Uint32(b[8:])
}

func (h *XRR) encode(b []byte) {
	_ = b[XRRLen-1]
	binary.BigEndian.PutUint64(b, h.VA)
	binary.BigEndian.PutUint32(b[8:], h.RKey)
}
