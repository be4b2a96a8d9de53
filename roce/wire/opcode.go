package wire

import "strconv"

// Opcode is the BTH opcode (IBA Vol 1, 9.2; RoCEv2 annex
// A17 for CNP). The top three bits select the transport (000 RC, 001 UC,
// 011 UD, 100 CNP, 110 manufacturer specific: xdproce's OOO mode), the low
// five the operation.
type Opcode uint8

// Opcodes this package knows. UC opcodes are the RC ones | 0x20 (SEND and
// RDMA WRITE only); UD has SEND_ONLY and SEND_ONLY_WITH_IMMEDIATE.
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0A
	RCWriteOnlyImm       Opcode = 0x0B
	RCReadRequest        Opcode = 0x0C
	RCReadResponseFirst  Opcode = 0x0D
	RCReadResponseMiddle Opcode = 0x0E
	RCReadResponseLast   Opcode = 0x0F
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17

	UCSendFirst     Opcode = 0x20
	UCSendMiddle    Opcode = 0x21
	UCSendLast      Opcode = 0x22
	UCSendLastImm   Opcode = 0x23
	UCSendOnly      Opcode = 0x24
	UCSendOnlyImm   Opcode = 0x25
	UCWriteFirst    Opcode = 0x26
	UCWriteMiddle   Opcode = 0x27
	UCWriteLast     Opcode = 0x28
	UCWriteLastImm  Opcode = 0x29
	UCWriteOnly     Opcode = 0x2A
	UCWriteOnlyImm  Opcode = 0x2B
	UDSendOnly      Opcode = 0x64
	UDSendOnlyImm   Opcode = 0x65
	CNP             Opcode = 0x81 // congestion notification packet: BTH + 16 reserved bytes
	opcodeTransport        = 0xE0
)

// The OOO opcodes (docs/ooo-wire.md) are xdproce's own, in the IBTA
// manufacturer-specific range 0xC0..0xDF. Decode refuses them unless asked
// (AcceptOOO): a device that did not negotiate OOO mode treats them as any
// other unknown opcode.
const (
	OOOWrite      Opcode = 0xC0 // RETH (this packet's VA and length) + XRH, payload
	OOOReadReq    Opcode = 0xC1 // RETH (source VA, total) + XRH + XRR
	OOOCompletion Opcode = 0xC2 // XRH + XCS, no payload
	OOO3PReadReq  Opcode = 0xC3 // as OOOReadReq + XTP target + XTP controller
	OOO3PWrite    Opcode = 0xC4 // as OOOWrite + XTP controller
	// Half-RDMA / half-FIFO (docs/ooo-wire.md): one side addresses memory,
	// the other's data goes through its receive queue.
	OOOFIFOSend        Opcode = 0xC5 // XRH, payload: into the receiver's receive queue, not its memory
	OOOReadReqToFIFO   Opcode = 0xC6 // RETH (source VA, total) + XRH: the response comes as OOOFIFOSend
	OOOReadReqFromFIFO Opcode = 0xC7 // XRH + XRR: into the source's receive queue; its user answers
)

// SRSack is xdproce's selective-repeat acknowledgement (docs/sr-wire.md),
// in the manufacturer-specific range 0xE0..0xFF: BTH + AETH + a bitmap of
// 32 to 256 bytes (a multiple of 32) of the PSNs the responder holds past
// the first missing one (the BTH PSN). Decode refuses it unless asked (AcceptSR): only a queue pair
// that negotiated selective repeat sends or reads it.
const SRSack Opcode = 0xE0

// SACKLen is the length of the shortest SR_SACK bitmap (its payload) and
// the step of its length, SACKMaxLen the longest: bit i (byte i/8, bit i%8
// from the least significant) says the PSN BTH.PSN+1+i was received. A
// responder sends the shortest bitmap that covers what it holds, so a
// peer whose window is at most 256 PSNs only ever sees 32 bytes.
const (
	SACKLen    = 32
	SACKMaxLen = 256
)

// Transport is the service an opcode belongs to.
type Transport uint8

// Transports. The zero value is invalid.
const (
	RC Transport = iota + 1
	UC
	UD
	CNPTransport
	OOO // manufacturer-specific opcodes 0xC0..0xDF: out-of-order RDMA over datagrams
	SR  // manufacturer-specific opcodes 0xE0..: selective repeat on RC queue pairs
)

var transportNames = [...]string{"Transport(0)", "RC", "UC", "UD", "CNP", "OOO", "SR"}

func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// Position is the place of a packet in its message.
type Position uint8

// Positions. The zero value is invalid.
const (
	PosOnly Position = iota + 1
	PosFirst
	PosMiddle
	PosLast
)

var positionNames = [...]string{"Position(0)", "ONLY", "FIRST", "MIDDLE", "LAST"}

func (p Position) String() string {
	if int(p) < len(positionNames) {
		return positionNames[p]
	}
	return "Position(" + strconv.Itoa(int(p)) + ")"
}

// Kind is the operation of an opcode.
type Kind uint8

// Kinds. The zero value is invalid.
const (
	KindSend Kind = iota + 1
	KindWrite
	KindReadRequest
	KindReadResponse
	KindAck
	KindAtomicAck
	KindCompareSwap
	KindFetchAdd
	KindCNP
	KindCompletion // OOO_COMPLETION: the proof that an OOO operation was placed whole
)

var kindNames = [...]string{"Kind(0)", "SEND", "RDMA_WRITE", "RDMA_READ_REQUEST", "RDMA_READ_RESPONSE",
	"ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD", "CNP", "COMPLETION"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Headers is the set of extension headers an opcode carries after the BTH.
// On the wire they appear in the order DETH, RETH|AtomicETH, AETH,
// AtomicAckETH, ImmDt|IETH (IBA Vol 1, 9.3 "Extended transport headers");
// the OOO headers, which only the OOO opcodes carry, follow the RETH in the
// order XRH, XRR|XCS, XTP target, XTP controller.
type Headers uint16

// Extension header bits.
const (
	HasRETH Headers = 1 << iota
	HasAETH
	HasAtomicETH
	HasAtomicAckETH
	HasImmDt
	HasIETH
	HasDETH
	HasXRH           // OOO request header: contexts, transaction id, total, notify, segment, tag
	HasXRR           // OOO READ return address: the sink's VA and rkey
	HasXCS           // OOO completion status
	HasXTPTarget     // OOO third party: the data sink (GID, QPN, context)
	HasXTPController // OOO third party: the controller that gets the completion
)

// oooHeaders are the headers only OOO opcodes carry.
const oooHeaders = HasXRH | HasXRR | HasXCS | HasXTPTarget | HasXTPController

var headerNames = [...]string{"RETH", "AETH", "AtomicETH", "AtomicAckETH", "ImmDt", "IETH", "DETH",
	"XRH", "XRR", "XCS", "XTPTarget", "XTPController"}

// String lists the headers in bit order, joined by "|", or "none".
func (h Headers) String() string {
	if h == 0 {
		return "none"
	}
	s := ""
	for i, n := range headerNames {
		if h&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if h>>len(headerNames) != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(h>>len(headerNames)<<len(headerNames)), 16)
	}
	return s
}

// headerLens are the lengths of the headers, in bit order.
var headerLens = [...]int{RETHLen, AETHLen, AtomicETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, DETHLen,
	XRHLen, XRRLen, XCSLen, XTPLen, XTPLen}

// Len is the number of bytes the headers take on the wire.
func (h Headers) Len() int {
	n := 0
	for i, l := range headerLens {
		if h&(1<<i) != 0 {
			n += l
		}
	}
	return n
}

// OpInfo is what the opcode table knows about one opcode.
type OpInfo struct {
	Name      string // "RC_SEND_ONLY" (the IB_OPCODE_* names of Linux include/rdma/ib_pack.h)
	Transport Transport
	Kind      Kind
	Pos       Position
	Headers   Headers
	Payload   bool // the packet may carry payload (for CNP: exactly 16 reserved bytes, see Packet)
	Request   bool // sent by a requester (SEND/WRITE/READ request/atomic); false for responses/ACKs/CNP
	HdrLen    int  // BTH + extension headers, bytes
}

func op(name string, t Transport, k Kind, p Position, h Headers, payload, req bool) OpInfo {
	return OpInfo{Name: name, Transport: t, Kind: k, Pos: p, Headers: h, Payload: payload, Request: req,
		HdrLen: BTHLen + h.Len()}
}

// opTable is the one opcode table. An entry with an empty Name is unknown.
var opTable = [256]OpInfo{
	RCSendFirst:          op("RC_SEND_FIRST", RC, KindSend, PosFirst, 0, true, true),
	RCSendMiddle:         op("RC_SEND_MIDDLE", RC, KindSend, PosMiddle, 0, true, true),
	RCSendLast:           op("RC_SEND_LAST", RC, KindSend, PosLast, 0, true, true),
	RCSendLastImm:        op("RC_SEND_LAST_WITH_IMMEDIATE", RC, KindSend, PosLast, HasImmDt, true, true),
	RCSendOnly:           op("RC_SEND_ONLY", RC, KindSend, PosOnly, 0, true, true),
	RCSendOnlyImm:        op("RC_SEND_ONLY_WITH_IMMEDIATE", RC, KindSend, PosOnly, HasImmDt, true, true),
	RCWriteFirst:         op("RC_RDMA_WRITE_FIRST", RC, KindWrite, PosFirst, HasRETH, true, true),
	RCWriteMiddle:        op("RC_RDMA_WRITE_MIDDLE", RC, KindWrite, PosMiddle, 0, true, true),
	RCWriteLast:          op("RC_RDMA_WRITE_LAST", RC, KindWrite, PosLast, 0, true, true),
	RCWriteLastImm:       op("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", RC, KindWrite, PosLast, HasImmDt, true, true),
	RCWriteOnly:          op("RC_RDMA_WRITE_ONLY", RC, KindWrite, PosOnly, HasRETH, true, true),
	RCWriteOnlyImm:       op("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", RC, KindWrite, PosOnly, HasRETH|HasImmDt, true, true),
	RCReadRequest:        op("RC_RDMA_READ_REQUEST", RC, KindReadRequest, PosOnly, HasRETH, false, true),
	RCReadResponseFirst:  op("RC_RDMA_READ_RESPONSE_FIRST", RC, KindReadResponse, PosFirst, HasAETH, true, false),
	RCReadResponseMiddle: op("RC_RDMA_READ_RESPONSE_MIDDLE", RC, KindReadResponse, PosMiddle, 0, true, false),
	RCReadResponseLast:   op("RC_RDMA_READ_RESPONSE_LAST", RC, KindReadResponse, PosLast, HasAETH, true, false),
	RCReadResponseOnly:   op("RC_RDMA_READ_RESPONSE_ONLY", RC, KindReadResponse, PosOnly, HasAETH, true, false),
	RCAck:                op("RC_ACKNOWLEDGE", RC, KindAck, PosOnly, HasAETH, false, false),
	RCAtomicAck:          op("RC_ATOMIC_ACKNOWLEDGE", RC, KindAtomicAck, PosOnly, HasAETH|HasAtomicAckETH, false, false),
	RCCompareSwap:        op("RC_COMPARE_SWAP", RC, KindCompareSwap, PosOnly, HasAtomicETH, false, true),
	RCFetchAdd:           op("RC_FETCH_ADD", RC, KindFetchAdd, PosOnly, HasAtomicETH, false, true),
	RCSendLastInv:        op("RC_SEND_LAST_WITH_INVALIDATE", RC, KindSend, PosLast, HasIETH, true, true),
	RCSendOnlyInv:        op("RC_SEND_ONLY_WITH_INVALIDATE", RC, KindSend, PosOnly, HasIETH, true, true),

	UCSendFirst:    op("UC_SEND_FIRST", UC, KindSend, PosFirst, 0, true, true),
	UCSendMiddle:   op("UC_SEND_MIDDLE", UC, KindSend, PosMiddle, 0, true, true),
	UCSendLast:     op("UC_SEND_LAST", UC, KindSend, PosLast, 0, true, true),
	UCSendLastImm:  op("UC_SEND_LAST_WITH_IMMEDIATE", UC, KindSend, PosLast, HasImmDt, true, true),
	UCSendOnly:     op("UC_SEND_ONLY", UC, KindSend, PosOnly, 0, true, true),
	UCSendOnlyImm:  op("UC_SEND_ONLY_WITH_IMMEDIATE", UC, KindSend, PosOnly, HasImmDt, true, true),
	UCWriteFirst:   op("UC_RDMA_WRITE_FIRST", UC, KindWrite, PosFirst, HasRETH, true, true),
	UCWriteMiddle:  op("UC_RDMA_WRITE_MIDDLE", UC, KindWrite, PosMiddle, 0, true, true),
	UCWriteLast:    op("UC_RDMA_WRITE_LAST", UC, KindWrite, PosLast, 0, true, true),
	UCWriteLastImm: op("UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", UC, KindWrite, PosLast, HasImmDt, true, true),
	UCWriteOnly:    op("UC_RDMA_WRITE_ONLY", UC, KindWrite, PosOnly, HasRETH, true, true),
	UCWriteOnlyImm: op("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", UC, KindWrite, PosOnly, HasRETH|HasImmDt, true, true),

	UDSendOnly:    op("UD_SEND_ONLY", UD, KindSend, PosOnly, HasDETH, true, true),
	UDSendOnlyImm: op("UD_SEND_ONLY_WITH_IMMEDIATE", UD, KindSend, PosOnly, HasDETH|HasImmDt, true, true),

	CNP: op("CNP", CNPTransport, KindCNP, PosOnly, 0, true, false),

	OOOWrite:      op("OOO_WRITE", OOO, KindWrite, PosOnly, HasRETH|HasXRH, true, true),
	OOOReadReq:    op("OOO_READ_REQ", OOO, KindReadRequest, PosOnly, HasRETH|HasXRH|HasXRR, false, true),
	OOOCompletion: op("OOO_COMPLETION", OOO, KindCompletion, PosOnly, HasXRH|HasXCS, false, false),
	OOO3PReadReq: op("OOO_3P_READ_REQ", OOO, KindReadRequest, PosOnly,
		HasRETH|HasXRH|HasXRR|HasXTPTarget|HasXTPController, false, true),
	OOO3PWrite: op("OOO_3P_WRITE", OOO, KindWrite, PosOnly, HasRETH|HasXRH|HasXTPController, true, true),

	OOOFIFOSend:        op("OOO_FIFO_SEND", OOO, KindSend, PosOnly, HasXRH, true, true),
	OOOReadReqToFIFO:   op("OOO_READ_REQ_TO_FIFO", OOO, KindReadRequest, PosOnly, HasRETH|HasXRH, false, true),
	OOOReadReqFromFIFO: op("OOO_READ_REQ_FROM_FIFO", OOO, KindReadRequest, PosOnly, HasXRH|HasXRR, false, true),

	SRSack: op("SR_SACK", SR, KindAck, PosOnly, HasAETH, true, false),
}

// Info returns the table entry of o; ok is false for opcodes this package
// does not know (RD, reserved, the IBA 1.5 FLUSH/ATOMIC_WRITE, other
// manufacturer-specific opcodes, ...). The OOO opcodes are known here,
// though Decode refuses them unless asked (AcceptOOO).
func (o Opcode) Info() (OpInfo, bool) {
	i := &opTable[o]
	return *i, i.Name != ""
}

// Known reports whether o is in the opcode table.
func (o Opcode) Known() bool { return opTable[o].Name != "" }

// String returns the opcode name ("RC_SEND_ONLY"), or "Opcode(0x15)" for an
// unknown opcode.
func (o Opcode) String() string {
	if n := opTable[o].Name; n != "" {
		return n
	}
	const hex = "0123456789abcdef"
	return "Opcode(0x" + string([]byte{hex[o>>4], hex[o&0xF]}) + ")"
}

// Opcodes returns every known opcode in ascending order.
func Opcodes() []Opcode {
	var out []Opcode
	for i := range opTable {
		if opTable[i].Name != "" {
			out = append(out, Opcode(i))
		}
	}
	return out
}

// payloadRule checks the payload length n (without pad) against the rules of
// the opcode: none for ACKs, READ requests and atomics; exactly one path MTU
// (256, 512, 1024, 2048 or 4096 bytes) for FIRST and MIDDLE; 1..4096 for LAST;
// 0..4096 for ONLY (IBA Vol 1, chapter 9); exactly 16 for CNP
// (RoCEv2, annex A17).
func payloadRule(info *OpInfo, n int) (code int) {
	switch {
	case info.Kind == KindCNP:
		if n != cnpReservedLen {
			return ruleCNP
		}
	case info.Transport == SR:
		if n < SACKLen || n > SACKMaxLen || n%SACKLen != 0 {
			return ruleSACK
		}
	case !info.Payload:
		if n != 0 {
			return ruleNone
		}
	case n > MaxPayload:
		return ruleLong
	case info.Pos == PosFirst || info.Pos == PosMiddle:
		if n < 256 || n&(n-1) != 0 {
			return ruleFull
		}
	case info.Pos == PosLast:
		if n == 0 {
			return ruleEmpty
		}
	}
	return ruleOK
}

const (
	ruleOK = iota
	ruleNone
	ruleFull
	ruleEmpty
	ruleLong
	ruleCNP
	ruleSACK
)

// MaxPayload is the largest payload of one packet (the 4096-byte IB MTU).
const MaxPayload = 4096

const cnpReservedLen = 16
