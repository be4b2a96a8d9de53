package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// WROpcode is the operation of a send work request. The zero value is
// invalid.
type WROpcode uint8

// Send work request opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite WROpcode = iota + 1
	WRRDMAWriteImm
	WRSend
	WRSendImm
	WRRDMARead
	WRAtomicCmpSwp
	WRAtomicFetchAdd
	WRSendInv
	// OOO queue pairs only (docs/ooo.md).
	WROOOWrite // out-of-order RDMA WRITE: SGL to RemoteAddr/RKey in RemoteCtx
	WROOORead  // out-of-order RDMA READ: RemoteAddr/RKey in RemoteCtx to SGL[0] (SinkRKey) in Ctx
	// WROOO3PRead: third-party READ: the peer streams RemoteAddr/RKey in
	// RemoteCtx to Sink, another node, whose completion comes to Ctx.
	WROOO3PRead
	// Half-RDMA / half-FIFO (docs/ooo.md): one side addresses memory, the
	// other side's data goes through its receive queue.
	WROOOFIFOSend     // half send write: SGL to the peer's receive queue (OOO_FIFO_SEND) in RemoteCtx
	WROOOReadToFIFO   // half send read: RemoteAddr/RKey, OpTotal bytes, into this side's receive queue in Ctx
	WROOOReadFromFIFO // half receive read: the peer's user answers (WROOOReadReply) into SGL[0] (SinkRKey) in Ctx
	WROOOReadReply    // the answer to a peer's WROOOReadFromFIFO: SGL (any pieces) on Ctx, TID of the request
	// Local operations (RC, UC; mw.go): executed in send-queue order, no
	// packet.
	WRLocalInv // invalidate InvRKey: a type 2B window's (or a RemoteInvalidate region's)
	WRBindMW   // bind the type 2B window Bind.MW to this queue pair
)

var wrOpcodeNames = [...]string{"WROpcode(0)", "IBV_WR_RDMA_WRITE", "IBV_WR_RDMA_WRITE_WITH_IMM",
	"IBV_WR_SEND", "IBV_WR_SEND_WITH_IMM", "IBV_WR_RDMA_READ", "IBV_WR_ATOMIC_CMP_AND_SWP",
	"IBV_WR_ATOMIC_FETCH_AND_ADD", "IBV_WR_SEND_WITH_INV", "XDP_WR_OOO_WRITE", "XDP_WR_OOO_READ", "XDP_WR_OOO_3P_READ",
	"XDP_WR_OOO_FIFO_SEND", "XDP_WR_OOO_READ_TO_FIFO", "XDP_WR_OOO_READ_FROM_FIFO", "XDP_WR_OOO_READ_REPLY",
	"IBV_WR_LOCAL_INV", "IBV_WR_BIND_MW"}

func (o WROpcode) String() string { return enumName(wrOpcodeNames[:], int(o), "WROpcode") }

// wcOpcode is the send completion opcode of o.
func (o WROpcode) wcOpcode() WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRAtomicCmpSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WROOOWrite, WROOOFIFOSend, WROOOReadReply:
		return WCOOOWrite
	case WROOORead, WROOO3PRead, WROOOReadToFIFO, WROOOReadFromFIFO:
		return WCOOORead
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

func (o WROpcode) isReadOrAtomic() bool {
	return o == WRRDMARead || o == WRAtomicCmpSwp || o == WRAtomicFetchAdd
}

func (o WROpcode) isSend() bool { return o == WRSend || o == WRSendImm || o == WRSendInv }

func (o WROpcode) isAtomic() bool { return o == WRAtomicCmpSwp || o == WRAtomicFetchAdd }

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint8

// Send flags.
const (
	Fence     SendFlags = 1 << iota // wait for earlier READ/atomic WRs to complete first
	Signaled                        // produce a completion on success (errors always do)
	Solicited                       // set the solicited event bit on the last packet
	Inline                          // copy the payload at post; SGE memory may be reused at once
)

// A SendWR is a send work request (ibv_send_wr). PostSend copies it.
type SendWR struct {
	ID     uint64
	Opcode WROpcode
	Flags  SendFlags
	SGL    []mr.SGE // local memory: the payload, or where READ data / the atomic result lands
	Imm    uint32   // immediate data (WRSendImm, WRRDMAWriteImm), host order

	RemoteAddr uint64 // RDMA and atomic: the peer's VA (8-byte aligned for atomics)
	RKey       uint32 // RDMA and atomic: the peer's rkey
	CompareAdd uint64 // atomic: the compare value (WRAtomicCmpSwp) or the addend (WRAtomicFetchAdd)
	Swap       uint64 // WRAtomicCmpSwp: the value written when the compare matches
	InvRKey    uint32 // WRSendInv: the peer's rkey to invalidate; WRLocalInv: this side's
	Bind       BindWR // WRBindMW: the window, its new rkey and what it is bound to

	AH         *AddressVector // UD: where to send
	RemoteQPN  uint32         // UD: destination QPN
	RemoteQKey uint32         // UD: Q_Key; with the high bit set the QP's own Q_Key is used

	// OOO operations (WROOOWrite, WROOORead, WROOO3PRead; docs/ooo.md).
	Ctx       wire.Ctx    // this side's context: the completion (WRITE) or the response data (READ) comes to it
	RemoteCtx wire.Ctx    // the peer's context (id and key) the operation addresses
	TID       uint32      // transaction id: larger than the last one used on RemoteCtx (and Ctx)
	Notify    wire.Notify // who gets a completion when the data is placed whole
	Tag       uint32      // echoed in the completions (WC.Tag)
	Paths     uint8       // spread the packets over this many UDP source ports (ECMP); 0 or 1: one
	SinkRKey  uint32      // WROOORead: the rkey of the region SGL[0] lies in (the response is placed by rkey)
	Sink      ThirdParty  // WROOO3PRead: the node the data goes to (docs/ooo.md, Third party)
	// A piece of one OOO WRITE (half receive write: the operation gathered
	// from several work requests): OpTotal is the operation's bytes (0:
	// this request is the whole operation), OpOffset this piece's place in
	// it (a multiple of the path MTU; RemoteAddr is the piece's own VA).
	// WROOOReadToFIFO: OpTotal is the bytes asked for.
	OpTotal  uint32
	OpOffset uint64
	// Conditional operations (docs/ooo.md): a component has Notify
	// ToSelf|Initiator and CondQueue; a conditional request has CondQueue
	// and Cond.
	CondQueue uint8 // conditional queue 1..MaxCondQueues (0: none)
	Cond      Cond  // the condition a conditional request waits for
}

// A RecvWR is a receive work request (ibv_recv_wr). PostRecv copies it.
type RecvWR struct {
	ID  uint64
	SGL []mr.SGE
}
