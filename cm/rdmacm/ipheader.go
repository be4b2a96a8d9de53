package rdmacm

import (
	"net/netip"
	"strconv"
	"time"
)

// IPHeaderLen is the size of librdmacm's IP CM header (the kernel's struct
// cma_hdr) at the start of a REQ's or SIDR_REQ's private data:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  CM version 0 |IPVer=4|6| Resv|      source port              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                source address (16 bytes)                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                destination address (16 bytes)                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// An IPv4 address fills the last 4 bytes of its 16, the first 12 are zero
// (not the ::ffff: prefix). The destination port is not here: it is the low
// 16 bits of the service ID. The application's own private data follows, so
// a REQ carries at most REQUserDataMax bytes of it (56), a SIDR_REQ 180.
const IPHeaderLen = 36

// User data room after the IP CM header.
const (
	REQUserDataMax     = REQPrivateDataLen - IPHeaderLen
	SIDRReqUserDataMax = SIDRReqPrivateDataLen - IPHeaderLen
)

// IPHeader is librdmacm's IP CM header. Src and Dst are both IPv4 or both
// IPv6; the IP version byte says which.
type IPHeader struct {
	SrcPort  uint16 // the active side's port
	Src, Dst netip.Addr
}

// ParseIPHeader reads the IP CM header at the start of pd (a REQ's or
// SIDR_REQ's private data) and returns it with the user data after it. It
// checks what Linux's rdma_cm checks (cma_save_ip_info): CM version 0 and
// IP version 4 or 6; the reserved low nibble of the IP version byte is
// ignored. Errors: ErrPrivateData. The user data aliases pd.
func ParseIPHeader(pd []byte) (IPHeader, []byte, error) {
	var h IPHeader
	if len(pd) < IPHeaderLen {
		return h, nil, errPDShort
	}
	if pd[0] != 0 {
		return h, nil, errPDVersion
	}
	switch pd[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(pd[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(pd[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(pd[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(pd[20:36]))
	default:
		return h, nil, errPDIPVersion
	}
	h.SrcPort = be16(pd[2:])
	return h, pd[IPHeaderLen:], nil
}

// Put writes h and then user into pd (a REQ's or SIDR_REQ's private data)
// and zeroes the rest. Errors: ErrPrivateData when pd is shorter than the
// header, the addresses are not of one family (an IPv4-mapped IPv6 address
// counts as IPv6, as the kernel would send it), or user does not fit.
func (h IPHeader) Put(pd []byte, user []byte) error {
	if len(pd) < IPHeaderLen {
		return errPDEncShort
	}
	if len(user) > len(pd)-IPHeaderLen {
		return errPDUserLong
	}
	v4 := h.Src.Is4() && h.Dst.Is4()
	if !v4 && !(h.Src.Is6() && h.Dst.Is6()) {
		return errPDEncFamily
	}
	clear(pd)
	put16(pd[2:], h.SrcPort)
	if v4 {
		pd[1] = 4 << 4
		s, d := h.Src.As4(), h.Dst.As4()
		copy(pd[16:20], s[:])
		copy(pd[32:36], d[:])
	} else {
		pd[1] = 6 << 4
		s, d := h.Src.As16(), h.Dst.As16()
		copy(pd[4:20], s[:])
		copy(pd[20:36], d[:])
	}
	copy(pd[IPHeaderLen:], user)
	return nil
}

// PortSpace is an rdma_cm port space, the middle of an IP service ID.
type PortSpace uint16

// Port spaces (Linux enum rdma_ucm_port_space).
const (
	PSIPoIB PortSpace = 0x0002
	PSTCP   PortSpace = 0x0106 // RDMA_PS_TCP: RC, as rping and perftest -R use
	PSUDP   PortSpace = 0x0111 // RDMA_PS_UDP: UD through SIDR, as udaddy uses
	PSIB    PortSpace = 0x013F
)

// ServiceID returns the service ID rdma_cm uses for port in port space ps:
// 0x0000000001060000 | port for PSTCP (rdma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// ParseServiceID splits an IP service ID into its port space and port; ok
// is false when sid is not of the form 0x00000000_01XX_PPPP.
func ParseServiceID(sid uint64) (ps PortSpace, port uint16, ok bool) {
	if sid>>24 != 1 { // the top 40 bits of every IP service ID: 0x0000000001
		return 0, 0, false
	}
	return PortSpace(sid >> 16), uint16(sid), true
}

// Timeout returns the duration of a 5-bit CM timeout code: 4.096 µs · 2^code
// (IBA Vol 1, 12.7.34; Linux's default CM response timeout 20 ≈ 4.3 s).
// Codes above 31 are treated as 31.
func Timeout(code uint8) time.Duration {
	return 4096 * time.Nanosecond << min(code, 31)
}

// ipSummary is " tcp:7174 192.0.2.12:33883→192.0.2.11" for a service ID in
// an IP port space whose private data starts with a valid IP CM header, else
// "".
func ipSummary(sid uint64, pd []byte) string {
	ps, port, ok := ParseServiceID(sid)
	if !ok {
		return ""
	}
	h, _, err := ParseIPHeader(pd)
	if err != nil {
		return " ip_cm=invalid"
	}
	name := "ps" + hex(uint32(ps))
	switch ps {
	case PSTCP:
		name = "tcp"
	case PSUDP:
		name = "udp"
	case PSIB:
		name = "ib"
	case PSIPoIB:
		name = "ipoib"
	}
	return " " + name + " " + netip.AddrPortFrom(h.Src, h.SrcPort).String() + "→" +
		netip.AddrPortFrom(h.Dst, port).String()
}

func hex(v uint32) string { return "0x" + strconv.FormatUint(uint64(v), 16) }

// hex32 and hex64 print with all digits, as tshark shows comm IDs and
// service IDs.
func hex32(v uint32) string { return "0x" + pad(strconv.FormatUint(uint64(v), 16), 8) }
func hex64(v uint64) string { return "0x" + pad(strconv.FormatUint(v, 16), 16) }

func pad(s string, n int) string {
	const zeros = "0000000000000000"
	if len(s) >= n {
		return s
	}
	return zeros[:n-len(s)] + s
}
