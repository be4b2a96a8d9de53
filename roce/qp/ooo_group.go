package qp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// Group contexts (docs/ooo.md, "Broadcast and multicast"): a member of a
// multicast group (or of the subnet broadcast) defines a context from the
// reserved id range GroupCtxFirst..GroupCtxLast, bound to a region of its
// own memory. An OOO_WRITE naming it carries in RETH.VA an offset into that
// region (its R_Key is not used: members need not share rkeys), so one
// packet stream places the same bytes on every member. Group contexts are
// never in a ContextPool; the sender holds no context for a group operation:
// each member's completion packet, whose initiator-context field names the
// group context, becomes a WCOOODelivered on the sender's queue pair
// connected to that member (SrcQPN: the member's).

// The reserved group context ids (64 Ki): the pools stop below them.
const (
	GroupCtxFirst = 0xFF0000
	GroupCtxLast  = 0xFFFFFF
)

// IsGroupCtx reports whether x names a group context.
func IsGroupCtx(x wire.Ctx) bool { return x.ID() >= GroupCtxFirst }

// MaxGroupContexts bounds the group contexts of one queue pair.
const MaxGroupContexts = 256

// A GroupRegion is what a group context places into: Len bytes at Addr of
// a memory region registered with remote write access (RKey: its rkey, on
// this device only; it never travels).
type GroupRegion struct {
	Group netip.Addr // the multicast group or broadcast address the context serves
	Addr  uint64
	Len   uint64
	RKey  uint32
}

// groupCtx is one defined group context. Everything but st is fixed at
// DefineGroupContext; st is the progress goroutine's.
type groupCtx struct {
	ctx wire.Ctx
	reg GroupRegion
	st  ctxState
}

// groupTable holds a queue pair's group contexts: a copy-on-write slice, so
// the progress goroutine reads it without a lock.
type groupTable struct {
	list atomic.Pointer[[]*groupCtx]
}

func (t *groupTable) find(id uint32) *groupCtx {
	l := t.list.Load()
	if l == nil {
		return nil
	}
	for _, g := range *l {
		if g.ctx.ID() == id {
			return g
		}
	}
	return nil
}

// DefineGroupContext makes x (an id in GroupCtxFirst..GroupCtxLast, its key
// chosen by the group's sender) a group context of this OOO queue pair,
// bound to reg. The device routes multicast frames (DestQPN 0xFFFFFF) to
// the queue pair that defined the context they name, when their destination
// address is reg.Group; unicast frames to this queue pair (a sender's retry)
// reach it as well.
func (q *QP) DefineGroupContext(x wire.Ctx, reg GroupRegion) error {
	if q.ooo == nil {
		return fmt.Errorf("qp: define group context: %v queue pair", q.typ)
	}
	if !IsGroupCtx(x) {
		return fmt.Errorf("qp: define group context %v: id below the group range %#x..%#x", x, GroupCtxFirst, GroupCtxLast)
	}
	if !reg.Group.IsValid() {
		return errors.New("qp: define group context: no group address")
	}
	reg.Group = reg.Group.Unmap()
	if _, err := q.tbl.Remote(q.pd, q, reg.RKey, reg.Addr, reg.Len, mr.RemoteWrite); err != nil {
		return fmt.Errorf("qp: define group context %v: region: %w", x, err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var old []*groupCtx
	if l := q.ooo.groups.list.Load(); l != nil {
		old = *l
	}
	if len(old) >= MaxGroupContexts {
		return fmt.Errorf("qp: define group context %v: %d defined already", x, len(old))
	}
	for _, g := range old {
		if g.ctx.ID() == x.ID() {
			return fmt.Errorf("qp: define group context %v: id defined already", x)
		}
	}
	l := append(slices.Clip(old), &groupCtx{ctx: x, reg: reg})
	q.ooo.groups.list.Store(&l)
	return nil
}

// RemoveGroupContext undefines x; packets naming it are dropped from then
// on (stale_ctx).
func (q *QP) RemoveGroupContext(x wire.Ctx) error {
	if q.ooo == nil {
		return fmt.Errorf("qp: remove group context: %v queue pair", q.typ)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.ooo.groups.list.Load()
	if l == nil {
		return fmt.Errorf("qp: remove group context %v: not defined", x)
	}
	i := slices.IndexFunc(*l, func(g *groupCtx) bool { return g.ctx == x })
	if i < 0 {
		return fmt.Errorf("qp: remove group context %v: not defined", x)
	}
	n := slices.Delete(slices.Clone(*l), i, i+1)
	q.ooo.groups.list.Store(&n)
	return nil
}

// HasGroupContext reports whether this queue pair defined a group context
// with x's id for the destination address dst: the device's routing of
// multicast frames.
func (q *QP) HasGroupContext(x wire.Ctx, dst netip.Addr) bool {
	if q.ooo == nil {
		return false
	}
	g := q.ooo.groups.find(x.ID())
	return g != nil && g.reg.Group == dst.Unmap()
}

// oooPlaceState returns the state a data packet for context x places
// through, and its group context when x is one; nil (counted stale_ctx) when
// this queue pair does not hold x with x's key.
func (q *QP) oooPlaceState(x wire.Ctx) (*ctxState, *groupCtx) {
	if !IsGroupCtx(x) {
		return q.oooState(x), nil
	}
	g := q.ooo.groups.find(x.ID())
	if g == nil || g.ctx != x {
		q.stats.inc(CtrStaleCtx)
		return nil, nil
	}
	return &g.st, g
}

// oooDest returns the memory the data packet p places into: for a group
// context, its offset into the group's region; else the region its rkey
// names.
func (q *QP) oooDest(g *groupCtx, p *wire.Packet) ([]byte, error) {
	n := uint64(len(p.Payload))
	if q.e.attr.Access&mr.RemoteWrite == 0 {
		return nil, mr.ErrAccess
	}
	if g == nil {
		return q.tbl.RemoteCached(&q.rkeyCache, q.pd, q, p.RETH.RKey, p.RETH.VA, n, mr.RemoteWrite)
	}
	if va := p.RETH.VA; va > g.reg.Len || n > g.reg.Len-va {
		return nil, mr.ErrAccess
	}
	return q.tbl.RemoteCached(&q.rkeyCache, q.pd, q, g.reg.RKey, g.reg.Addr+p.RETH.VA, n, mr.RemoteWrite)
}

// oooGroupAck takes a member's completion of a group operation (an
// OOO_COMPLETION whose initiator context is a group context): the sender
// holds no state for it, so it becomes a WCOOODelivered on the send CQ
// naming the group context and tid; SrcQPN, the member's queue pair, says
// which member. Duplicates are the caller's to ignore.
func (q *QP) oooGroupAck(p *wire.Packet) {
	x := &p.XRH
	q.stats.inc(CtrOOOCompletionsRecv)
	q.scq.push(&WC{Opcode: WCOOODelivered, ByteLen: x.Total, QPN: q.qpn, SrcQPN: q.e.attr.DestQPN,
		Ctx: x.Initiator, TID: x.TID, Tag: x.Tag})
}
