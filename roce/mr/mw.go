package mr

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
)

// Memory windows, as rxe has them (type 1 and type 2B; IBA 10.6.7): a window
// lends a peer part of a region under an rkey of its own, with its own
// access, and can be withdrawn without touching the region. A window's rkey
// is index<<8 | key: the 24-bit index is the window's for its life, the
// 8-bit key changes with each bind (IncRKey), so an rkey handed out before a
// rebind is refused after it. Window indexes and the top 24 bits of region
// rkeys (live or retired) never meet, so a region's key never reaches a
// window and back; a released window's index is retired like a region's
// rkey.
//
// Where xdproce is stricter than rxe (which checks a windowed access only
// against the region's bounds, and lets any queue pair invalidate a type 2B
// window): an access must lie inside the window, a SEND with Invalidate must
// arrive on the queue pair the window is bound to, and the region must be
// of the window's protection domain.

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint8

// Window types.
const (
	// MWType1 (IBV_MW_TYPE_1) is bound with QP.BindMW (ibv_bind_mw) on any
	// queue pair of its PD, rebound the same way (length 0 unbinds), and
	// never invalidated.
	MWType1 MWType = 1
	// MWType2B (IBV_MW_TYPE_2) is bound by a WRBindMW work request to the
	// queue pair that posts it, only from the free state; a LOCAL_INV or a
	// peer's SEND with Invalidate frees it again.
	MWType2B MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "IBV_MW_TYPE_1"
	case MWType2B:
		return "IBV_MW_TYPE_2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// DefaultMaxMWs is the number of windows a Table holds.
const DefaultMaxMWs = 1 << 16

// A QPRef is the queue pair a type 2B window is bound to, as the engine
// names it (its *qp.QP): lookups compare it by identity.
type QPRef interface{ QPN() uint32 }

type mwState uint8

const (
	mwFree  mwState = iota // type 2B: not bound
	mwValid                // bound (type 1: from allocation on; length 0 grants nothing)
	mwDead                 // deallocated
)

// An MW is a memory window.
type MW struct {
	pd     *PD
	typ    MWType
	idx    uint32
	posted atomic.Uint32 // type 1: the rkey the last QP.BindMW handed out

	// Guarded by pd.t.mu.
	rkey   uint32
	state  mwState
	mr     *MR
	addr   uint64
	length uint64
	access Access
	qp     QPRef // type 2B: the queue pair it is bound to
}

// mwTable is the windows' part of a Table, guarded by its mu.
type mwTable struct {
	byIdx    map[uint32]*MW
	n        int
	tops     map[uint32]int32 // region rkeys (live and retired) by their top 24 bits
	retired  map[uint32]struct{}
	retiredQ []uint32
}

// addTop counts a region rkey.
func (w *mwTable) addTop(rkey uint32) {
	if w.tops == nil {
		w.tops = make(map[uint32]int32)
	}
	w.tops[rkey>>8]++
}

// dropTop forgets a region rkey (no longer remembered as retired).
func (w *mwTable) dropTop(rkey uint32) {
	if w.tops[rkey>>8]--; w.tops[rkey>>8] <= 0 {
		delete(w.tops, rkey>>8)
	}
}

// owns reports whether rkey is in a window's space (live or retired index).
func (w *mwTable) owns(rkey uint32) bool {
	if _, ok := w.byIdx[rkey>>8]; ok {
		return true
	}
	_, ok := w.retired[rkey>>8]
	return ok
}

// target resolves a window's rkey: only a bound window, under its current
// key, resolves.
func (w *mwTable) target(rkey uint32) target {
	m := w.byIdx[rkey>>8]
	if m == nil || m.rkey != rkey || m.state != mwValid || m.length == 0 {
		return target{}
	}
	off := m.addr - m.mr.iova
	g := target{ok: true, pd: m.pd, qp: m.qp, buf: m.mr.buf[off : off+m.length : off+m.length], base: m.addr, access: m.access}
	if m.access&ZeroBased != 0 {
		g.base = 0
	}
	return g
}

// IncRKey returns rkey with its key byte (the low 8 bits) incremented
// (ibv_inc_rkey): the rkey to bind a window with next.
func IncRKey(rkey uint32) uint32 { return rkey&^0xff | (rkey+1)&0xff }

// AllocMW allocates a window of type typ in pd (ibv_alloc_mw). A type 1
// window starts bound to nothing, a type 2B window free. The window holds
// the PD until Dealloc.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2B {
		return nil, fmt.Errorf("mr: alloc mw: %v", typ)
	}
	if err := pd.Hold(); err != nil {
		return nil, fmt.Errorf("mr: alloc mw: %w", ErrDeallocated)
	}
	t := pd.t
	t.mu.Lock()
	w, err := t.newMW(pd, typ)
	t.mu.Unlock()
	if err != nil {
		pd.Release()
		return nil, err
	}
	return w, nil
}

// newMW draws the window's index and first key. Called with t.mu held.
func (t *Table) newMW(pd *PD, typ MWType) (*MW, error) {
	mt := &t.mw
	if mt.n >= DefaultMaxMWs {
		return nil, fmt.Errorf("mr: alloc mw: %d windows: %w", DefaultMaxMWs, ErrLimit)
	}
	var b [4]byte
	for range 64 {
		if _, err := io.ReadFull(t.rand, b[:]); err != nil {
			return nil, fmt.Errorf("mr: alloc mw: key source: %w", err)
		}
		r := binary.LittleEndian.Uint32(b[:])
		idx := r & 0xFFFFFF // the low bits: a counting source (tests) still finds indexes
		k := idx<<8 | r>>24
		if idx == 0 || mt.owns(k) || mt.tops[idx] > 0 {
			continue
		}
		w := &MW{pd: pd, typ: typ, idx: idx, rkey: k, state: mwFree}
		if typ == MWType1 {
			w.state = mwValid
		}
		w.posted.Store(k)
		if mt.byIdx == nil {
			mt.byIdx = make(map[uint32]*MW)
			mt.retired = make(map[uint32]struct{})
		}
		mt.byIdx[idx] = w
		mt.n++
		return w, nil
	}
	return nil, errors.New("mr: alloc mw: key source keeps repeating itself")
}

// Type returns the window's type.
func (w *MW) Type() MWType { return w.typ }

// PD returns the window's protection domain.
func (w *MW) PD() *PD { return w.pd }

// RKey returns the window's rkey as the engine has it now: its index and the
// key of the last bind executed (the allocation's before any).
func (w *MW) RKey() uint32 {
	t := w.pd.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return w.rkey
}

// Bound reports whether the window is bound to memory a peer can reach now.
func (w *MW) Bound() bool {
	t := w.pd.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return w.state == mwValid && w.length > 0
}

// NextRKey hands out the rkey for the next bind of a type 1 window: the one
// the previous call handed out (or the allocation's), key byte incremented,
// as ibv_bind_mw updates mw->rkey when it posts. QP.BindMW calls it.
func (w *MW) NextRKey() uint32 {
	for {
		old := w.posted.Load()
		if n := IncRKey(old); w.posted.CompareAndSwap(old, n) {
			return n
		}
	}
}

// Dealloc releases the window (ibv_dealloc_mw), bound or not: its rkey is
// refused from the moment the call returns and its index is not issued
// again soon. A second call fails with ErrDeallocated.
func (w *MW) Dealloc() error {
	t := w.pd.t
	t.mu.Lock()
	if w.state == mwDead {
		t.mu.Unlock()
		return fmt.Errorf("mr: dealloc mw: %w", ErrDeallocated)
	}
	w.unbind()
	w.state = mwDead
	t.gen.Add(1)
	mt := &t.mw
	delete(mt.byIdx, w.idx)
	mt.n--
	if len(mt.retiredQ) >= t.retiredMax {
		delete(mt.retired, mt.retiredQ[0])
		mt.retiredQ = mt.retiredQ[1:]
	}
	mt.retired[w.idx] = struct{}{}
	mt.retiredQ = append(mt.retiredQ, w.idx)
	t.mu.Unlock()
	w.pd.Release()
	return nil
}

// unbind drops the window's region and queue pair. Called with t.mu held.
func (w *MW) unbind() {
	if w.mr != nil {
		w.mr.nmw--
		w.mr = nil
	}
	w.qp = nil
	w.addr, w.length, w.access = 0, 0, 0
}

// BindInfo is what a window is bound to (ibv_mw_bind_info): Length bytes of
// MR from Addr (an address of the region), with Access (RemoteRead,
// RemoteWrite, RemoteAtomic; ZeroBased for type 2B windows).
type BindInfo struct {
	MR     *MR
	Addr   uint64
	Length uint64
	Access Access
}

const mwAccess = RemoteRead | RemoteWrite | RemoteAtomic | ZeroBased

// BindMW binds w to b under rkey (w's index, a new key byte), as a BIND_MW
// work request executed on queue pair qp of protection domain qpPD does
// (rxe_bind_mw's rules): a type 1 window must not be deallocated and not be
// zero-based, and binding it with Length 0 unbinds it; a type 2B window
// must be free, of qpPD, and get a region and a length. The region must be
// live, of the window's PD, registered with MWBind, with LocalWrite when
// the window grants RemoteWrite or RemoteAtomic, and hold [Addr,
// Addr+Length). The errors wrap ErrInvalidKey, ErrDeallocated,
// ErrPDMismatch, ErrAccess or ErrOutOfBounds.
func (t *Table) BindMW(w *MW, qp QPRef, qpPD *PD, rkey uint32, b BindInfo) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := w.checkBind(qpPD, rkey, &b); err != nil {
		return fmt.Errorf("mr: bind mw %#x: %w", w.rkey, err)
	}
	w.unbind()
	w.rkey = w.idx<<8 | rkey&0xff
	w.state = mwValid
	if b.Length > 0 {
		w.mr, w.addr, w.length, w.access = b.MR, b.Addr, b.Length, b.Access
		b.MR.nmw++
	}
	if w.typ == MWType2B {
		w.qp = qp
	}
	t.gen.Add(1)
	return nil
}

// checkBind checks a bind. Called with t.mu held.
func (w *MW) checkBind(qpPD *PD, rkey uint32, b *BindInfo) error {
	if w.state == mwDead {
		return ErrDeallocated
	}
	if rkey>>8 != w.idx {
		return fmt.Errorf("rkey %#x is not of this window: %w", rkey, ErrInvalidKey)
	}
	if b.Access&^mwAccess != 0 {
		return fmt.Errorf("window access %v: %w", b.Access, ErrAccess)
	}
	switch w.typ {
	case MWType1:
		if b.Access&ZeroBased != 0 {
			return fmt.Errorf("a zero-based type 1 window: %w", ErrAccess)
		}
		if b.Length == 0 {
			return nil // unbind
		}
	case MWType2B:
		if w.state != mwFree {
			return fmt.Errorf("type 2B window not free (invalidate it first): %w", ErrAccess)
		}
		if qpPD != w.pd {
			return fmt.Errorf("queue pair of another PD: %w", ErrPDMismatch)
		}
		if b.Length == 0 {
			return fmt.Errorf("type 2B bind of length 0: %w", ErrOutOfBounds)
		}
	}
	m := b.MR
	switch {
	case m == nil:
		return fmt.Errorf("no region: %w", ErrInvalidKey)
	case m.dead:
		return fmt.Errorf("region: %w", ErrDeallocated)
	case m.pd != w.pd:
		return fmt.Errorf("region of another PD: %w", ErrPDMismatch)
	case m.access&MWBind == 0:
		return fmt.Errorf("region without MW_BIND: %w", ErrAccess)
	case b.Access&(RemoteWrite|RemoteAtomic) != 0 && m.access&LocalWrite == 0:
		return fmt.Errorf("writable window on a region without LOCAL_WRITE: %w", ErrAccess)
	}
	if b.Addr < m.iova || b.Addr-m.iova > uint64(len(m.buf)) || b.Length > uint64(len(m.buf))-(b.Addr-m.iova) {
		return fmt.Errorf("%#x+%d outside the region: %w", b.Addr, b.Length, ErrOutOfBounds)
	}
	return nil
}

// invalidateMW frees the type 2B window rkey names (InvalidateRKey). qp, when
// not nil, must be the queue pair it is bound to. Called with t.mu held.
func (t *Table) invalidateMW(pd *PD, qp QPRef, rkey uint32) error {
	w := t.mw.byIdx[rkey>>8]
	if w == nil || w.rkey != rkey || w.state != mwValid {
		return ErrInvalidKey
	}
	if w.typ != MWType2B {
		return ErrAccess // type 1 windows are never invalidated (IBA o10-37.2.26)
	}
	if w.pd != pd {
		return ErrPDMismatch
	}
	if qp != nil && w.qp != qp {
		return ErrAccess
	}
	w.unbind()
	w.state = mwFree
	t.gen.Add(1)
	return nil
}
