package roce

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// The vocabulary of roce/mr, roce/qp and roce/wire that a user of the facade
// needs, re-exported so that applications import only roce. Every name here
// is the same type, constant or error value as in its sub-package: errors.Is
// and type switches work across both names.

// Types.
type (
	MR            = mr.MR
	SGE           = mr.SGE
	Access        = mr.Access
	CQ            = qp.CQ
	WC            = qp.WC
	WCStatus      = qp.WCStatus
	WCOpcode      = qp.WCOpcode
	SendWR        = qp.SendWR
	RecvWR        = qp.RecvWR
	WROpcode      = qp.WROpcode
	SendFlags     = qp.SendFlags
	Attr          = qp.Attr
	AttrMask      = qp.AttrMask
	AddressVector = qp.AddressVector
	QPType        = qp.Type
	QPState       = qp.State
	// MTU is an IBA path MTU (MTU256 … MTU4096), as ConnectOptions.PathMTU,
	// Attr.PathMTU and Device.PathMTU use it.
	MTU = wire.MTU
)

// Access flags (ibverbs values, and RemoteInvalidate: xdproce's stand-in for
// the kernel's fast-registration regions, the only regions whose rkey a peer's
// SEND_WITH_INVALIDATE may withdraw; type 2B windows (roce/mw.go) are what
// userspace verbs invalidates). MWBind and ZeroBased are in roce/mw.go.
const (
	LocalWrite       = mr.LocalWrite
	RemoteWrite      = mr.RemoteWrite
	RemoteRead       = mr.RemoteRead
	RemoteAtomic     = mr.RemoteAtomic
	RemoteInvalidate = mr.RemoteInvalidate
)

// Queue pair types.
const (
	RC = qp.RC
	UC = qp.UC
	UD = qp.UD
)

// Queue pair states (IBA 10.3; String gives "RESET", "INIT", "RTR", "RTS",
// "ERR").
const (
	StateReset = qp.Reset
	StateInit  = qp.Init
	StateRTR   = qp.RTR
	StateRTS   = qp.RTS
	StateError = qp.Error
)

// Attribute mask bits of Modify (IBV_QP_*).
const (
	AttrState           = qp.AttrState
	AttrAccessFlags     = qp.AttrAccessFlags
	AttrQKey            = qp.AttrQKey
	AttrAV              = qp.AttrAV
	AttrPathMTU         = qp.AttrPathMTU
	AttrTimeout         = qp.AttrTimeout
	AttrRetryCnt        = qp.AttrRetryCnt
	AttrRNRRetry        = qp.AttrRNRRetry
	AttrRQPSN           = qp.AttrRQPSN
	AttrMaxRdAtomic     = qp.AttrMaxRdAtomic
	AttrMinRNRTimer     = qp.AttrMinRNRTimer
	AttrSQPSN           = qp.AttrSQPSN
	AttrMaxDestRdAtomic = qp.AttrMaxDestRdAtomic
	AttrDestQPN         = qp.AttrDestQPN
	AttrSelectiveRepeat = qp.AttrSelectiveRepeat
	AttrDCQCN           = qp.AttrDCQCN
)

// Send work request opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite      = qp.WRRDMAWrite
	WRRDMAWriteImm   = qp.WRRDMAWriteImm
	WRSend           = qp.WRSend
	WRSendImm        = qp.WRSendImm
	WRRDMARead       = qp.WRRDMARead
	WRAtomicCmpSwp   = qp.WRAtomicCmpSwp
	WRAtomicFetchAdd = qp.WRAtomicFetchAdd
	WRSendInv        = qp.WRSendInv
)

// Send flags (enum ibv_send_flags).
const (
	Fence     = qp.Fence     // wait for earlier READ/atomic WRs to complete first
	Signaled  = qp.Signaled  // produce a completion on success (errors always do)
	Solicited = qp.Solicited // set the solicited event bit on the last packet
	Inline    = qp.Inline    // copy the payload at post; SGE memory may be reused at once
)

// Work completion statuses (enum ibv_wc_status; String gives the ibverbs
// name, "IBV_WC_SUCCESS" style).
const (
	WCSuccess        = qp.WCSuccess
	WCLocLenErr      = qp.WCLocLenErr
	WCLocQPOpErr     = qp.WCLocQPOpErr
	WCLocEECOpErr    = qp.WCLocEECOpErr
	WCLocProtErr     = qp.WCLocProtErr
	WCWRFlushErr     = qp.WCWRFlushErr
	WCMWBindErr      = qp.WCMWBindErr
	WCBadRespErr     = qp.WCBadRespErr
	WCLocAccessErr   = qp.WCLocAccessErr
	WCRemInvReqErr   = qp.WCRemInvReqErr
	WCRemAccessErr   = qp.WCRemAccessErr
	WCRemOpErr       = qp.WCRemOpErr
	WCRetryExcErr    = qp.WCRetryExcErr
	WCRNRRetryExcErr = qp.WCRNRRetryExcErr
	WCLocRDDViolErr  = qp.WCLocRDDViolErr
	WCRemInvRDReqErr = qp.WCRemInvRDReqErr
	WCRemAbortErr    = qp.WCRemAbortErr
	WCInvEECNErr     = qp.WCInvEECNErr
	WCInvEECStateErr = qp.WCInvEECStateErr
	WCFatalErr       = qp.WCFatalErr
	WCRespTimeoutErr = qp.WCRespTimeoutErr
	WCGeneralErr     = qp.WCGeneralErr
)

// Work completion opcodes (enum ibv_wc_opcode).
const (
	WCSend            = qp.WCSend
	WCRDMAWrite       = qp.WCRDMAWrite
	WCRDMARead        = qp.WCRDMARead
	WCCompSwap        = qp.WCCompSwap
	WCFetchAdd        = qp.WCFetchAdd
	WCRecv            = qp.WCRecv
	WCRecvRDMAWithImm = qp.WCRecvRDMAWithImm
)

// Path MTUs.
const (
	MTU256  = wire.MTU256
	MTU512  = wire.MTU512
	MTU1024 = wire.MTU1024
	MTU2048 = wire.MTU2048
	MTU4096 = wire.MTU4096
)

// PSNMask masks a packet sequence number (24 bits), e.g. a random first PSN.
const PSNMask = wire.PSNMask

// MTUFromBytes returns the MTU of exactly n bytes (256, 512, …, 4096), or 0.
func MTUFromBytes(n int) MTU { return wire.MTUFromBytes(n) }

// Queue pair limits and the defaults of QPConfig's zero fields.
const (
	DefaultMaxWR     = qp.DefaultMaxWR     // MaxSendWR, MaxRecvWR when 0
	DefaultMaxSGE    = qp.DefaultMaxSGE    // MaxSGE when 0
	DefaultMaxInline = qp.DefaultMaxInline // MaxInline when 0
	MaxWR            = qp.MaxWR            // the largest MaxSendWR, MaxRecvWR
	MaxSGE           = qp.MaxSGELimit      // the largest MaxSGE
	MaxInline        = qp.MaxInlineLimit   // the largest MaxInline
	MaxMessage       = qp.MaxMessage       // the largest message of one work request
	GRHLen           = qp.GRHLen           // the GRH area at the start of a UD receive buffer
)

// Sentinel errors of queue pairs and completion queues (returned by Post*,
// Modify, Destroy and CQ.Poll, wrapped or not: test with errors.Is).
var (
	ErrState      = qp.ErrState      // the queue pair's state does not allow the call
	ErrQueueFull  = qp.ErrQueueFull  // MaxSendWR/MaxRecvWR outstanding; poll, then retry
	ErrDestroyed  = qp.ErrDestroyed  // the queue pair was destroyed
	ErrCQOverflow = qp.ErrCQOverflow // a completion did not fit; the CQ stays in error
)

// Sentinel errors of memory regions (in work completions' causes and in the
// errors of RegMR, Deregister and Dealloc; test with errors.Is). ErrLimit is
// declared with the device's limits.
var (
	ErrInvalidKey  = mr.ErrInvalidKey  // no region with that key (or deregistered)
	ErrOutOfBounds = mr.ErrOutOfBounds // the access is outside the region
	ErrAccess      = mr.ErrAccess      // the region does not allow the access
	ErrPDMismatch  = mr.ErrPDMismatch  // the region belongs to another protection domain
	ErrBusy        = mr.ErrBusy        // the protection domain still has regions or queue pairs
	ErrDeallocated = mr.ErrDeallocated // the region or protection domain was already released
)
