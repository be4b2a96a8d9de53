package wire

import "encoding/binary"

// BTH is the Base Transport Header (IBA Vol 1, 9.2), 12 bytes, big-endian:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |        Partition Key          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|   Resv6   |          Destination QP (24 bits)             |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|    Resv7    |       Packet Sequence Number (24 bits)        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// S solicited event, M migration request, Pad pad count, F FECN and B BECN
// (RoCEv2 annex A17; the ICRC covers byte 4 as all ones), A acknowledge request.
type BTH struct {
	Opcode     Opcode
	SE, MigReq bool
	PadCount   uint8 // 0..3
	TVer       uint8
	PKey       uint16
	FECN, BECN bool
	Resv6      uint8  // low 6 bits of byte 4, kept so re-encoding is byte-exact
	DestQPN    uint32 // 24 bits
	AckReq     bool
	Resv7      uint8  // low 7 bits of byte 8
	PSN        uint32 // 24 bits
}

// Header lengths in bytes.
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	DETHLen         = 8
	ImmDtLen        = 4
	IETHLen         = 4
	ICRCLen         = 4
)

// DefaultPKey is the default partition key, the one RoCEv2 uses.
const DefaultPKey = 0xFFFF

// decode reads b[:BTHLen]; the caller checks the length.
func (h *BTH) decode(b []byte) {
	_ = b[BTHLen-1]
	h.Opcode = Opcode(b[0])
	h.SE = b[1]&0x80 != 0
	h.MigReq = b[1]&0x40 != 0
	h.PadCount = b[1] >> 4 & 3
	h.TVer = b[1] & 0x0F
	h.PKey = binary.BigEndian.Uint16(b[2:])
	h.FECN = b[4]&0x80 != 0
	h.BECN = b[4]&0x40 != 0
	h.Resv6 = b[4] & 0x3F
	h.DestQPN = binary.BigEndian.Uint32(b[4:]) & PSNMask
	h.AckReq = b[8]&0x80 != 0
	h.Resv7 = b[8] & 0x7F
	h.PSN = binary.BigEndian.Uint32(b[8:]) & PSNMask
}

// valid reports whether the fields fit their bit widths.
func (h *BTH) valid() bool {
	return h.PadCount <= 3 && h.TVer <= 0xF && h.Resv6 <= 0x3F && h.Resv7 <= 0x7F &&
		h.DestQPN <= PSNMask && h.PSN <= PSNMask
}

// encode writes b[:BTHLen]; the caller checks the length and valid.
func (h *BTH) encode(b []byte) {
	_ = b[BTHLen-1]
	b[0] = byte(h.Opcode)
	b[1] = bit(h.SE, 0x80) | bit(h.MigReq, 0x40) | h.PadCount&3<<4 | h.TVer&0x0F
	binary.BigEndian.PutUint16(b[2:], h.PKey)
	binary.BigEndian.PutUint32(b[4:], h.DestQPN&PSNMask)
	b[4] = bit(h.FECN, 0x80) | bit(h.BECN, 0x40) | h.Resv6&0x3F
	binary.BigEndian.PutUint32(b[8:], h.PSN&PSNMask)
	b[8] = bit(h.AckReq, 0x80) | h.Resv7&0x7F
}

func bit(v bool, m byte) byte {
	if v {
		return m
	}
	return 0
}
