package wire

import (
	"encoding/binary"
	"net/netip"
)

// UDPPort is the RoCEv2 UDP destination port.
const UDPPort = 4791

const (
	ethLen        = 14
	vlanLen       = 4
	ipv4Len       = 20
	ipv6Len       = 40
	udpLen        = 8
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	protoUDP      = 17
)

// Packet is one whole RoCEv2 frame, Ethernet to ICRC:
//
//	Ethernet (14) | 802.1Q tag (4, optional) | IPv4 (20 + options) or IPv6 (40) |
//	UDP (8, destination 4791) | BTH (12) | extension headers | payload | pad (0..3) | ICRC (4)
//
// The zero value encodes nothing useful: set at least the addresses, the
// ports and the BTH. For CNP (opcode 0x81) the 16 reserved bytes after the
// BTH are the Payload.
type Packet struct {
	DstMAC, SrcMAC [6]byte
	HasVLAN        bool
	VLANTCI        uint16
	IPv6           bool
	SrcIP, DstIP   netip.Addr // 4-byte addresses for IPv4, 16-byte for IPv6
	TOS            uint8      // IPv4 TOS / IPv6 traffic class
	FlowLabel      uint32     // IPv6 only
	TTL            uint8      // IPv4 TTL / IPv6 hop limit
	IPID           uint16     // IPv4 identification
	IPFlags        uint8      // IPv4 flags (DF = 0x2); MF and the fragment offset are never set
	// IPOptions are the IPv4 options (0..40 bytes, a multiple of 4), kept so
	// re-encoding is byte-exact. Decode aliases the frame.
	IPOptions        []byte
	SrcPort, DstPort uint16
	UDPChecksum      uint16 // written as given (rxe sends 0)
	BTH              BTH
	RETH             RETH
	AETH             AETH
	Atomic           AtomicETH
	AtomicAck        AtomicAckETH
	DETH             DETH
	ImmDt            uint32
	IETH             uint32 // R_Key to invalidate
	Payload          []byte // aliases the frame after Decode
	ICRC             uint32 // as found by Decode; as written by Encode

	// The OOO headers (opcodes 0xC0..0xC4, docs/ooo-wire.md), set and used
	// only for the opcodes that carry them.
	XRH           XRH
	XRR           XRR
	XCS           XCS
	XTPTarget     XTP // OOO_3P_READ_REQ: the data sink
	XTPController XTP // OOO_3P_READ_REQ, OOO_3P_WRITE: who gets the completion
}

// IPv4 flag bits of Packet.IPFlags.
const (
	IPv4DontFragment  = 0x2
	IPv4MoreFragments = 0x1
)

func (p *Packet) l2Len() int {
	if p.HasVLAN {
		return ethLen + vlanLen
	}
	return ethLen
}

func (p *Packet) l3Len() int {
	if p.IPv6 {
		return ipv6Len
	}
	return ipv4Len + len(p.IPOptions)
}

// HeaderLen returns the length from the start of the Ethernet header to the
// end of the last extension header of the opcode (the payload offset). For an
// unknown opcode it counts the BTH only.
func (p *Packet) HeaderLen() int {
	return p.l2Len() + p.l3Len() + udpLen + opTable[p.BTH.Opcode].hdrLen()
}

func (i *OpInfo) hdrLen() int {
	if i.HdrLen == 0 {
		return BTHLen
	}
	return i.HdrLen
}

// FrameLen returns the length of the encoded frame: HeaderLen + payload +
// pad + ICRC.
func (p *Packet) FrameLen() int {
	n := len(p.Payload)
	return p.HeaderLen() + n + (-n)&3 + ICRCLen
}

// Decode parses a whole frame into p, aliasing frame (Payload and IPOptions
// point into it; p is valid as long as frame is). It resets every field
// first, does not allocate and does not panic on any input.
//
// It checks, in order: the framing (EtherType, one optional 802.1Q tag, IP
// version, IPv4 header length, no fragment, protocol UDP, IPv6 next header
// UDP), the lengths (the IP length must fit the frame; Ethernet padding after
// it is ignored; the UDP length must equal the IP payload length), the UDP
// destination port 4791 (any source port), BTH TVer 0, a known opcode (the
// OOO opcodes only under DecodeWith's AcceptOOO), the extension headers of
// the opcode, the pad count and zero pad bytes, the
// payload length rules of the opcode (none for ACKs, READ requests and
// atomics; one whole path MTU for FIRST/MIDDLE; 1..4096 for LAST; 0..4096 for
// ONLY; 16 for CNP), then the IPv4 header checksum (ErrBadChecksum) and last
// the ICRC (ErrBadICRC). The two checksum errors come with every field
// filled in; after any other error p is undefined.
//
// Fields the ICRC does not cover are accepted as found: the MAC addresses and
// the 802.1Q tag, the IPv6 traffic class, flow label and hop limit, BTH
// FECN/BECN/Resv6 (switches may change them), and the UDP checksum, which is
// not verified (rxe sends 0; the ICRC already covers the datagram end to
// end, and a second pass over the payload would double the cost). The IPv4
// TOS, TTL and checksum, also left out of the ICRC, are covered by the IPv4
// header checksum, which is verified.
//
// Errors are package-level *Error values wrapping one of ErrTruncated,
// ErrNotRoCE, ErrBadLength, ErrBadVersion, ErrUnknownOpcode, ErrBadPadCount,
// ErrBadChecksum and ErrBadICRC.
func (p *Packet) Decode(frame []byte) error {
	return p.decode(frame, 0)
}

// DecodeWritable is Decode for the owner of a writable frame, such as a
// receive buffer of a link: the same results and errors, but the ICRC is
// computed in place, in one pass over the frame instead of a masked copy of
// the headers and a second pass over the payload. The 8 bytes before the IP
// header and the fields the ICRC leaves out are overwritten with ones during
// the call and restored before it returns, so frame ends byte-identical, but
// it must not be read or written by anyone else while the call runs. Frames
// that may be shared or read-only (a pcap file's data, gopacket's
// Packet.Data, a caller's buffer) go to Decode.
func (p *Packet) DecodeWritable(frame []byte) error {
	return p.decode(frame, InPlace)
}

func (p *Packet) decode(frame []byte, flags DecodeFlags) error {
	*p = Packet{}
	if len(frame) < ethLen {
		return errEthShort
	}
	copy(p.DstMAC[:], frame[0:6])
	copy(p.SrcMAC[:], frame[6:12])
	et := binary.BigEndian.Uint16(frame[12:])
	b := frame[ethLen:]
	if et == etherTypeVLAN {
		if len(b) < vlanLen {
			return errEthShort
		}
		p.HasVLAN = true
		p.VLANTCI = binary.BigEndian.Uint16(b)
		et = binary.BigEndian.Uint16(b[2:])
		b = b[vlanLen:]
	}
	var ip, l4 []byte
	switch et {
	case etherTypeIPv4:
		if len(b) < ipv4Len {
			return errIPv4Short
		}
		if b[0]>>4 != 4 {
			return errIPv4Version
		}
		ihl := int(b[0]&0xF) * 4
		if ihl < ipv4Len {
			return errIPv4IHL
		}
		total := int(binary.BigEndian.Uint16(b[2:]))
		if total > len(b) {
			return errIPv4TotalLong
		}
		if total < ihl+udpLen {
			return errIPv4TotalShort
		}
		if binary.BigEndian.Uint16(b[6:])&0x3FFF != 0 {
			return errIPv4Fragment
		}
		if b[9] != protoUDP {
			return errIPv4Proto
		}
		p.TOS = b[1]
		p.IPID = binary.BigEndian.Uint16(b[4:])
		p.IPFlags = b[6] >> 5
		p.TTL = b[8]
		p.SrcIP = netip.AddrFrom4([4]byte(b[12:16]))
		p.DstIP = netip.AddrFrom4([4]byte(b[16:20]))
		if ihl > ipv4Len {
			p.IPOptions = b[ipv4Len:ihl:ihl]
		}
		ip, l4 = b[:ihl], b[ihl:total]
	case etherTypeIPv6:
		if len(b) < ipv6Len {
			return errIPv6Short
		}
		if b[0]>>4 != 6 {
			return errIPv6Version
		}
		total := ipv6Len + int(binary.BigEndian.Uint16(b[4:]))
		if total > len(b) {
			return errIPv6PayloadLong
		}
		if b[6] != protoUDP {
			return errIPv6Next
		}
		p.IPv6 = true
		v := binary.BigEndian.Uint32(b)
		p.TOS = uint8(v >> 20)
		p.FlowLabel = v & 0xFFFFF
		p.TTL = b[7]
		p.SrcIP = netip.AddrFrom16([16]byte(b[8:24]))
		p.DstIP = netip.AddrFrom16([16]byte(b[24:40]))
		ip, l4 = b[:ipv6Len], b[ipv6Len:total]
	default:
		return errEthType
	}

	// UDP.
	if len(l4) < udpLen {
		return errUDPShort
	}
	if int(binary.BigEndian.Uint16(l4[4:])) != len(l4) {
		return errUDPLength
	}
	p.SrcPort = binary.BigEndian.Uint16(l4)
	p.DstPort = binary.BigEndian.Uint16(l4[2:])
	p.UDPChecksum = binary.BigEndian.Uint16(l4[6:])
	if p.DstPort != UDPPort {
		return errUDPPort
	}

	// BTH, extension headers, payload, pad.
	if err := p.decodeTransport(l4[udpLen:], flags); err != nil {
		return err
	}

	if !p.IPv6 && ipv4Checksum(ip) != 0 {
		return errIPv4Checksum
	}
	if flags&ICRCChecked != 0 {
		return nil
	}
	var crc uint32
	if flags&InPlace != 0 {
		ipOff := len(frame) - len(b)
		crc = icrcInPlace(frame[ipOff-8:ipOff+len(ip)+len(l4)-ICRCLen], len(ip), p.IPv6)
	} else {
		crc = icrc(ip, p.IPv6, l4)
	}
	if crc != p.ICRC {
		return errICRC
	}
	return nil
}

// decodeTransport decodes the UDP payload: BTH through ICRC. The OOO
// opcodes are unknown unless flags has AcceptOOO, the SR ones unless
// AcceptSR.
func (p *Packet) decodeTransport(t []byte, flags DecodeFlags) error {
	if len(t) < BTHLen+ICRCLen {
		return errBTHShort
	}
	p.BTH.decode(t)
	if p.BTH.TVer != 0 {
		return errBTHVersion
	}
	info := &opTable[p.BTH.Opcode]
	if info.Name == "" {
		return errBTHOpcode
	}
	if info.Transport == OOO && flags&AcceptOOO == 0 {
		return errBTHOpcodeOOO
	}
	if info.Transport == SR && flags&AcceptSR == 0 {
		return errBTHOpcodeSR
	}
	if len(t)&3 != 0 {
		return errBTHAlign
	}
	if len(t) < info.HdrLen+ICRCLen {
		return errExtShort
	}
	p.decodeExt(info.Headers, t[BTHLen:])
	end := len(t) - ICRCLen
	rest := t[info.HdrLen:end]
	pad := int(p.BTH.PadCount)
	if pad > len(rest) {
		return errPadCount
	}
	n := len(rest) - pad
	for _, c := range rest[n:] {
		if c != 0 {
			return errPadBytes
		}
	}
	if e := payloadErr(payloadRule(info, n), false); e != nil {
		return e
	}
	if info.Transport == OOO {
		if e := oooErr(p.oooRule(info, n), false); e != nil {
			return e
		}
	}
	p.Payload = rest[:n:n]
	p.ICRC = binary.LittleEndian.Uint32(t[end:])
	return nil
}

// decodeExt decodes the extension headers h from b, which the caller has
// checked holds h.Len() bytes.
func (p *Packet) decodeExt(h Headers, b []byte) {
	if h == 0 {
		return
	}
	if h&HasDETH != 0 {
		p.DETH.decode(b)
		b = b[DETHLen:]
	}
	if h&HasRETH != 0 {
		p.RETH.decode(b)
		b = b[RETHLen:]
	}
	if h&oooHeaders != 0 {
		p.decodeOOO(h, b)
		return
	}
	if h&HasAtomicETH != 0 {
		p.Atomic.decode(b)
		b = b[AtomicETHLen:]
	}
	if h&HasAETH != 0 {
		p.AETH.decode(b)
		b = b[AETHLen:]
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAck.decode(b)
		b = b[AtomicAckETHLen:]
	}
	if h&HasImmDt != 0 {
		p.ImmDt = decodeU32(b)
		b = b[ImmDtLen:]
	}
	if h&HasIETH != 0 {
		p.IETH = decodeU32(b)
	}
}

func (p *Packet) encodeExt(h Headers, b []byte) {
	if h == 0 {
		return
	}
	if h&HasDETH != 0 {
		p.DETH.encode(b)
		b = b[DETHLen:]
	}
	if h&HasRETH != 0 {
		p.RETH.encode(b)
		b = b[RETHLen:]
	}
	if h&oooHeaders != 0 {
		p.encodeOOO(h, b)
		return
	}
	if h&HasAtomicETH != 0 {
		p.Atomic.encode(b)
		b = b[AtomicETHLen:]
	}
	if h&HasAETH != 0 {
		p.AETH.encode(b)
		b = b[AETHLen:]
	}
	if h&HasAtomicAckETH != 0 {
		p.AtomicAck.encode(b)
		b = b[AtomicAckETHLen:]
	}
	if h&HasImmDt != 0 {
		encodeU32(b, p.ImmDt)
		b = b[ImmDtLen:]
	}
	if h&HasIETH != 0 {
		encodeU32(b, p.IETH)
	}
}

func payloadErr(rule int, encode bool) error {
	if rule == ruleOK {
		return nil
	}
	if encode {
		switch rule {
		case ruleNone:
			return errEncPayloadNo
		case ruleFull:
			return errEncFull
		case ruleEmpty:
			return errEncEmpty
		case ruleLong:
			return errEncLong
		case ruleSACK:
			return errEncSACK
		}
		return errEncCNP
	}
	switch rule {
	case ruleNone:
		return errPayloadNone
	case ruleFull:
		return errPayloadFull
	case ruleEmpty:
		return errPayloadEmpty
	case ruleLong:
		return errPayloadLong
	case ruleSACK:
		return errPayloadSACK
	}
	return errPayloadCNP
}

// Encode writes the frame into buf and returns its length (FrameLen). It sets
// p.BTH.PadCount, the IP and UDP lengths, the IPv4 header checksum and the
// ICRC (also stored in p.ICRC), copies Payload to buf[HeaderLen():] and zeroes
// the pad; everything else is written as given. It does not allocate.
//
// Errors (package-level *Error values): ErrUnknownOpcode, ErrBadVersion,
// ErrBadField (a field wider than the wire allows, an address of the wrong
// family), ErrBadLength (payload against the rules of the opcode, as Decode),
// ErrShortBuffer. On error buf may have been partly written.
func (p *Packet) Encode(buf []byte) (int, error) {
	return p.encode(buf, len(p.Payload), true)
}

// EncodeInPlace is Encode for a payload the caller has already put at
// buf[HeaderLen():HeaderLen()+payloadLen] (for example, copied straight from
// a memory region into a transmit buffer); p.Payload is ignored.
func (p *Packet) EncodeInPlace(buf []byte, payloadLen int) (int, error) {
	return p.encode(buf, payloadLen, false)
}

func (p *Packet) encode(buf []byte, n int, copyPayload bool) (int, error) {
	info := &opTable[p.BTH.Opcode]
	if info.Name == "" {
		return 0, errEncOpcode
	}
	if p.BTH.TVer != 0 {
		return 0, errEncVersion
	}
	if n < 0 {
		return 0, errEncNegative
	}
	if e := payloadErr(payloadRule(info, n), true); e != nil {
		return 0, e
	}
	if !p.BTH.valid() {
		return 0, errEncBTHField
	}
	if p.AETH.MSN > PSNMask || p.DETH.SrcQPN > PSNMask {
		return 0, errEncExtField
	}
	if info.Transport == OOO {
		if p.XTPTarget.QPN > PSNMask || p.XTPController.QPN > PSNMask || p.XCS.Resv > PSNMask {
			return 0, errEncOOOField
		}
		if e := oooErr(p.oooRule(info, n), true); e != nil {
			return 0, e
		}
	}
	if p.IPv6 {
		if !p.SrcIP.Is6() || !p.DstIP.Is6() {
			return 0, errEncAddr
		}
		if p.FlowLabel > 0xFFFFF {
			return 0, errEncIPField
		}
	} else {
		if !p.SrcIP.Is4() || !p.DstIP.Is4() {
			return 0, errEncAddr
		}
		if p.IPFlags > 7 || p.IPFlags&IPv4MoreFragments != 0 {
			return 0, errEncIPField
		}
		if len(p.IPOptions) > 40 || len(p.IPOptions)&3 != 0 {
			return 0, errEncOptions
		}
	}
	pad := (-n) & 3
	l2 := p.l2Len()
	l3 := p.l3Len()
	hl := l2 + l3 + udpLen + info.HdrLen
	total := hl + n + pad + ICRCLen
	udpTotal := total - l2 - l3
	ipTotal := total - l2
	if ipTotal > 0xFFFF || (p.IPv6 && udpTotal > 0xFFFF) {
		return 0, errEncTooLong
	}
	if len(buf) < total {
		return 0, errEncShort
	}
	buf = buf[:total]
	if copyPayload {
		copy(buf[hl:], p.Payload)
	}

	// Ethernet.
	copy(buf[0:6], p.DstMAC[:])
	copy(buf[6:12], p.SrcMAC[:])
	b := buf[12:]
	if p.HasVLAN {
		binary.BigEndian.PutUint16(b, etherTypeVLAN)
		binary.BigEndian.PutUint16(b[2:], p.VLANTCI)
		b = b[4:]
	}
	ip := buf[l2 : l2+l3]
	if p.IPv6 {
		binary.BigEndian.PutUint16(b, etherTypeIPv6)
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(p.TOS)<<20|p.FlowLabel)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpTotal))
		ip[6] = protoUDP
		ip[7] = p.TTL
		src, dst := p.SrcIP.As16(), p.DstIP.As16()
		copy(ip[8:24], src[:])
		copy(ip[24:40], dst[:])
	} else {
		binary.BigEndian.PutUint16(b, etherTypeIPv4)
		ip[0] = 0x40 | byte(l3/4)
		ip[1] = p.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(ipTotal))
		binary.BigEndian.PutUint16(ip[4:], p.IPID)
		ip[6] = p.IPFlags << 5
		ip[7] = 0
		ip[8] = p.TTL
		ip[9] = protoUDP
		ip[10], ip[11] = 0, 0
		src, dst := p.SrcIP.As4(), p.DstIP.As4()
		copy(ip[12:16], src[:])
		copy(ip[16:20], dst[:])
		copy(ip[20:], p.IPOptions)
		// The checksum from the values, not read back from buf: loads
		// spanning the narrower stores just made cannot be forwarded and
		// would wait for the stores (and the payload copy before them) to
		// reach the cache.
		sum := (uint64(0x40|l3/4)<<8 | uint64(p.TOS)) + uint64(ipTotal) + uint64(p.IPID) +
			uint64(p.IPFlags)<<13 + (uint64(p.TTL)<<8 | protoUDP) +
			uint64(binary.BigEndian.Uint32(src[:])) + uint64(binary.BigEndian.Uint32(dst[:])) +
			checksumSum(p.IPOptions)
		binary.BigEndian.PutUint16(ip[10:], ^checksumFold(sum))
	}

	l4 := buf[l2+l3:]
	binary.BigEndian.PutUint16(l4, p.SrcPort)
	binary.BigEndian.PutUint16(l4[2:], p.DstPort)
	binary.BigEndian.PutUint16(l4[4:], uint16(udpTotal))
	binary.BigEndian.PutUint16(l4[6:], p.UDPChecksum)

	p.BTH.PadCount = uint8(pad)
	t := l4[udpLen:]
	p.BTH.encode(t)
	p.encodeExt(info.Headers, t[BTHLen:])
	end := total - ICRCLen
	for i := end - pad; i < end; i++ {
		buf[i] = 0
	}
	p.ICRC = icrcInPlace(buf[l2-8:end], l3, p.IPv6)
	binary.LittleEndian.PutUint32(buf[end:], p.ICRC)
	return total, nil
}

// ipv4Checksum returns the Internet checksum (RFC 1071) of h. Over a header
// with its checksum field filled in it returns 0 when the checksum is right;
// over one with the field zeroed it returns the value to store.
//
// It adds big-endian 32-bit words into a 64-bit sum and folds once at the
// end: 2^16 ≡ 1 modulo 0xFFFF, so the ones' complement sum of the 16-bit
// words is the folded sum of the 32-bit ones.
func ipv4Checksum(h []byte) uint16 {
	if len(h) == ipv4Len {
		return ^checksumFold(uint64(binary.BigEndian.Uint32(h[0:])) + uint64(binary.BigEndian.Uint32(h[4:])) +
			uint64(binary.BigEndian.Uint32(h[8:])) + uint64(binary.BigEndian.Uint32(h[12:])) +
			uint64(binary.BigEndian.Uint32(h[16:])))
	}
	return ^checksumFold(checksumSum(h))
}

// checksumSum adds h as big-endian 32-bit words (an odd byte at the end
// padded with zero), for checksumFold.
func checksumSum(h []byte) uint64 {
	var s uint64
	for len(h) >= 4 {
		s += uint64(binary.BigEndian.Uint32(h))
		h = h[4:]
	}
	if len(h) >= 2 {
		s += uint64(binary.BigEndian.Uint16(h))
		h = h[2:]
	}
	if len(h) == 1 {
		s += uint64(h[0]) << 8
	}
	return s
}

// checksumFold folds a sum of fewer than 2^32 32-bit words to 16 bits with
// end-around carries: the ones' complement sum.
func checksumFold(s uint64) uint16 {
	s = s&0xFFFFFFFF + s>>32
	s = s&0xFFFF + s>>16
	s = s&0xFFFF + s>>16
	s = s&0xFFFF + s>>16
	return uint16(s)
}

// IPv4Checksum returns the header checksum to store in an IPv4 header whose
// checksum field (bytes 10..11) is zero; over a header with a correct checksum
// it returns 0. link/udp, which rebuilds the headers of received frames, uses
// it so that Decode accepts them.
func IPv4Checksum(header []byte) uint16 { return ipv4Checksum(header) }
