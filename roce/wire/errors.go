package wire

import "errors"

// Sentinel errors. Every error returned by this package matches exactly one of
// them under errors.Is; most are *Error values that add where the problem was.
var (
	// ErrTruncated: the buffer ends before a header (or the length a header
	// announces) is complete.
	ErrTruncated = errors.New("truncated")
	// ErrUnknownOpcode: the BTH opcode is not one this package knows.
	ErrUnknownOpcode = errors.New("unknown opcode")
	// ErrBadPadCount: the BTH pad count does not fit the packet, or a pad
	// byte is not zero.
	ErrBadPadCount = errors.New("bad pad count")
	// ErrBadICRC: the invariant CRC does not match. Decode returns it last,
	// with every field of the Packet filled in.
	ErrBadICRC = errors.New("bad ICRC")
	// ErrBadLength: a length field disagrees with the frame or with another
	// length field, or the payload length breaks a rule of the opcode.
	ErrBadLength = errors.New("bad length")
	// ErrNotRoCE: the frame is not a RoCEv2 packet (EtherType, IP version or
	// protocol, fragment, UDP destination port).
	ErrNotRoCE = errors.New("not RoCEv2")
	// ErrBadVersion: BTH TVer is not 0.
	ErrBadVersion = errors.New("bad BTH transport version")
	// ErrBadChecksum: the IPv4 header checksum does not match. Decode checks
	// it after the structure and before the ICRC, so fields are filled in.
	ErrBadChecksum = errors.New("bad IPv4 header checksum")
	// ErrShortBuffer: Encode was given a buffer smaller than FrameLen.
	ErrShortBuffer = errors.New("short buffer")
	// ErrBadField: Encode was given a field out of its range (a 24-bit
	// value above 0xFFFFFF, an address of the wrong family, ...).
	ErrBadField = errors.New("field out of range")
)

// Error is a decode or encode error with its place. The package returns
// only package-level *Error values, so returning one never allocates.
// It matches its sentinel under errors.Is.
type Error struct {
	Op  string // "decode ipv4", "encode bth", ...
	Msg string // detail, lower case
	Err error  // the sentinel
}

func (e *Error) Error() string { return "wire: " + e.Op + ": " + e.Msg + ": " + e.Err.Error() }

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is the sentinel of e.
func (e *Error) Is(target error) bool { return target == e.Err }

func newErr(op, msg string, sentinel error) *Error { return &Error{Op: op, Msg: msg, Err: sentinel} }

var (
	errEthShort        = newErr("decode ethernet", "frame shorter than its header", ErrTruncated)
	errEthType         = newErr("decode ethernet", "ethertype is neither IPv4 nor IPv6", ErrNotRoCE)
	errIPv4Short       = newErr("decode ipv4", "frame shorter than the header", ErrTruncated)
	errIPv4Version     = newErr("decode ipv4", "version is not 4", ErrNotRoCE)
	errIPv4IHL         = newErr("decode ipv4", "header length below 20", ErrBadLength)
	errIPv4TotalShort  = newErr("decode ipv4", "total length below header + UDP header", ErrBadLength)
	errIPv4TotalLong   = newErr("decode ipv4", "frame shorter than the total length", ErrTruncated)
	errIPv4Fragment    = newErr("decode ipv4", "fragment", ErrNotRoCE)
	errIPv4Proto       = newErr("decode ipv4", "protocol is not UDP", ErrNotRoCE)
	errIPv4Checksum    = newErr("decode ipv4", "header checksum mismatch", ErrBadChecksum)
	errIPv6Short       = newErr("decode ipv6", "frame shorter than the header", ErrTruncated)
	errIPv6Version     = newErr("decode ipv6", "version is not 6", ErrNotRoCE)
	errIPv6Next        = newErr("decode ipv6", "next header is not UDP", ErrNotRoCE)
	errIPv6PayloadLong = newErr("decode ipv6", "frame shorter than the payload length", ErrTruncated)
	errUDPShort        = newErr("decode udp", "IP payload shorter than a UDP header", ErrBadLength)
	errUDPLength       = newErr("decode udp", "length disagrees with the IP length", ErrBadLength)
	errUDPPort         = newErr("decode udp", "destination port is not 4791", ErrNotRoCE)
	errBTHShort        = newErr("decode bth", "UDP payload shorter than BTH + ICRC", ErrTruncated)
	errBTHVersion      = newErr("decode bth", "TVer is not 0", ErrBadVersion)
	errBTHOpcode       = newErr("decode bth", "opcode unknown", ErrUnknownOpcode)
	errBTHOpcodeOOO    = newErr("decode bth", "OOO opcode not accepted (OOO mode not negotiated)", ErrUnknownOpcode)
	errBTHOpcodeSR     = newErr("decode bth", "SR opcode not accepted (selective repeat not negotiated)", ErrUnknownOpcode)
	errBTHAlign        = newErr("decode bth", "UDP payload not a multiple of 4 bytes", ErrBadLength)
	errExtShort        = newErr("decode bth", "UDP payload shorter than the opcode's headers + ICRC", ErrTruncated)
	errPadCount        = newErr("decode payload", "pad count larger than the payload", ErrBadPadCount)
	errPadBytes        = newErr("decode payload", "pad byte not zero", ErrBadPadCount)
	errPayloadNone     = newErr("decode payload", "opcode carries no payload", ErrBadLength)
	errPayloadFull     = newErr("decode payload", "FIRST/MIDDLE payload is not a whole path MTU (256..4096)", ErrBadLength)
	errPayloadEmpty    = newErr("decode payload", "LAST payload is empty", ErrBadLength)
	errPayloadLong     = newErr("decode payload", "payload larger than 4096", ErrBadLength)
	errPayloadCNP      = newErr("decode payload", "CNP must carry exactly 16 reserved bytes", ErrBadLength)
	errPayloadSACK     = newErr("decode payload", "SR_SACK must carry 32 to 256 bitmap bytes, a multiple of 32", ErrBadLength)
	errICRC            = newErr("decode icrc", "mismatch", ErrBadICRC)
	errOOOLen          = newErr("decode ooo", "payload length differs from the RETH DMA length", ErrBadLength)
	errOOOSeg          = newErr("decode ooo", "XRH segment is not a path MTU", ErrBadLength)
	errOOOPlace        = newErr("decode ooo", "packet not a whole segment inside the operation", ErrBadLength)
	errOOOTotal        = newErr("decode ooo", "RETH DMA length differs from the XRH total", ErrBadLength)

	errEncOpcode    = newErr("encode bth", "opcode unknown", ErrUnknownOpcode)
	errEncVersion   = newErr("encode bth", "TVer is not 0", ErrBadVersion)
	errEncBTHField  = newErr("encode bth", "DestQPN/PSN above 24 bits or reserved bits out of range", ErrBadField)
	errEncExtField  = newErr("encode headers", "MSN/source QPN above 24 bits", ErrBadField)
	errEncAddr      = newErr("encode ip", "address family does not match the IP version", ErrBadField)
	errEncIPField   = newErr("encode ip", "IPv4 flags above 3 bits or flow label above 20 bits", ErrBadField)
	errEncOptions   = newErr("encode ipv4", "options longer than 40 bytes or not a multiple of 4", ErrBadField)
	errEncTooLong   = newErr("encode ip", "frame longer than the IP length field allows", ErrBadLength)
	errEncShort     = newErr("encode", "buffer smaller than the frame", ErrShortBuffer)
	errEncPayloadNo = newErr("encode payload", "opcode carries no payload", ErrBadLength)
	errEncFull      = newErr("encode payload", "FIRST/MIDDLE payload is not a whole path MTU (256..4096)", ErrBadLength)
	errEncEmpty     = newErr("encode payload", "LAST payload is empty", ErrBadLength)
	errEncLong      = newErr("encode payload", "payload larger than 4096", ErrBadLength)
	errEncCNP       = newErr("encode payload", "CNP must carry exactly 16 reserved bytes", ErrBadLength)
	errEncSACK      = newErr("encode payload", "SR_SACK must carry 32 to 256 bitmap bytes, a multiple of 32", ErrBadLength)
	errEncNegative  = newErr("encode payload", "negative payload length", ErrBadLength)
	errEncOOOField  = newErr("encode ooo", "XTP QPN or XCS reserved bits above 24 bits", ErrBadField)
	errEncOOOLen    = newErr("encode ooo", "payload length differs from the RETH DMA length", ErrBadLength)
	errEncOOOSeg    = newErr("encode ooo", "XRH segment is not a path MTU", ErrBadLength)
	errEncOOOPlace  = newErr("encode ooo", "packet not a whole segment inside the operation", ErrBadLength)
	errEncOOOTotal  = newErr("encode ooo", "RETH DMA length differs from the XRH total", ErrBadLength)
)
