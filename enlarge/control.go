package enlarge

import (
	"encoding/binary"
	"strconv"
)

// Control messages. Every one begins with the 4-byte Magic, a type byte and
// a version byte, so a capture decoder can recognise it in an RDMA WRITE
// payload (see DescribeControl). Integers are big-endian (network order).
//
//	ENLARGE_REQ (16 bytes), written into a slot of the current ring:
//	 0 magic "XDEN" | 4 type 1 | 5 version 1 | 6 reserved u16 | 8 phase u32 | 12 size needed u32
//
//	ENLARGE_ACK (32 bytes), written into the requester's mailbox:
//	 0 head flag: magic "XDEN", type 2, version 1, reserved u16 (8 bytes)
//	 8 address u64 | 16 rkey u32 | 20 length u32 | 24 phase u32 | 28 tail flag u32 (TailFlag)
//
//	ENLARGE_CREDIT (16 bytes), written into the sender's mailbox:
//	 0 magic "XDEN" | 4 type 3 | 5 version 1 | 6 reserved u16 | 8 phase u32 | 12 messages consumed u32
//
// The head flag is the first thing the sender checks; the tail flag is the
// last word of the record, so seeing both means the whole record has landed.
const (
	// Magic opens every control message: "XDEN".
	Magic uint32 = 0x5844454E
	// TailFlag closes an ENLARGE_ACK.
	TailFlag uint32 = 0x7A11F1A6
	// Version is the control-message version this package speaks.
	Version = 1

	// ReqLen, AckLen and CreditLen are the encoded sizes of the control
	// messages.
	ReqLen    = 16
	AckLen    = 32
	CreditLen = 16
)

// Type is the type byte of a control message.
type Type uint8

// Control message types.
const (
	TypeReq    Type = 1 // ENLARGE_REQ
	TypeAck    Type = 2 // ENLARGE_ACK
	TypeCredit Type = 3 // ENLARGE_CREDIT
)

// String returns "ENLARGE_REQ", "ENLARGE_ACK", "ENLARGE_CREDIT" or "TYPE(n)".
func (t Type) String() string {
	switch t {
	case TypeReq:
		return "ENLARGE_REQ"
	case TypeAck:
		return "ENLARGE_ACK"
	case TypeCredit:
		return "ENLARGE_CREDIT"
	}
	return "TYPE(" + strconv.Itoa(int(t)) + ")"
}

// Req is an ENLARGE_REQ: the sender asks for the receiver's buffer of Phase,
// because an element of Size bytes does not fit the current one.
type Req struct {
	Phase uint32
	Size  uint32
}

// Ack is an ENLARGE_ACK: the receiver's new buffer for Phase.
type Ack struct {
	Addr   uint64
	RKey   uint32
	Length uint32
	Phase  uint32
}

// Mailbox layout (MailboxLen bytes, registered by each end at start). The
// first part is written by the peer; the second is staging for what this end
// writes into the peer's mailbox.
const (
	mbAck       = 0  // incoming ENLARGE_ACK (AckLen)
	mbCredit    = 32 // incoming ENLARGE_CREDIT (CreditLen; the count also comes as immediate data)
	mbOutAck    = 48 // outgoing ENLARGE_ACK staging
	mbOutCredit = 80 // outgoing ENLARGE_CREDIT staging
	// MailboxLen is the size of the mailbox each end registers.
	MailboxLen = 96
)

func putHead(b []byte, t Type) {
	binary.BigEndian.PutUint32(b[0:], Magic)
	b[4] = byte(t)
	b[5] = Version
	b[6], b[7] = 0, 0
}

// headOK reports whether b starts with a well-formed head of type t.
func headOK(b []byte, t Type) bool {
	return len(b) >= 8 && binary.BigEndian.Uint32(b) == Magic && Type(b[4]) == t && b[5] == Version &&
		b[6] == 0 && b[7] == 0
}

// AppendReq appends the encoding of r to b.
func AppendReq(b []byte, r Req) []byte {
	var m [ReqLen]byte
	r.encode(m[:])
	return append(b, m[:]...)
}

func (r Req) encode(b []byte) {
	putHead(b, TypeReq)
	binary.BigEndian.PutUint32(b[8:], r.Phase)
	binary.BigEndian.PutUint32(b[12:], r.Size)
}

// ParseReq decodes an ENLARGE_REQ; ok is false unless b is exactly one
// well-formed request.
func ParseReq(b []byte) (r Req, ok bool) {
	if len(b) != ReqLen || !headOK(b, TypeReq) {
		return Req{}, false
	}
	return Req{Phase: binary.BigEndian.Uint32(b[8:]), Size: binary.BigEndian.Uint32(b[12:])}, true
}

// AppendAck appends the encoding of a (head and tail flags included) to b.
func AppendAck(b []byte, a Ack) []byte {
	var m [AckLen]byte
	a.encode(m[:])
	return append(b, m[:]...)
}

func (a Ack) encode(b []byte) {
	putHead(b, TypeAck)
	binary.BigEndian.PutUint64(b[8:], a.Addr)
	binary.BigEndian.PutUint32(b[16:], a.RKey)
	binary.BigEndian.PutUint32(b[20:], a.Length)
	binary.BigEndian.PutUint32(b[24:], a.Phase)
	binary.BigEndian.PutUint32(b[28:], TailFlag)
}

// ParseAck decodes an ENLARGE_ACK record; ok is false unless b holds a
// complete one (head flag, tail flag). Range checks against a configuration
// are the caller's.
func ParseAck(b []byte) (a Ack, ok bool) {
	if len(b) < AckLen || !headOK(b, TypeAck) || binary.BigEndian.Uint32(b[28:]) != TailFlag {
		return Ack{}, false
	}
	return Ack{
		Addr:   binary.BigEndian.Uint64(b[8:]),
		RKey:   binary.BigEndian.Uint32(b[16:]),
		Length: binary.BigEndian.Uint32(b[20:]),
		Phase:  binary.BigEndian.Uint32(b[24:]),
	}, true
}

// DescribeControl describes an enlargement control message found at the
// start of a packet payload, e.g.
//
//	ENLARGE_REQ phase=1 size=1000
//	ENLARGE_ACK addr=0x10000 rkey=0x1234 len=8192 phase=1
//
// ok is false when payload does not start with a control message. A payload
// that has the magic and the ACK type but no tail flag is described as
// "ENLARGE_ACK (incomplete: no tail)". It is meant for capture's payload
// describer hook (xdproce dump).
func DescribeControl(payload []byte) (string, bool) {
	if len(payload) < 8 || binary.BigEndian.Uint32(payload) != Magic {
		return "", false
	}
	switch Type(payload[4]) {
	case TypeReq:
		if len(payload) < ReqLen {
			return "ENLARGE_REQ (truncated)", true
		}
		r, ok := ParseReq(payload[:ReqLen])
		if !ok {
			return "ENLARGE_REQ (malformed)", true
		}
		return "ENLARGE_REQ phase=" + strconv.FormatUint(uint64(r.Phase), 10) +
			" size=" + strconv.FormatUint(uint64(r.Size), 10), true
	case TypeAck:
		if len(payload) < AckLen {
			return "ENLARGE_ACK (truncated)", true
		}
		a, ok := ParseAck(payload)
		if !ok {
			if headOK(payload, TypeAck) {
				return "ENLARGE_ACK (incomplete: no tail)", true
			}
			return "ENLARGE_ACK (malformed)", true
		}
		return "ENLARGE_ACK addr=0x" + strconv.FormatUint(a.Addr, 16) +
			" rkey=0x" + strconv.FormatUint(uint64(a.RKey), 16) +
			" len=" + strconv.FormatUint(uint64(a.Length), 10) +
			" phase=" + strconv.FormatUint(uint64(a.Phase), 10), true
	case TypeCredit:
		if len(payload) < CreditLen || !headOK(payload, TypeCredit) {
			return "ENLARGE_CREDIT (malformed)", true
		}
		return "ENLARGE_CREDIT phase=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(payload[8:])), 10) +
			" consumed=" + strconv.FormatUint(uint64(binary.BigEndian.Uint32(payload[12:])), 10), true
	}
	return "ENLARGE control type " + strconv.Itoa(int(payload[4])), true
}

// Every message between the ends is an RDMA WRITE_WITH_IMM; the immediate
// data says what it is (top three bits) and, for ring messages, its length:
//
//	data, more, REQ: kind | length (29 bits)
//	ACK:             kind | phase
//	CREDIT:          kind | phase (8 bits) << 21 | messages consumed mod 2^21
const (
	immKindShift        = 29
	immLenMask          = 1<<immKindShift - 1
	immData      uint32 = 0 // a whole message, or the last piece of one
	immMore      uint32 = 1 // a piece; more of the same message follows
	immReq       uint32 = 2 // ENLARGE_REQ in a ring slot
	immAck       uint32 = 3 // ENLARGE_ACK in the mailbox
	immCredit    uint32 = 4 // ENLARGE_CREDIT in the mailbox
	creditMask          = 1<<21 - 1
)

func makeImm(kind uint32, n int) uint32 { return kind<<immKindShift | uint32(n)&immLenMask }

func creditImm(phase int, consumed uint32) uint32 {
	return immCredit<<immKindShift | uint32(phase&0xFF)<<21 | consumed&creditMask
}

func (c credit) encode(b []byte) {
	putHead(b, TypeCredit)
	binary.BigEndian.PutUint32(b[8:], c.phase)
	binary.BigEndian.PutUint32(b[12:], c.consumed)
}

type credit struct{ phase, consumed uint32 }
