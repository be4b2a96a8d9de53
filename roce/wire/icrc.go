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
// Two ways to compute it. Where the frame may be written (Encode, SetICRC,
// DecodeWritable), icrcInPlace masks the variant fields in the frame itself,
// overwriting the 8 bytes before the IP header (part of the Ethernet header)
// with the leading ones, hashes the whole span in one crcBulk (hash/crc32,
// or four-way AVX-512 folding: crc_amd64.go) and puts the saved bytes back.
// Where it may not (Decode, ComputeICRC, VerifyICRC), icrc masks the headers
// (at most 88 bytes) in a stack copy and hashes them with a slicing-by-8
// table in this package (hash/crc32 calls through a function variable, so a
// stack buffer handed to it would escape and allocate), then the payload
// with crcBulk.

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
		return crcBulk(crc, rest)
	}
	return crcUpdate(crc, rest)
}

// Masks of the variant fields, for little-endian 8-byte loads at the IP header
// and at byte 6 of the UDP header, and a 4-byte load at byte 8 of the IPv4
// header.
const (
	maskIPv6    = 0x0F | 0xFF<<8 | 0xFF<<16 | 0xFF<<24 | 0xFF<<56 // traffic class, flow label; hop limit
	maskIPv4    = 0xFF << 8                                       // TOS
	maskIPv4TTL = 0xFF | 0xFF<<16 | 0xFF<<24                      // TTL; header checksum
	maskUDP     = 0xFFFF | 0xFF<<48                               // UDP checksum; BTH byte 4
)

// icrcInPlace computes the ICRC of the packet in b, which runs from 8 bytes
// before the IP header (ipLen bytes: 20..60 for IPv4, 40 for IPv6) to the
// ICRC slot, exclusive: exactly the bytes hashed. It overwrites the first 8
// bytes and the variant fields with ones, hashes b and restores them, so b
// ends byte-identical; nothing else may read or write b meanwhile. The caller
// guarantees len(b) >= 8+ipLen+8+BTHLen.
func icrcInPlace(b []byte, ipLen int, v6 bool) uint32 {
	u := b[8+ipLen+6:]
	_ = u[7]
	_ = b[19]
	pre := binary.LittleEndian.Uint64(b)
	ip0 := binary.LittleEndian.Uint64(b[8:])
	ip1 := binary.LittleEndian.Uint32(b[16:])
	udp := binary.LittleEndian.Uint64(u)
	binary.LittleEndian.PutUint64(b, ^uint64(0))
	if v6 {
		binary.LittleEndian.PutUint64(b[8:], ip0|maskIPv6)
	} else {
		binary.LittleEndian.PutUint64(b[8:], ip0|maskIPv4)
		binary.LittleEndian.PutUint32(b[16:], ip1|maskIPv4TTL)
	}
	binary.LittleEndian.PutUint64(u, udp|maskUDP)
	// One pass: crcBulk (carry-less folding over the 16-byte blocks, a
	// table for the rest). Below 64 bytes (an ACK hashes 52) crcUpdate was
	// measured no faster, despite hash/crc32's indirect calls.
	crc := crcBulk(0, b)
	binary.LittleEndian.PutUint64(u, udp)
	binary.LittleEndian.PutUint32(b[16:], ip1)
	binary.LittleEndian.PutUint64(b[8:], ip0)
	binary.LittleEndian.PutUint64(b, pre)
	return crc
}

// ComputeICRC returns the ICRC a frame should carry. frame is a whole
// Ethernet frame (optionally 802.1Q-tagged) carrying IPv4 or IPv6 and UDP;
// the IP length field says where the packet ends (its last 4 bytes are the
// ICRC slot, which is not hashed) and Ethernet padding after it is ignored.
// It checks only what it needs to find the headers: errors wrap ErrTruncated,
// ErrBadLength or ErrNotRoCE. It does not allocate.
func ComputeICRC(frame []byte) (uint32, error) {
	ipOff, ipLen, end, v6, err := locate(frame)
	if err != nil {
		return 0, err
	}
	return icrc(frame[ipOff:ipOff+ipLen], v6, frame[ipOff+ipLen:end]), nil
}

// VerifyICRC decodes nothing but the framing and reports whether the ICRC
// stored in frame is right: nil, an error wrapping ErrBadICRC, or a framing
// error as ComputeICRC. It is the ICRC check for frames decoded through the
// gopacket layers (pass packet.Data()), since a BTH layer cannot see the IP
// header.
func VerifyICRC(frame []byte) error {
	ipOff, ipLen, end, v6, err := locate(frame)
	if err != nil {
		return err
	}
	if icrc(frame[ipOff:ipOff+ipLen], v6, frame[ipOff+ipLen:end]) != binary.LittleEndian.Uint32(frame[end-ICRCLen:]) {
		return errICRC
	}
	return nil
}

// SetICRC computes the ICRC of frame and stores it in its slot (the last 4
// bytes of the IP packet). Use it after serialising with gopacket, whose
// layers cannot compute it (see BTHLayer.SerializeTo).
//
// It hashes the frame in place: the 8 bytes before the IP header and the
// variant fields are overwritten during the call and restored before it
// returns, so frame must not be read or written concurrently.
func SetICRC(frame []byte) error {
	ipOff, ipLen, end, v6, err := locate(frame)
	if err != nil {
		return err
	}
	slot := end - ICRCLen
	binary.LittleEndian.PutUint32(frame[slot:], icrcInPlace(frame[ipOff-8:slot], ipLen, v6))
	return nil
}

// locate finds the IP header (ipLen bytes at ipOff) and the end of the IP
// packet of a frame, checking lengths only.
func locate(frame []byte) (ipOff, ipLen, end int, v6 bool, err error) {
	if len(frame) < ethLen {
		return 0, 0, 0, false, errEthShort
	}
	et := binary.BigEndian.Uint16(frame[12:])
	off := ethLen
	if et == etherTypeVLAN {
		if len(frame) < ethLen+vlanLen {
			return 0, 0, 0, false, errEthShort
		}
		et = binary.BigEndian.Uint16(frame[16:])
		off += vlanLen
	}
	b := frame[off:]
	switch et {
	case etherTypeIPv4:
		if len(b) < ipv4Len {
			return 0, 0, 0, false, errIPv4Short
		}
		ihl := int(b[0]&0xF) * 4
		if ihl < ipv4Len {
			return 0, 0, 0, false, errIPv4IHL
		}
		total := int(binary.BigEndian.Uint16(b[2:]))
		if total > len(b) {
			return 0, 0, 0, false, errIPv4TotalLong
		}
		if total < ihl+udpLen+BTHLen+ICRCLen {
			return 0, 0, 0, false, errIPv4TotalShort
		}
		return off, ihl, off + total, false, nil
	case etherTypeIPv6:
		if len(b) < ipv6Len {
			return 0, 0, 0, false, errIPv6Short
		}
		total := ipv6Len + int(binary.BigEndian.Uint16(b[4:]))
		if total > len(b) {
			return 0, 0, 0, false, errIPv6PayloadLong
		}
		if total < ipv6Len+udpLen+BTHLen+ICRCLen {
			return 0, 0, 0, false, errUDPShort
		}
		return off, ipv6Len, off + total, true, nil
	}
	return 0, 0, 0, false, errEthType
}
