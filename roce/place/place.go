// Package place is the format of direct-placement messages: what an xdproce
// daemon client's engine and the daemon (the virtual RDMA component of seed
// 004) say to each other on a link/shm port to move a whole RC message
// between two clients' daemon-shared memory regions without a RoCE frame
// (docs/placement.md).
//
// A message is an Ethernet frame of EtherType EtherType (IEEE 802 local
// experimental: no RoCE stack, NIC or switch takes it, and the daemon never
// sends one to the wire) carrying a fixed 56-byte body and up to MaxSegs
// segments. A segment names bytes of a shared region by the region's
// number, an offset and a length: never an address.
//
//	kind Req  requester engine -> daemon: a message to place, the sender's segments
//	kind Ind  daemon -> responder engine: the same message, without segments
//	kind Ans  responder engine -> daemon: its verdict; with Verdict Place, its segments
//	kind Ack  daemon -> requester engine: the responder's ACK/NAK, or Fallback
//	kind Done daemon -> responder engine: the data has landed (or Failed)
//	kind Note daemon -> responder engine: the daemon placed a WRITE/READ itself (its grant); advance the PSN
//	kind Revoke responder engine -> daemon: forget the grant of DstQPN
//
// The daemon places a WRITE or READ on the first hop, without asking the
// responder (an Ind), when the responder granted it: an Ans with FlagGrant
// says the queue pair is ready to send, its peer is SrcQPN, it expects PSN+1
// next (MSN its message sequence number), its protection domain is RKey and
// its access flags Imm; the daemon then checks the request against the rkeys
// the client registered with its regions and answers the requester itself,
// telling the responder only to advance its expected PSN (Note).
//
// Decode copies every field out of the frame once and checks the lengths;
// it never trusts the frame's bytes beyond that.
package place

import (
	"encoding/binary"
	"errors"
)

// EtherType marks a placement message.
const EtherType = 0x88B5

// Sizes of a message.
const (
	ethLen  = 14
	bodyLen = 56
	segLen  = 16
	// HeaderLen is a message's length without segments.
	HeaderLen = ethLen + bodyLen
	// MaxSegs bounds the segments of one message.
	MaxSegs = 64
	// MaxLen is the longest message.
	MaxLen = HeaderLen + MaxSegs*segLen
)

// Kind is what a message is.
type Kind uint8

// The kinds of message.
const (
	KindReq Kind = iota + 1
	KindInd
	KindAns
	KindAck
	KindDone
	KindNote
	KindRevoke
)

// Op is the operation a message places.
type Op uint8

// The operations.
const (
	OpWrite Op = iota + 1
	OpWriteImm
	OpSend
	OpSendImm
	OpRead
)

// Reads reports whether the responder's memory is the source.
func (o Op) Reads() bool { return o == OpRead }

// Consumes reports whether the operation takes a receive WQE.
func (o Op) Consumes() bool { return o == OpSend || o == OpSendImm || o == OpWriteImm }

// Verdicts of an Ans and Ack message (Status).
const (
	Place    uint8 = 1 // Ans: copy between the segments, then Ack the requester and Done the responder
	Answer   uint8 = 2 // Ans: no copy; pass Syndrome/PSN/MSN to the requester (duplicate, NAK)
	Fallback uint8 = 3 // Ans, Ack: not placeable here (memory not shared): send the message as frames
	Failed   uint8 = 4 // Done: the copy could not be done (a region went)
	AETH     uint8 = 5 // Ack: Syndrome/PSN/MSN are the responder's AETH
)

// Flag bits.
const (
	FlagSolicited uint8 = 1 << 0 // the requester asked for a solicited event
	FlagDone      uint8 = 1 << 1 // Ans: the responder wants a Done
	FlagGrant     uint8 = 1 << 2 // Ans: the daemon may place WRITEs and READs of this queue pair itself
)

// Seg is a run of bytes of one shared region.
type Seg struct {
	Region uint32
	Len    uint32
	Off    uint64
}

// Msg is a decoded message. Segs aliases the Msg's own array.
type Msg struct {
	Kind     Kind
	Op       Op
	Flags    uint8
	Syndrome uint8
	Status   uint8
	Tag      uint32 // Req: unused; Ind/Ans: the daemon's number for the request
	SrcQPN   uint32 // the requester's QPN
	DstQPN   uint32 // the responder's QPN
	PSN      uint32 // Req/Ind: the first PSN; Ans/Ack: the AETH's PSN (or the refused first PSN)
	NPkts    uint32 // Req/Ind: PSNs the message takes (as its frames would)
	MSN      uint32
	Len      uint32 // message length
	RKey     uint32
	VA       uint64
	Imm      uint32
	NSegs    int
	SegsBuf  [MaxSegs]Seg
}

// Segs returns the message's segments.
func (m *Msg) Segs() []Seg { return m.SegsBuf[:m.NSegs] }

// Errors of Decode.
var (
	ErrShort = errors.New("place: message too short")
	ErrKind  = errors.New("place: not a placement message")
	ErrSegs  = errors.New("place: bad segment count")
)

// Is reports whether frame is a placement message (its EtherType).
func Is(frame []byte) bool {
	return len(frame) >= ethLen && binary.BigEndian.Uint16(frame[12:14]) == EtherType
}

// Encode writes m into b (at least HeaderLen+16*NSegs bytes, zero MACs) and
// returns the frame's length, 0 when b is too short or NSegs out of range.
func Encode(b []byte, m *Msg) int {
	n := HeaderLen + m.NSegs*segLen
	if m.NSegs < 0 || m.NSegs > MaxSegs || len(b) < n {
		return 0
	}
	le := binary.LittleEndian
	clear(b[:12])
	binary.BigEndian.PutUint16(b[12:], EtherType)
	x := b[ethLen:]
	x[0], x[1], x[2], x[3] = byte(m.Kind), byte(m.Op), m.Flags, m.Syndrome
	le.PutUint16(x[4:], uint16(m.NSegs))
	x[6], x[7] = m.Status, 0
	le.PutUint32(x[8:], m.Tag)
	le.PutUint32(x[12:], m.SrcQPN)
	le.PutUint32(x[16:], m.DstQPN)
	le.PutUint32(x[20:], m.PSN)
	le.PutUint32(x[24:], m.NPkts)
	le.PutUint32(x[28:], m.MSN)
	le.PutUint32(x[32:], m.Len)
	le.PutUint32(x[36:], m.RKey)
	le.PutUint64(x[40:], m.VA)
	le.PutUint32(x[48:], m.Imm)
	le.PutUint32(x[52:], 0)
	for i, s := range m.SegsBuf[:m.NSegs] {
		y := x[bodyLen+i*segLen:]
		le.PutUint32(y[0:], s.Region)
		le.PutUint32(y[4:], s.Len)
		le.PutUint64(y[8:], s.Off)
	}
	return n
}

// Decode reads frame into m. Every byte is read once; a frame shorter than
// its segment count says, or naming more than MaxSegs, or of an unknown
// kind, is refused. Field values are the caller's to check.
func Decode(frame []byte, m *Msg) error {
	if !Is(frame) {
		return ErrKind
	}
	if len(frame) < HeaderLen {
		return ErrShort
	}
	le := binary.LittleEndian
	x := frame[ethLen:]
	m.Kind, m.Op, m.Flags, m.Syndrome = Kind(x[0]), Op(x[1]), x[2], x[3]
	if m.Kind < KindReq || m.Kind > KindRevoke {
		return ErrKind
	}
	n := int(le.Uint16(x[4:]))
	if n > MaxSegs {
		return ErrSegs
	}
	if len(x) < bodyLen+n*segLen {
		return ErrShort
	}
	m.NSegs = n
	m.Status = x[6]
	m.Tag = le.Uint32(x[8:])
	m.SrcQPN = le.Uint32(x[12:]) & 0xFFFFFF
	m.DstQPN = le.Uint32(x[16:]) & 0xFFFFFF
	m.PSN = le.Uint32(x[20:]) & 0xFFFFFF
	m.NPkts = le.Uint32(x[24:])
	m.MSN = le.Uint32(x[28:]) & 0xFFFFFF
	m.Len = le.Uint32(x[32:])
	m.RKey = le.Uint32(x[36:])
	m.VA = le.Uint64(x[40:])
	m.Imm = le.Uint32(x[48:])
	for i := range n {
		y := x[bodyLen+i*segLen:]
		m.SegsBuf[i] = Seg{Region: le.Uint32(y[0:]), Len: le.Uint32(y[4:]), Off: le.Uint64(y[8:])}
	}
	return nil
}

// Total is the sum of the segments' lengths.
func Total(segs []Seg) uint64 {
	var t uint64
	for _, s := range segs {
		t += uint64(s.Len)
	}
	return t
}
