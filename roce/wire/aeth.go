package wire

import (
	"encoding/binary"
	"strconv"
)

// AETH is the ACK Extended Transport Header (IBA Vol 1, 9.3.5), 4 bytes,
// carried by ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and the READ responses FIRST,
// LAST and ONLY:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|R| T |  Value  |       Message Sequence Number (24 bits)       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The syndrome byte (IBA Vol 1, 9.3.5): R reserved, T the type (00 ACK,
// 01 RNR NAK, 11 NAK), Value the credit count (ACK; 0x1F = unlimited), the
// RNR timer code (RNR NAK) or the NAK code.
type AETH struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// SyndromeType is the type field of an AETH syndrome (bits 6..5; bit 7 is
// reserved and kept, so a set bit 7 gives a type above 3).
type SyndromeType uint8

// Syndrome types.
const (
	SyndromeACK      SyndromeType = 0
	SyndromeRNR      SyndromeType = 1 // RNR NAK
	SyndromeReserved SyndromeType = 2
	SyndromeNAK      SyndromeType = 3
)

func (t SyndromeType) String() string {
	switch t {
	case SyndromeACK:
		return "ACK"
	case SyndromeRNR:
		return "RNR_NAK"
	case SyndromeNAK:
		return "NAK"
	}
	return "SyndromeType(" + strconv.Itoa(int(t)) + ")"
}

// Full NAK syndromes (type 11 | code).
const (
	NAKPSNSeqErr        = 0x60 // PSN sequence error: resend from the PSN of the NAK
	NAKInvalidRequest   = 0x61
	NAKRemoteAccess     = 0x62
	NAKRemoteOp         = 0x63 // remote operational error
	NAKInvalidRDRequest = 0x64
)

// UnlimitedCredits is the credit code of an ACK that does not limit the
// requester (what rxe sends: syndrome 0x1F).
const UnlimitedCredits = 0x1F

// ACKSyndrome returns the syndrome of an ACK carrying the credit code
// (0..30, or UnlimitedCredits).
func ACKSyndrome(credits uint8) uint8 { return credits & 0x1F }

// RNRSyndrome returns the syndrome of an RNR NAK carrying the RNR timer code
// (0..31, see ROCEV2.md; rxe sends 12 = 0.64 ms as 0x2C).
func RNRSyndrome(timer uint8) uint8 { return 0x20 | timer&0x1F }

// Type returns the syndrome type.
func (a AETH) Type() SyndromeType { return SyndromeType(a.Syndrome >> 5) }

// Credits returns the credit code of an ACK (0x1F = unlimited).
func (a AETH) Credits() uint8 { return a.Syndrome & 0x1F }

// RNRTimer returns the RNR timer code of an RNR NAK.
func (a AETH) RNRTimer() uint8 { return a.Syndrome & 0x1F }

// NAKCode returns the NAK code (0 PSN sequence error, 1 invalid request,
// 2 remote access, 3 remote operational, 4 invalid RD request).
func (a AETH) NAKCode() uint8 { return a.Syndrome & 0x1F }

// String describes the AETH: "ACK credits=31 msn=5", "RNR_NAK timer=12 msn=0",
// "NAK REMOTE_ACCESS_ERROR msn=3".
func (a AETH) String() string {
	msn := " msn=" + strconv.FormatUint(uint64(a.MSN), 10)
	switch a.Type() {
	case SyndromeACK:
		return "ACK credits=" + strconv.Itoa(int(a.Credits())) + msn
	case SyndromeRNR:
		return "RNR_NAK timer=" + strconv.Itoa(int(a.RNRTimer())) + msn
	case SyndromeNAK:
		return "NAK " + nakName(a.NAKCode()) + msn
	}
	return "AETH syndrome=0x" + strconv.FormatUint(uint64(a.Syndrome), 16) + msn
}

func nakName(code uint8) string {
	switch code {
	case 0:
		return "PSN_SEQUENCE_ERROR"
	case 1:
		return "INVALID_REQUEST"
	case 2:
		return "REMOTE_ACCESS_ERROR"
	case 3:
		return "REMOTE_OPERATIONAL_ERROR"
	case 4:
		return "INVALID_RD_REQUEST"
	}
	return "code=" + strconv.Itoa(int(code))
}

func (a *AETH) decode(b []byte) {
	v := binary.BigEndian.Uint32(b[:AETHLen])
	a.Syndrome = uint8(v >> 24)
	a.MSN = v & PSNMask
}

func (a *AETH) encode(b []byte) {
	binary.BigEndian.PutUint32(b[:AETHLen], uint32(a.Syndrome)<<24|a.MSN&PSNMask)
}
