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
	switch wr.Opcode {
	case WROOOWrite, WROOORead:
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
	case wr.RemoteCtx.ID() == 0:
		return errors.New("qp: post send: OOO remote context id 0")
	}
	if err := checkCond(wr); err != nil {
		return err
	}
	if wr.Opcode == WROOORead {
		if len(wr.SGL) != 1 {
			return fmt.Errorf("qp: post send: OOO READ takes one SGE (the sink), got %d", len(wr.SGL))
		}
		if wr.Flags&Inline != 0 {
			return errors.New("qp: post send: inline OOO READ")
		}
	}
	if IsGroupCtx(wr.RemoteCtx) && wr.Opcode != WROOOWrite {
		return fmt.Errorf("qp: post send: %v to group context %v (only WRITEs go to groups)", wr.Opcode, wr.RemoteCtx)
	}
	// A group WRITE's completions come from its members, one each, with no
	// context on this side (ooo_group.go).
	need := wr.Opcode == WROOORead || wr.Notify&wire.NotifyInitiator != 0 && !IsGroupCtx(wr.RemoteCtx)
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
