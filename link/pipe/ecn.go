package pipe

import "encoding/binary"

// markCE sets the ECN bits of an ECN-capable (ECT(0) or ECT(1)) IPv4 or
// IPv6 frame (Ethernet, one optional 802.1Q/802.1ad tag) to CE, as a
// congested switch does, updating the IPv4 header checksum. It reports
// whether it marked the frame; others (not IP, not ECN-capable, already CE)
// are left as they are.
func markCE(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	if (et == 0x8100 || et == 0x88a8) && len(f) >= 18 {
		off, et = 18, binary.BigEndian.Uint16(f[16:])
	}
	ip := f[off:]
	switch {
	case et == 0x0800 && len(ip) >= 20 && ip[0]>>4 == 4:
		if e := ip[1] & 3; e == 0 || e == 3 {
			return false
		}
		ihl := int(ip[0]&0x0f) * 4
		if ihl < 20 || ihl > len(ip) {
			return false
		}
		ip[1] |= 3
		ip[10], ip[11] = 0, 0
		var sum uint32
		for i := 0; i < ihl; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return true
	case et == 0x86dd && len(ip) >= 40 && ip[0]>>4 == 6:
		if e := ip[1] >> 4 & 3; e == 0 || e == 3 {
			return false
		}
		ip[1] |= 0x30
		return true
	}
	return false
}
