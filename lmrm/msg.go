package lmrm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// The wire format. Control messages are RC SENDs on the queue pair that
// also carries the data; each starts with an 8-byte header (big-endian, as
// the transport headers):
//
//	 0       4      5      6
//	| "XDLM" | kind | pool | n (u16) |
//
// followed by the kind's body:
//
//	LMRM_ALLOC      bytes u64, min slot u32, 4 zero bytes            (24 B)
//	LMRM_ALLOC_ACK  addr u64, rkey u32, slot size u32, count u32,
//	                status u32                                         (32 B)
//	LMRM_RELEASE    n × slot index u32                                 (8+4n B)
//	LMRM_REVOKE     nothing                                            (8 B)
//
// n is zero except in LMRM_RELEASE. pool is zero in LMRM_ALLOC. Data goes as
// RDMA WRITE WITH IMMEDIATE into the slot; the immediate is
// kind(4) ‖ pool(8) ‖ slot(20) with kind ImmData, and the length is the
// receive completion's byte count.

// Magic opens every control message.
const Magic = "XDLM"

// HeaderLen is the length of the control-message header.
const HeaderLen = 8

// Kind is a control message's kind.
type Kind uint8

// The control messages.
const (
	KAlloc    Kind = iota + 1 // requester → provider: please grant memory
	KAllocAck                 // provider → requester: the pool's memory range (or a refusal)
	KRelease                  // provider → requester: these slots are consumed, reuse them
	KRevoke                   // provider → requester: the pool is withdrawn
)

var kindNames = [...]string{KAlloc: "LMRM_ALLOC", KAllocAck: "LMRM_ALLOC_ACK", KRelease: "LMRM_RELEASE", KRevoke: "LMRM_REVOKE"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("LMRM_%d", uint8(k))
}

// Lengths of the fixed-size messages, and the limits of the format.
const (
	allocLen = HeaderLen + 16
	ackLen   = HeaderLen + 24
	// MaxRelease is the most slots one LMRM_RELEASE lists (808 bytes: one
	// packet at MTU 1024).
	MaxRelease = 200
	// MaxMsg is the longest control message.
	MaxMsg = HeaderLen + 4*MaxRelease
	// MaxSlots is the most slots a pool has (the immediate's 20 bits).
	MaxSlots = 1 << 20
)

// Ack statuses.
const (
	AckOK      = 0 // the range is granted
	AckRefused = 1 // the provider will not grant that much (limit or registration failure)
)

// Msg is a decoded control message.
type Msg struct {
	Kind     Kind
	Pool     uint8
	Bytes    uint64   // ALLOC: the amount asked for
	MinSlot  uint32   // ALLOC: the smallest slot the requester accepts
	Addr     uint64   // ALLOC_ACK: the first slot's address
	RKey     uint32   // ALLOC_ACK
	SlotSize uint32   // ALLOC_ACK
	Count    uint32   // ALLOC_ACK: slots in the range
	Status   uint32   // ALLOC_ACK: AckOK or AckRefused
	Slots    []uint32 // RELEASE: the consumed slots
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("malformed control message")

// Decode parses b into m, reusing m.Slots' storage.
func Decode(b []byte, m *Msg) error {
	if len(b) < HeaderLen || string(b[:4]) != Magic {
		return fmt.Errorf("%w: no %s header in %d bytes", ErrMalformed, Magic, len(b))
	}
	k, n := Kind(b[4]), int(binary.BigEndian.Uint16(b[6:]))
	*m = Msg{Kind: k, Pool: b[5], Slots: m.Slots[:0]}
	want := 0
	switch k {
	case KAlloc:
		want = allocLen
	case KAllocAck:
		want = ackLen
	case KRelease:
		if n == 0 || n > MaxRelease {
			return fmt.Errorf("%w: %v lists %d slots (1..%d)", ErrMalformed, k, n, MaxRelease)
		}
		want = HeaderLen + 4*n
	case KRevoke:
		want = HeaderLen
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrMalformed, b[4])
	}
	if k != KRelease && n != 0 {
		return fmt.Errorf("%w: %v with count field %d", ErrMalformed, k, n)
	}
	if len(b) != want {
		return fmt.Errorf("%w: %v of %d bytes, want %d", ErrMalformed, k, len(b), want)
	}
	p := b[HeaderLen:]
	switch k {
	case KAlloc:
		m.Bytes, m.MinSlot = binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		if binary.BigEndian.Uint32(p[12:]) != 0 {
			return fmt.Errorf("%w: %v with nonzero padding", ErrMalformed, k)
		}
	case KAllocAck:
		m.Addr, m.RKey = binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		m.SlotSize, m.Count, m.Status = binary.BigEndian.Uint32(p[12:]), binary.BigEndian.Uint32(p[16:]), binary.BigEndian.Uint32(p[20:])
	case KRelease:
		for i := range n {
			m.Slots = append(m.Slots, binary.BigEndian.Uint32(p[4*i:]))
		}
	}
	return nil
}

// Append appends m's encoding to b. It panics on a RELEASE of more than
// MaxRelease slots (the callers bound their batches).
func Append(b []byte, m *Msg) []byte {
	n := 0
	if m.Kind == KRelease {
		if len(m.Slots) > MaxRelease {
			panic("lmrm: release of more than MaxRelease slots")
		}
		n = len(m.Slots)
	}
	b = append(b, Magic...)
	b = append(b, byte(m.Kind), m.Pool)
	b = binary.BigEndian.AppendUint16(b, uint16(n))
	switch m.Kind {
	case KAlloc:
		b = binary.BigEndian.AppendUint64(b, m.Bytes)
		b = binary.BigEndian.AppendUint32(b, m.MinSlot)
		b = binary.BigEndian.AppendUint32(b, 0)
	case KAllocAck:
		b = binary.BigEndian.AppendUint64(b, m.Addr)
		for _, v := range []uint32{m.RKey, m.SlotSize, m.Count, m.Status} {
			b = binary.BigEndian.AppendUint32(b, v)
		}
	case KRelease:
		for _, s := range m.Slots {
			b = binary.BigEndian.AppendUint32(b, s)
		}
	}
	return b
}

// String formats m as dump prints it.
func (m *Msg) String() string {
	switch m.Kind {
	case KAlloc:
		return fmt.Sprintf("%v bytes=%d min_slot=%d", m.Kind, m.Bytes, m.MinSlot)
	case KAllocAck:
		st := "ok"
		if m.Status != AckOK {
			st = fmt.Sprintf("refused(%d)", m.Status)
		}
		return fmt.Sprintf("%v pool=%d addr=%#x rkey=%#x slot=%d count=%d %s", m.Kind, m.Pool, m.Addr, m.RKey, m.SlotSize, m.Count, st)
	case KRelease:
		var sb strings.Builder
		fmt.Fprintf(&sb, "%v pool=%d n=%d slots=", m.Kind, m.Pool, len(m.Slots))
		for i, s := range m.Slots {
			if i == 8 {
				sb.WriteString(",…")
				break
			}
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%d", s)
		}
		return sb.String()
	}
	return fmt.Sprintf("%v pool=%d", m.Kind, m.Pool)
}

// ImmData is the kind field of a data write's immediate.
const ImmData = 1

// Imm is the immediate of a data write into slot of pool.
func Imm(pool uint8, slot uint32) uint32 { return ImmData<<28 | uint32(pool)<<20 | slot&(MaxSlots-1) }

// ParseImm splits a data write's immediate; ok is false when its kind is
// not ImmData.
func ParseImm(imm uint32) (pool uint8, slot uint32, ok bool) {
	return uint8(imm >> 20), imm & (MaxSlots - 1), imm>>28 == ImmData
}
