package wire

import (
	"encoding/binary"
	"hash/crc32"
)

// The invariant CRC (IBA Vol 1, 7.8.1; RoCEv2 annex A17): CRC-32 (IEEE
// 802.3) over 8 bytes of 0xFF, the IP header, the UDP header, the BTH, the
// extension headers, the payload and the pad, with the variant fields
// replaced by ones: IPv4 TOS, TTL and header checksum; IPv6 traffic class,
// flow label and hop limit; the UDP checksum; BTH byte 4 (FECN, BECN,
// reserved). It follows the pad, little-endian.
//
// With IPv4 options the CRC covers the whole IPv4 header, options included
// (unmasked). Linux rxe would hash a fixed 20-byte IPv4 header instead; it
// never sends options, so this only matters for foreign senders.
//
// The headers (at most 88 bytes) are masked in a stack copy and hashed with
// a slicing-by-8 table in this package (hash/crc32 calls through a function
// variable, so a stack buffer handed to it would escape and allocate); the
// payload goes to crc32.Update, which uses PCLMULQDQ on amd64.

var crcTab [8][256]uint32

func init() {
	for i := range 256 {
		c := uint32(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ crc32.IEEE
			} else {
				c >>= 1
			}
		}
		crcTab[0][i] = c
	}
	for i := range 256 {
		c := crcTab[0][i]
		for t := 1; t < 8; t++ {
			c = crcTab[0][c&0xFF] ^ c>>8
			crcTab[t][i] = c
		}
	}
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p) without the indirect
// call, for short inputs.
func crcUpdate(crc uint32, p []byte) uint32 {
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = crcTab[7][crc&0xFF] ^ crcTab[6][crc>>8&0xFF] ^ crcTab[5][crc>>16&0xFF] ^ crcTab[4][crc>>24] ^
			crcTab[3][p[4]] ^ crcTab[2][p[5]] ^ crcTab[1][p[6]] ^ crcTab[0][p[7]]
		p = p[8:]
	}
	for _, b := range p {
		crc = crcTab[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// icrc computes the ICRC of a packet whose IP header is ip (20..60 bytes for
// IPv4, 40 for IPv6) and whose UDP datagram is l4 (UDP header through ICRC,
// at least 8+12+4 bytes). The last 4 bytes of l4 are not hashed.
func icrc(ip []byte, v6 bool, l4 []byte) uint32 {
	var h [8 + 60 + 8 + BTHLen]byte
	for i := range 8 {
		h[i] = 0xFF
	}
	n := 8 + copy(h[8:8+60], ip)
	if v6 {
		h[8] |= 0x0F // traffic class (high nibble) ...
		h[9] = 0xFF  // ... traffic class (low nibble) and flow label
		h[10] = 0xFF
		h[11] = 0xFF
		h[8+7] = 0xFF // hop limit
	} else {
		h[8+1] = 0xFF // TOS
		h[8+8] = 0xFF // TTL
		h[8+10] = 0xFF
		h[8+11] = 0xFF // header checksum
	}
	u := h[n : n+8+BTHLen]
	copy(u, l4[:8+BTHLen])
	u[6], u[7] = 0xFF, 0xFF // UDP checksum
	u[8+4] = 0xFF           // BTH FECN, BECN, reserved
	crc := crcUpdate(0, h[:n+8+BTHLen])
	rest := l4[8+BTHLen : len(l4)-ICRCLen]
	if len(rest) >= 64 {
		return crc32.Update(crc, crc32.IEEETable, rest)
	}
	return crcUpdate(crc, rest)
}

// ComputeICRC returns the ICRC a frame should carry. frame is a whole
// Ethernet frame (optionally 802.1Q-tagged) carrying IPv4 or IPv6 and UDP;
// the IP length field says where the packet ends (its last 4 bytes are the
// ICRC slot, which is not hashed) and Ethernet padding after it is ignored.
// It checks only what it needs to find the headers: errors wrap ErrTruncated,
// ErrBadLength or ErrNotRoCE. It does not allocate.
func ComputeICRC(frame []byte) (uint32, error) {
	ip, v6, l4, err := locate(frame)
	if err != nil {
		return 0, err
	}
	return icrc(ip, v6, l4), nil
}

// VerifyICRC decodes nothing but the framing and reports whether the ICRC
// stored in frame is right: nil, an error wrapping ErrBadICRC, or a framing
// error as ComputeICRC. It is the ICRC check for frames decoded through the
// gopacket layers (pass packet.Data()), since a BTH layer cannot see the IP
// header.
func VerifyICRC(frame []byte) error {
	ip, v6, l4, err := locate(frame)
	if err != nil {
		return err
	}
	if icrc(ip, v6, l4) != binary.LittleEndian.Uint32(l4[len(l4)-ICRCLen:]) {
		return errICRC
	}
	return nil
}

// SetICRC computes the ICRC of frame and stores it in its slot (the last 4
// bytes of the IP packet). Use it after serialising with gopacket, whose
// layers cannot compute it (see BTHLayer.SerializeTo).
func SetICRC(frame []byte) error {
	ip, v6, l4, err := locate(frame)
	if err != nil {
		return err
	}
	binary.LittleEndian.PutUint32(l4[len(l4)-ICRCLen:], icrc(ip, v6, l4))
	return nil
}

// locate finds the IP header and the UDP datagram of a frame, checking
// lengths only.
func locate(frame []byte) (ip []byte, v6 bool, l4 []byte, err error) {
	if len(frame) < ethLen {
		return nil, false, nil, errEthShort
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := ethLen
	if et == etherTypeVLAN {
		if len(frame) < ethLen+vlanLen {
			return nil, false, nil, errEthShort
		}
		et = binary.BigEndian.Uint16(frame[16:])
		off += vlanLen
	}
	b := frame[off:]
	switch et {
	case etherTypeIPv4:
		if len(b) < ipv4Len {
			return nil, false, nil, errIPv4Short
		}
		ihl := int(b[0]&0xF) * 4
		if ihl < ipv4Len {
			return nil, false, nil, errIPv4IHL
		}
		total := int(binary.BigEndian.Uint16(b[2:]))
		if total > len(b) {
			return nil, false, nil, errIPv4TotalLong
		}
		if total < ihl+udpLen+BTHLen+ICRCLen {
			return nil, false, nil, errIPv4TotalShort
		}
		return b[:ihl], false, b[ihl:total], nil
	case etherTypeIPv6:
		if len(b) < ipv6Len {
			return nil, false, nil, errIPv6Short
		}
		total := ipv6Len + int(binary.BigEndian.Uint16(b[4:]))
		if total > len(b) {
			return nil, false, nil, errIPv6PayloadLong
		}
		if total < ipv6Len+udpLen+BTHLen+ICRCLen {
			return nil, false, nil, errUDPShort
		}
		return b[:ipv6Len], true, b[ipv6Len:total], nil
	}
	return nil, false, nil, errEthType
}
