package qp

import (
	"errors"
	"fmt"

	"github.com/xdproce/xdproce/roce/wire"
)

// An OOO queue pair (Type OOO; docs/ooo.md) moves data with out-of-order
// RDMA over datagrams: every packet carries its context, transaction id,
// total length and place, so the receiver places packets in any order with
// no reassembly buffer; duplicates are dropped by a bitmap of packet
// indices; nothing is retransmitted; a completion packet, sent once every
// byte is placed, is the one proof of delivery. Its contexts come from the
// device's ContextPool (Config.Contexts).

// MaxPaths bounds SendWR.Paths.
const MaxPaths = 64

// checkOOOSend checks an OOO work request at post.
func (q *QP) checkOOOSend(wr *SendWR) error {
	reply := wr.Opcode == WROOOReadReply
	switch wr.Opcode {
	case WROOOWrite, WROOORead, WROOOFIFOSend, WROOOReadToFIFO, WROOOReadFromFIFO, WROOOReadReply:
	case WROOO3PRead:
		if err := check3PSend(wr); err != nil {
			return err
		}
	default:
		return fmt.Errorf("qp: post send: %v on an OOO queue pair", wr.Opcode)
	}
	switch {
	case wr.TID == 0:
		return errors.New("qp: post send: OOO tid 0 (a context starts at 0: only a larger tid starts an operation)")
	case wr.Notify&^(wire.NotifyBoth|wire.NotifyToSelf) != 0:
		return fmt.Errorf("qp: post send: OOO notify %v (reserved bits set)", wr.Notify)
	case wr.Paths > MaxPaths:
		return fmt.Errorf("qp: post send: %d paths, max %d", wr.Paths, MaxPaths)
	case wr.RemoteCtx.ID() == 0 && !reply:
		return errors.New("qp: post send: OOO remote context id 0")
	case (wr.OpTotal != 0 || wr.OpOffset != 0) && wr.Opcode != WROOOWrite && wr.Opcode != WROOOFIFOSend &&
		wr.Opcode != WROOOReadToFIFO:
		return fmt.Errorf("qp: post send: %v takes no OpTotal or OpOffset", wr.Opcode)
	case wr.OpOffset != 0 && wr.OpTotal == 0:
		return errors.New("qp: post send: OpOffset without OpTotal")
	}
	if err := checkCond(wr); err != nil {
		return err
	}
	switch wr.Opcode {
	case WROOORead, WROOOReadFromFIFO:
		if len(wr.SGL) != 1 {
			return fmt.Errorf("qp: post send: %v takes one SGE (the sink), got %d", wr.Opcode, len(wr.SGL))
		}
		if wr.Flags&Inline != 0 {
			return fmt.Errorf("qp: post send: inline %v", wr.Opcode)
		}
	case WROOOReadToFIFO:
		if len(wr.SGL) != 0 || wr.OpOffset != 0 {
			return errors.New("qp: post send: a READ to FIFO takes no SGE and no OpOffset (its data goes to the receive queue; OpTotal is its length)")
		}
	}
	if IsGroupCtx(wr.RemoteCtx) && wr.Opcode != WROOOWrite {
		return fmt.Errorf("qp: post send: %v to group context %v (only WRITEs go to groups)", wr.Opcode, wr.RemoteCtx)
	}
	// A group WRITE's completions come from its members, one each, with no
	// context on this side (ooo_group.go).
	need := wr.Opcode == WROOORead || wr.Opcode == WROOOReadFromFIFO || wr.Opcode == WROOOReadToFIFO || reply ||
		wr.Notify&wire.NotifyInitiator != 0 && !IsGroupCtx(wr.RemoteCtx)
	if wr.Ctx == 0 && need {
		return fmt.Errorf("qp: post send: %v with notify %v needs this side's context (Ctx)", wr.Opcode, wr.Notify)
	}
	if wr.Ctx != 0 && !q.ooo.pool.Holds(q.qpn, wr.Ctx) {
		return fmt.Errorf("qp: post send: context %v is not held by QP %#x", wr.Ctx, q.qpn)
	}
	return nil
}

// AcquireContexts takes n contexts from the device's pool for this OOO queue
// pair, each with transaction id 0.
func (q *QP) AcquireContexts(n int) ([]wire.Ctx, error) {
	if q.ooo == nil {
		return nil, fmt.Errorf("qp: acquire contexts: %v queue pair", q.typ)
	}
	return q.ooo.pool.Acquire(q.qpn, n)
}

// ReleaseContexts gives contexts back to the pool (their keys change).
func (q *QP) ReleaseContexts(ctxs []wire.Ctx) error {
	if q.ooo == nil {
		return fmt.Errorf("qp: release contexts: %v queue pair", q.typ)
	}
	return q.ooo.pool.Release(q.qpn, ctxs)
}

// RecoverContexts gives every context of this queue pair a new key and
// transaction id 0 (ContextPool.Recover) and returns them.
func (q *QP) RecoverContexts() ([]wire.Ctx, error) {
	if q.ooo == nil {
		return nil, fmt.Errorf("qp: recover contexts: %v queue pair", q.typ)
	}
	return q.ooo.pool.Recover(q.qpn), nil
}
