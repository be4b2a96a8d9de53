package qp

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/wire"
)

// WCStatus is the status of a work completion, with ibverbs' values.
type WCStatus uint8

// Work completion statuses (enum ibv_wc_status).
const (
	WCSuccess WCStatus = iota
	WCLocLenErr
	WCLocQPOpErr
	WCLocEECOpErr
	WCLocProtErr
	WCWRFlushErr
	WCMWBindErr
	WCBadRespErr
	WCLocAccessErr
	WCRemInvReqErr
	WCRemAccessErr
	WCRemOpErr
	WCRetryExcErr
	WCRNRRetryExcErr
	WCLocRDDViolErr
	WCRemInvRDReqErr
	WCRemAbortErr
	WCInvEECNErr
	WCInvEECStateErr
	WCFatalErr
	WCRespTimeoutErr
	WCGeneralErr
)

var wcStatusNames = [...]string{"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR",
	"IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR",
	"IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
	"IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
	"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR",
	"IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR", "IBV_WC_GENERAL_ERR"}

// String returns the ibverbs name, "IBV_WC_SUCCESS" style.
func (s WCStatus) String() string { return enumName(wcStatusNames[:], int(s), "WCStatus") }

// WCOpcode is the operation a work completion reports. The zero value is
// invalid.
type WCOpcode uint8

// Work completion opcodes (enum ibv_wc_opcode).
const (
	WCSend WCOpcode = iota + 1
	WCRDMAWrite
	WCRDMARead
	WCCompSwap
	WCFetchAdd
	WCRecv
	WCRecvRDMAWithImm
	// OOO queue pairs (docs/ooo.md).
	WCOOOWrite     // send CQ: the last packet of a WROOOWrite went to the link (says nothing of delivery)
	WCOOORead      // send CQ: the request of a WROOORead went to the link
	WCOOODelivered // send CQ: delivered: the target's completion came (WRITE), or the response was placed whole (READ)
	WCOOOTarget    // receive CQ: a peer's operation on one of this QP's contexts completed, or failed (Status)
	// Half-RDMA / half-FIFO: receive WQEs consumed by OOO packets.
	WCOOOFIFO        // receive CQ: one packet of an OOO_FIFO_SEND placed in a receive WQE (Offset: its place in the operation)
	WCOOOReadRequest // receive CQ: a peer's WROOOReadFromFIFO on context Ctx asks for ByteLen bytes: answer with WROOOReadReply
	WCLocalInv       // send CQ: a WRLocalInv
	WCBindMW         // send CQ: a WRBindMW or a QP.BindMW
)

var wcOpcodeNames = [...]string{"WCOpcode(0)", "IBV_WC_SEND", "IBV_WC_RDMA_WRITE", "IBV_WC_RDMA_READ",
	"IBV_WC_COMP_SWAP", "IBV_WC_FETCH_ADD", "IBV_WC_RECV", "IBV_WC_RECV_RDMA_WITH_IMM",
	"XDP_WC_OOO_WRITE", "XDP_WC_OOO_READ", "XDP_WC_OOO_DELIVERED", "XDP_WC_OOO_TARGET",
	"XDP_WC_OOO_FIFO", "XDP_WC_OOO_READ_REQUEST", "IBV_WC_LOCAL_INV", "IBV_WC_BIND_MW"}

func (o WCOpcode) String() string { return enumName(wcOpcodeNames[:], int(o), "WCOpcode") }

// A WC is a work completion (ibv_wc).
type WC struct {
	ID      uint64 // wr_id of the work request
	Status  WCStatus
	Opcode  WCOpcode // valid for every status on send WCs, and on successful receive WCs
	ByteLen uint32   // received bytes (receive WCs; UD: including the 40-byte GRH area)
	ImmData uint32   // immediate data (WithImm) or the invalidated rkey (WithInv)
	WithImm bool     // IBV_WC_WITH_IMM
	WithInv bool     // IBV_WC_WITH_INV
	GRH     bool     // IBV_WC_GRH: the buffer starts with a GRH area (UD)
	QPN     uint32   // the local queue pair
	SrcQPN  uint32   // the remote queue pair of a receive WC (UD: from the DETH; RC/UC: the connected QP, as mlx5 reports it)
	// OOO completions: the context (this side's), transaction id and tag
	// of the operation.
	Ctx wire.Ctx
	TID uint32
	Tag uint32
	// WCOOOFIFO: the packet's offset in its operation (its bytes are
	// [Offset, Offset+ByteLen) of the sender's data).
	Offset uint64
}

// ErrCQOverflow reports that a completion queue was full when a completion
// arrived: at least one completion is lost and the queue stays in error.
var ErrCQOverflow = errors.New("qp: completion queue overflow")

// A CQ is a completion queue. Poll and Wait are safe for concurrent use, also
// with the engine adding completions.
type CQ struct {
	mu      sync.Mutex
	ring    []WC // grows on demand (push) up to depth
	depth   int
	head    int // index of the oldest WC
	n       int
	lost    uint64 // completions that did not fit
	notify  chan struct{}
	waiting atomic.Int32 // goroutines blocked in Wait
	// afterPush, set by tests only, runs after each completion is added
	// (on the engine's goroutine, outside the lock).
	afterPush func()
}

// initialCQ is the number of completions a CQ's ring starts with.
const initialCQ = 4

// NewCQ returns a completion queue holding up to depth completions
// (depth < 1 is taken as 1). Its ring starts small and doubles, up to
// depth, when a completion finds it full.
func NewCQ(depth int) *CQ {
	if depth < 1 {
		depth = 1
	}
	return &CQ{ring: make([]WC, min(depth, initialCQ)), depth: depth, notify: make(chan struct{}, 1)}
}

// Depth returns the capacity.
func (c *CQ) Depth() int { return c.depth }

// Len returns the number of completions waiting.
func (c *CQ) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Poll moves up to len(wcs) completions into wcs, oldest first, and returns
// how many. It never blocks. Once the queue has overflowed, every call
// returns the completions still held together with ErrCQOverflow.
func (c *CQ) Poll(wcs []WC) (int, error) {
	c.mu.Lock()
	n := 0
	for n < len(wcs) && c.n > 0 {
		wcs[n] = c.ring[c.head]
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
		c.n--
		n++
	}
	lost := c.lost
	c.mu.Unlock()
	if lost != 0 {
		return n, ErrCQOverflow
	}
	return n, nil
}

// Wait blocks until at least one completion is available (or the queue
// overflowed), then polls like Poll. It returns ctx.Err() when ctx ends
// first.
func (c *CQ) Wait(ctx context.Context, wcs []WC) (int, error) {
	if len(wcs) == 0 {
		return 0, errors.New("qp: cq wait: empty slice")
	}
	for {
		n, err := c.Poll(wcs)
		if n > 0 || err != nil {
			if c.Len() > 0 {
				c.wake() // let another waiter take the rest
			}
			return n, err
		}
		c.waiting.Add(1)
		select {
		case <-c.notify:
		case <-ctx.Done():
			c.waiting.Add(-1)
			return 0, ctx.Err()
		}
		c.waiting.Add(-1)
	}
}

// push adds one completion; it reports false if the queue was full.
func (c *CQ) push(wc *WC) bool {
	c.mu.Lock()
	if c.n == len(c.ring) {
		if c.n == c.depth {
			c.lost++
			c.mu.Unlock()
			c.wake()
			return false
		}
		c.grow()
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = *wc
	c.n++
	c.mu.Unlock()
	c.wake()
	if c.afterPush != nil {
		c.afterPush()
	}
	return true
}

// grow doubles the full ring (c.mu held), up to depth; the completions move
// to its start, oldest first.
func (c *CQ) grow() {
	r := make([]WC, min(2*len(c.ring), c.depth))
	k := copy(r, c.ring[c.head:])
	copy(r[k:], c.ring[:c.head])
	c.ring, c.head = r, 0
}

func (c *CQ) wake() {
	select {
	case c.notify <- struct{}{}:
		if c.waiting.Load() > 0 {
			wokeWaiters.Add(1)
		}
	default:
	}
}

// wokeWaiters counts wake-ups of a goroutine blocked in some CQ's Wait.
var wokeWaiters atomic.Uint64

// WokeWaiters returns how many times, process-wide, a completion woke a
// goroutine blocked in a CQ's Wait. The roce engine compares it before it
// sleeps (engine.go: it then lets that goroutine run first).
func WokeWaiters() uint64 { return wokeWaiters.Load() }
