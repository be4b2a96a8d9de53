package wire

import "encoding/binary"

// PeekDestQPN reads the destination QPN of a RoCEv2 frame from its BTH
// without decoding or checking anything else (no lengths beyond what it
// reads, no checksums, no ICRC): enough to choose who decodes the frame.
// ok is false when the frame is not Ethernet (optionally one VLAN tag),
// IPv4 or IPv6, UDP to port 4791 with a BTH's worth of bytes; Decode then
// says what is wrong with it.
func PeekDestQPN(frame []byte) (qpn uint32, ok bool) {
	if len(frame) < ethLen {
		return 0, false
	}
	et := binary.BigEndian.Uint16(frame[12:])
	b := frame[ethLen:]
	if et == etherTypeVLAN {
		if len(b) < vlanLen {
			return 0, false
		}
		et = binary.BigEndian.Uint16(b[2:])
		b = b[vlanLen:]
	}
	switch et {
	case etherTypeIPv4:
		if len(b) < ipv4Len || b[9] != protoUDP {
			return 0, false
		}
		ihl := int(b[0]&0xF) * 4
		if ihl < ipv4Len || ihl > len(b) {
			return 0, false
		}
		b = b[ihl:]
	case etherTypeIPv6:
		if len(b) < ipv6Len || b[6] != protoUDP {
			return 0, false
		}
		b = b[ipv6Len:]
	default:
		return 0, false
	}
	if len(b) < udpLen+BTHLen || binary.BigEndian.Uint16(b[2:]) != UDPPort {
		return 0, false
	}
	t := b[udpLen:]
	return uint32(t[5])<<16 | uint32(t[6])<<8 | uint32(t[7]), true
}
