package qp

import (
	"net/netip"
	"strconv"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// Type is the transport service of a queue pair. The zero value is invalid.
type Type uint8

// Queue pair types.
const (
	RC Type = iota + 1 // reliable connection
	UC                 // unreliable connection
	UD                 // unreliable datagram
	// OOO is xdproce's out-of-order RDMA over datagrams (docs/ooo.md):
	// connected like UC, its packets placed in any order by context and
	// transaction id, never retransmitted.
	OOO
)

var typeNames = [...]string{"Type(0)", "RC", "UC", "UD", "OOO"}

func (t Type) String() string { return enumName(typeNames[:], int(t), "Type") }

// State is the state of a queue pair (IBA 10.3). The zero value is invalid.
type State uint8

// Queue pair states.
const (
	Reset State = iota + 1
	Init
	RTR // ready to receive
	RTS // ready to send
	Error
)

var stateNames = [...]string{"State(0)", "RESET", "INIT", "RTR", "RTS", "ERR"}

func (s State) String() string { return enumName(stateNames[:], int(s), "State") }

// AttrMask selects the fields of an Attr that Modify applies (IBV_QP_*).
type AttrMask uint32

// Attribute mask bits.
const (
	AttrState AttrMask = 1 << iota
	AttrAccessFlags
	AttrQKey
	AttrAV
	AttrPathMTU
	AttrTimeout
	AttrRetryCnt
	AttrRNRRetry
	AttrRQPSN
	AttrMaxRdAtomic
	AttrMinRNRTimer
	AttrSQPSN
	AttrMaxDestRdAtomic
	AttrDestQPN
	// AttrSelectiveRepeat: RC only, at INIT→RTR. Set only when both ends
	// agreed on it (docs/sr-wire.md): a standard peer drops SR_SACK.
	AttrSelectiveRepeat
	// AttrDCQCN: RC only, at INIT→RTR. Set only when both ends agreed on
	// it (docs/cc.md): the queue pair answers CE-marked frames with CNPs
	// and paces its requests by DCQCN.
	AttrDCQCN
	// AttrSendWindow: RC only, at RTR→RTS. Caps the send window below
	// Config.SendWindow (IRN's bandwidth-delay-product cap: ConnectOptions.BDP).
	AttrSendWindow
)

var attrNames = [...]string{"STATE", "ACCESS_FLAGS", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT",
	"RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "DEST_QPN",
	"SELECTIVE_REPEAT", "DCQCN", "SEND_WINDOW"}

func (m AttrMask) String() string {
	if m == 0 {
		return "0"
	}
	s := ""
	for i, n := range attrNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := m &^ (1<<len(attrNames) - 1); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + strconv.FormatUint(uint64(rest), 16)
	}
	return s
}

// An AddressVector says where a queue pair's frames go (ibv_ah_attr plus the
// Ethernet addresses the device resolved).
type AddressVector struct {
	SrcMAC, DstMAC [6]byte
	SrcIP, DstIP   netip.Addr // both IPv4 (or IPv4-mapped) or both IPv6
	TOS, TTL       uint8      // TTL 0 means 64
	FlowLabel      uint32     // IPv6 only
	// SrcPort is the UDP source port; 0 derives it as rxe does: from
	// FlowLabel when that is set (wire.SourcePortFromFlowLabel), else from
	// the QPNs (wire.SourcePort for RC/UC, wire.UDSourcePort for UD). The
	// device sets it when its link forces one (link.Props.SrcPort).
	SrcPort uint16
	VLAN    uint16 // 802.1Q TCI; 0 for none
}

// Attr holds queue pair attributes (ibv_qp_attr); Modify applies the fields
// its mask selects.
type Attr struct {
	State           State
	PathMTU         wire.MTU
	DestQPN         uint32    // 24 bits
	RQPSN, SQPSN    uint32    // 24 bits
	Timeout         uint8     // local ACK timeout 4.096 µs × 2^Timeout; 0 = infinite; 0..31
	RetryCnt        uint8     // 0..7
	RNRRetry        uint8     // 0..7; 7 = infinite
	MinRNRTimer     uint8     // RNR NAK timer code 0..31
	MaxRdAtomic     uint8     // outstanding READ/atomic requests as requester
	MaxDestRdAtomic uint8     // outstanding READ/atomic requests as responder
	Access          mr.Access // remote operations the responder allows
	QKey            uint32
	AV              AddressVector
	// SelectiveRepeat (AttrSelectiveRepeat): the peer is an xdproce that
	// agreed on selective repeat: the responder holds packets past a hole
	// and answers with SR_SACK, the requester resends only what is missing
	// (docs/sr-wire.md). False: go-back-N, byte for byte as rxe.
	SelectiveRepeat bool
	// SRWindow (with AttrSelectiveRepeat): how many PSNs past a hole the
	// peer's responder holds, which caps this side's send window (the
	// peer said so in the negotiation: SRHold for an xdproce with the
	// longer SR_SACK). 0: 256, the first SR format's, for a peer that did
	// not say.
	SRWindow uint32
	// DCQCN (AttrDCQCN): congestion control with the peer (docs/cc.md):
	// CNPs for CE-marked frames, the requester paced by DCQCN. The ECN
	// bits of the frames sent are AV.TOS's: the caller sets ECT(0) there.
	// False: no CNP is sent, CNPs received are counted and ignored.
	DCQCN bool
	// SendWindow (AttrSendWindow): at most this many unacknowledged PSNs
	// (a READ counts one per response packet), below Config.SendWindow;
	// 0: Config.SendWindow alone. Capped at the path's bandwidth-delay
	// product, a window keeps no more in flight than the path holds, so a
	// loss or a congested queue costs less (IRN, SIGCOMM 2018: BDP-FC).
	SendWindow uint32
}

// enumName returns names[i], or "Name(i)" out of range.
func enumName(names []string, i int, typ string) string {
	if i >= 0 && i < len(names) {
		return names[i]
	}
	return typ + "(" + strconv.Itoa(i) + ")"
}
