package daemon

import "encoding/binary"

// Offsets and constants of the frames the daemon steers: Ethernet, IPv4 or
// IPv6, UDP to the RoCEv2 port, BTH (and DETH for UD).
const (
	ethLen      = 14
	udpLen      = 8
	bthLen      = 12
	dethLen     = 8
	rocePort    = 4791
	qp1         = 1
	mcastQPN    = 0xFFFFFF
	qpnMask     = 0xFFFFFF
	opUDSend    = 0x64 // UD SEND only
	opUDSendImm = 0x65 // UD SEND only with immediate
	// snapLen covers the longest header the daemon reads: Ethernet, IPv4
	// with options, UDP, BTH, DETH.
	snapLen = ethLen + 60 + udpLen + bthLen + dethLen
)

// header is what steering needs from a frame.
type header struct {
	src, dst [16]byte // IPv4 as IPv4-mapped IPv6
	dqpn     uint32   // BTH destination QPN
	op       uint8    // BTH opcode
	ud       bool     // UD opcode: sqpn is DETH's source QPN
	sqpn     uint32
	bth      int // offset of the BTH
}

// parse reads a RoCEv2 frame's header from b, which the caller owns (a
// private snapshot for frames from clients). It returns false for anything
// that is not a well-formed UDP/4791 frame over IPv4 or IPv6.
func parse(b []byte, h *header) bool {
	if len(b) < ethLen {
		return false
	}
	var l4 int
	switch binary.BigEndian.Uint16(b[12:14]) {
	case 0x0800:
		if len(b) < ethLen+20 || b[ethLen]>>4 != 4 {
			return false
		}
		ihl := int(b[ethLen]&0x0F) * 4
		if ihl < 20 || b[ethLen+9] != 17 {
			return false
		}
		h.src, h.dst = [16]byte{10: 0xff, 11: 0xff}, [16]byte{10: 0xff, 11: 0xff}
		if len(b) < ethLen+ihl {
			return false
		}
		copy(h.src[12:], b[ethLen+12:ethLen+16])
		copy(h.dst[12:], b[ethLen+16:ethLen+20])
		l4 = ethLen + ihl
	case 0x86DD:
		if len(b) < ethLen+40 || b[ethLen]>>4 != 6 || b[ethLen+6] != 17 {
			return false
		}
		copy(h.src[:], b[ethLen+8:ethLen+24])
		copy(h.dst[:], b[ethLen+24:ethLen+40])
		l4 = ethLen + 40
	default:
		return false
	}
	if len(b) < l4+udpLen+bthLen || binary.BigEndian.Uint16(b[l4+2:l4+4]) != rocePort {
		return false
	}
	bth := l4 + udpLen
	h.bth = bth
	op := b[bth]
	h.op = op
	h.dqpn = binary.BigEndian.Uint32(b[bth+4:bth+8]) & qpnMask
	h.ud = op == opUDSend || op == opUDSendImm
	h.sqpn = 0
	if h.ud {
		if len(b) < bth+bthLen+dethLen {
			return false
		}
		h.sqpn = binary.BigEndian.Uint32(b[bth+bthLen+4:bth+bthLen+8]) & qpnMask
	}
	return true
}
