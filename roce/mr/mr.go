package mr

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Access is a set of memory access flags, with the ibverbs bit values.
type Access uint32

// Access flags. Local read is always allowed.
const (
	LocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	RemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	RemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	RemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	MWBind       Access = 1 << 4 // IBV_ACCESS_MW_BIND: memory windows may be bound to the region
	// ZeroBased (IBV_ACCESS_ZERO_BASED) is a window flag only (type 2B):
	// the peer addresses the window from 0. Regions refuse it.
	ZeroBased Access = 1 << 5

	// RemoteInvalidate (an xdproce flag, no ibverbs bit) lets a peer
	// withdraw the region's rkey with a SEND with Invalidate (or this side
	// with a LOCAL_INV work request). It stands in for the fast-registration
	// regions of the kernel's ib_alloc_mr (IB_MR_TYPE_MEM_REG), which
	// xdproce does not implement and userspace ibverbs cannot register: the
	// only regions rxe lets anyone invalidate. An ordinary region
	// (ibv_reg_mr) refuses it, and so does one registered without this flag.
	// Once invalidated, the rkey is refused like a deregistered one; the
	// region stays usable locally. What a userspace verbs user invalidates
	// for real is a type 2B memory window (mw.go).
	RemoteInvalidate Access = 1 << 31

	allAccess = LocalWrite | RemoteWrite | RemoteRead | RemoteAtomic | MWBind | ZeroBased | RemoteInvalidate
)

var accessNames = [32]string{0: "LOCAL_WRITE", 1: "REMOTE_WRITE", 2: "REMOTE_READ", 3: "REMOTE_ATOMIC",
	4: "MW_BIND", 5: "ZERO_BASED", 31: "REMOTE_INVALIDATE"}

// String lists the flags as "LOCAL_WRITE|REMOTE_READ"; the empty set is "0".
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var b strings.Builder
	for i, n := range accessNames {
		if n != "" && a&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('|')
			}
			b.WriteString(n)
		}
	}
	if rest := a &^ allAccess; rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		fmt.Fprintf(&b, "%#x", uint32(rest))
	}
	return b.String()
}

// Sentinel errors. Lookups return them unwrapped (they are on the per-packet
// path); other methods wrap them with context.
var (
	ErrInvalidKey  = errors.New("mr: invalid key")
	ErrOutOfBounds = errors.New("mr: access out of bounds")
	ErrAccess      = errors.New("mr: access not permitted")
	ErrPDMismatch  = errors.New("mr: protection domain mismatch")
	ErrLimit       = errors.New("limit reached") // shared with roce.ErrLimit (QPs too), so no "mr:" prefix
	ErrBusy        = errors.New("mr: protection domain in use")
	ErrDeallocated = errors.New("mr: already released")
	ErrBound       = errors.New("mr: memory windows bound to the region")
)

// DefaultMaxMRs is the number of regions a Table holds unless WithMaxMRs says
// otherwise.
const DefaultMaxMRs = 1 << 16

// An Option configures a Table.
type Option func(*Table)

// WithMaxMRs limits the number of registered regions (n > 0).
func WithMaxMRs(n int) Option {
	return func(t *Table) {
		if n > 0 {
			t.maxMRs = n
		}
	}
}

// DefaultRetiredKeys is how many released rkeys a Table remembers (and never
// issues again) unless WithRetiredKeys says otherwise.
const DefaultRetiredKeys = 1 << 16

// WithRetiredKeys sets how many released rkeys (deregistered or invalidated)
// the table remembers so that it never issues them again; the oldest are
// forgotten first. 0 keeps the default.
func WithRetiredKeys(n int) Option {
	return func(t *Table) {
		if n > 0 {
			t.retiredMax = n
		}
	}
}

// WithRand draws keys from r instead of crypto/rand, so tests can be
// deterministic. Keys stay non-zero and unique whatever r returns (a source
// that keeps repeating itself makes Register fail).
func WithRand(r io.Reader) Option {
	return func(t *Table) { t.rand = r }
}

// A Table holds the regions of one device, keyed by lkey and rkey. The zero
// value is not usable; call NewTable.
type Table struct {
	mu sync.RWMutex
	// gen counts the removals and rebinds of keys (Deregister,
	// InvalidateRKey, window binds and deallocation); a Cache entry is good
	// while it has not moved. Written under mu.
	gen    atomic.Uint64
	lkeys  map[uint32]*MR
	rkeys  map[uint32]*MR
	maxMRs int
	rand   io.Reader
	nMRs   int
	mw     mwTable // memory windows (mw.go)

	// Released rkeys, not issued again: a set and its FIFO.
	retired    map[uint32]struct{}
	retiredQ   []uint32
	retiredMax int
}

// NewTable returns an empty table.
func NewTable(opts ...Option) *Table {
	t := &Table{
		lkeys:      make(map[uint32]*MR),
		rkeys:      make(map[uint32]*MR),
		maxMRs:     DefaultMaxMRs,
		rand:       rand.Reader,
		retired:    make(map[uint32]struct{}),
		retiredMax: DefaultRetiredKeys,
	}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Len returns the number of registered regions.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.nMRs
}

// A PD is a protection domain: regions and queue pairs that may touch each
// other's memory.
type PD struct {
	t     *Table
	mu    sync.Mutex
	users int // regions + holds
	dead  bool
}

// AllocPD returns a new protection domain.
func (t *Table) AllocPD() *PD { return &PD{t: t} }

// Table returns the table the PD belongs to.
func (pd *PD) Table() *Table { return pd.t }

// Hold records a user of the PD (a queue pair), so that Dealloc fails until
// Release. It fails with ErrDeallocated on a released PD.
func (pd *PD) Hold() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return fmt.Errorf("mr: hold pd: %w", ErrDeallocated)
	}
	pd.users++
	return nil
}

// Release undoes one Hold.
func (pd *PD) Release() {
	pd.mu.Lock()
	if pd.users > 0 {
		pd.users--
	}
	pd.mu.Unlock()
}

// Dealloc releases the PD. It fails with ErrBusy while regions or queue pairs
// use it, and with ErrDeallocated when called twice.
func (pd *PD) Dealloc() error {
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.dead {
		return fmt.Errorf("mr: dealloc pd: %w", ErrDeallocated)
	}
	if pd.users > 0 {
		return fmt.Errorf("mr: dealloc pd: %d users: %w", pd.users, ErrBusy)
	}
	pd.dead = true
	return nil
}

// An MR is a registered memory region.
type MR struct {
	pd     *PD
	buf    []byte
	iova   uint64
	access Access
	lkey   uint32
	rkey   uint32
	dead   bool // guarded by pd.t.mu
	nmw    int  // windows bound to the region, guarded by pd.t.mu
	// release, when set (RegisterOwned), frees buf after Deregister.
	release func() error
}

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Addr returns the IOVA of the first byte.
func (m *MR) Addr() uint64 { return m.iova }

// Len returns the length in bytes.
func (m *MR) Len() int { return len(m.buf) }

// Access returns the access flags.
func (m *MR) Access() Access { return m.access }

// PD returns the protection domain.
func (m *MR) PD() *PD { return m.pd }

// Bytes returns the registered buffer.
func (m *MR) Bytes() []byte { return m.buf }

// Register registers buf with the given access; its IOVA is the address of
// buf[0]. ibverbs requires LocalWrite together with RemoteWrite or
// RemoteAtomic, and so do we.
func (pd *PD) Register(buf []byte, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("mr: register: empty buffer")
	}
	return pd.RegisterIOVA(buf, uint64(uintptr(unsafe.Pointer(&buf[0]))), access)
}

// RegisterOwned is Register for memory the region owns: a successful
// Deregister then calls release (which frees buf) and returns its error.
func (pd *PD) RegisterOwned(buf []byte, access Access, release func() error) (*MR, error) {
	m, err := pd.Register(buf, access)
	if err != nil {
		return nil, err
	}
	m.release = release
	return m, nil
}

// RegisterIOVA registers buf, addressed by the peer and by SGEs from iova on.
func (pd *PD) RegisterIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	if len(buf) == 0 {
		return nil, errors.New("mr: register: empty buffer")
	}
	if access&^allAccess != 0 {
		return nil, fmt.Errorf("mr: register: unknown access flags %#x", uint32(access&^allAccess))
	}
	if access&ZeroBased != 0 {
		return nil, errors.New("mr: register: ZERO_BASED regions are not supported (windows may be zero-based)")
	}
	if access&(RemoteWrite|RemoteAtomic) != 0 && access&LocalWrite == 0 {
		return nil, fmt.Errorf("mr: register: %v needs LOCAL_WRITE", access)
	}
	if iova+uint64(len(buf))-1 < iova {
		return nil, fmt.Errorf("mr: register: iova %#x + %d wraps around", iova, len(buf))
	}
	pd.mu.Lock()
	if pd.dead {
		pd.mu.Unlock()
		return nil, fmt.Errorf("mr: register: %w", ErrDeallocated)
	}
	pd.users++
	pd.mu.Unlock()

	m := &MR{pd: pd, buf: buf, iova: iova, access: access}
	t := pd.t
	t.mu.Lock()
	err := t.insert(m)
	t.mu.Unlock()
	if err != nil {
		pd.Release()
		return nil, err
	}
	return m, nil
}

func (t *Table) insert(m *MR) error {
	if t.nMRs >= t.maxMRs {
		return fmt.Errorf("mr: register: %d regions: %w", t.maxMRs, ErrLimit)
	}
	var err error
	if m.lkey, err = t.newKey(t.lkeys, nil); err != nil {
		return err
	}
	if m.rkey, err = t.newKey(t.rkeys, t.retired); err != nil {
		return err
	}
	t.lkeys[m.lkey] = m
	t.rkeys[m.rkey] = m
	t.mw.addTop(m.rkey)
	t.nMRs++
	return nil
}

// newKey draws a non-zero key neither in used nor in retired. Called with
// t.mu held.
func (t *Table) newKey(used map[uint32]*MR, retired map[uint32]struct{}) (uint32, error) {
	var b [4]byte
	for range 64 {
		if _, err := io.ReadFull(t.rand, b[:]); err != nil {
			return 0, fmt.Errorf("mr: register: key source: %w", err)
		}
		k := binary.LittleEndian.Uint32(b[:])
		if k == 0 {
			continue
		}
		if _, dup := used[k]; dup {
			continue
		}
		if retired != nil && t.mw.owns(k) {
			continue // a window's rkey space (index<<8 | key)
		}
		if _, old := retired[k]; !old {
			return k, nil
		}
	}
	return 0, errors.New("mr: register: key source keeps repeating itself")
}

// Deregister removes the region; its keys are refused from the moment the call
// returns. A second call fails with ErrDeallocated; while memory windows are
// bound to the region it fails with ErrBound (as rxe refuses it).
func (m *MR) Deregister() error {
	t := m.pd.t
	t.mu.Lock()
	if m.dead {
		t.mu.Unlock()
		return fmt.Errorf("mr: deregister: %w", ErrDeallocated)
	}
	if m.nmw > 0 {
		n := m.nmw
		t.mu.Unlock()
		return fmt.Errorf("mr: deregister: %d windows: %w", n, ErrBound)
	}
	m.dead = true
	t.gen.Add(1)
	if t.lkeys[m.lkey] == m {
		delete(t.lkeys, m.lkey)
	}
	if t.rkeys[m.rkey] == m { // not if invalidated before
		delete(t.rkeys, m.rkey)
		t.retire(m.rkey)
	}
	t.nMRs--
	t.mu.Unlock()
	m.pd.Release()
	if m.release != nil {
		return m.release()
	}
	return nil
}

// InvalidateRKey withdraws a remote key of pd, as a SEND with Invalidate
// (qp: the queue pair it arrived on) or a LOCAL_INV work request (qp nil)
// does. A region's rkey is refused from then on (the region stays usable
// locally); only a region registered with RemoteInvalidate may be
// invalidated, any other fails with ErrAccess and keeps its key (as rxe
// refuses invalidation of an ibv_reg_mr region), and one with windows bound
// fails with ErrBound. A type 2B window's rkey frees the window
// (invalidateMW, mw.go). It returns ErrInvalidKey, ErrPDMismatch, ErrAccess
// or ErrBound, unwrapped.
func (t *Table) InvalidateRKey(pd *PD, qp QPRef, rkey uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.rkeys[rkey]
	if !ok {
		return t.invalidateMW(pd, qp, rkey)
	}
	if m.pd != pd {
		return ErrPDMismatch
	}
	if m.access&RemoteInvalidate == 0 {
		return ErrAccess
	}
	if m.nmw > 0 {
		return ErrBound
	}
	t.gen.Add(1)
	delete(t.rkeys, rkey)
	t.retire(rkey)
	return nil
}

// retire remembers a released rkey. Called with t.mu held.
func (t *Table) retire(k uint32) {
	if len(t.retiredQ) >= t.retiredMax {
		delete(t.retired, t.retiredQ[0])
		t.mw.dropTop(t.retiredQ[0])
		t.retiredQ = t.retiredQ[1:]
	}
	t.retired[k] = struct{}{}
	t.retiredQ = append(t.retiredQ, k)
}

// Remote returns n bytes of memory at va for a peer holding rkey on queue
// pair qp of pd, if the key grants need (RemoteWrite, RemoteRead or
// RemoteAtomic): a region's rkey, or a bound window's (mw.go: inside the
// window only; a type 2B window only on the queue pair it is bound to).
// Errors: ErrInvalidKey, ErrPDMismatch, ErrAccess, ErrOutOfBounds. It
// allocates nothing.
func (t *Table) Remote(pd *PD, qp QPRef, rkey uint32, va uint64, n uint64, need Access) ([]byte, error) {
	t.mu.RLock()
	g := t.remoteTarget(rkey)
	t.mu.RUnlock()
	return g.check(pd, qp, va, n, need)
}

// Local returns n bytes of registered memory at addr for an SGE holding lkey,
// if the region belongs to pd and grants need (LocalWrite to write into it; 0
// to read). Errors as for Remote.
func (t *Table) Local(pd *PD, lkey uint32, addr uint64, n uint64, need Access) ([]byte, error) {
	t.mu.RLock()
	g := t.lkeys[lkey].target()
	t.mu.RUnlock()
	return g.check(pd, nil, addr, n, need)
}

// remoteTarget resolves an rkey: a region's, else a bound window's. Called
// with t.mu held.
func (t *Table) remoteTarget(rkey uint32) target {
	if m := t.rkeys[rkey]; m != nil {
		return m.target()
	}
	return t.mw.target(rkey)
}

// A target is the memory a key resolves to, as the key's holder addresses
// it: buf[0] is at address base. ok is false for a key that names nothing.
type target struct {
	ok     bool
	pd     *PD
	qp     QPRef // a type 2B window's queue pair; nil: any queue pair of pd
	buf    []byte
	base   uint64
	access Access
}

func (m *MR) target() target {
	if m == nil {
		return target{}
	}
	return target{ok: true, pd: m.pd, buf: m.buf, base: m.iova, access: m.access}
}

// A Cache remembers what one key last resolved to, so that the packets of a
// message, which all name the same key, find it without the table's lock
// and map: on the data path the lock's shared counter and the map lookup
// cost more than the rest of the bounds check. An entry is used only while
// no key has been removed or rebound since it was filled (Deregister,
// InvalidateRKey, window binds and deallocation bump the table's
// generation), so a cached key is refused from the moment either call
// returns, as a looked-up one. The zero Cache is empty; a Cache must not be
// used by two goroutines at once, nor with two tables.
type Cache struct {
	g   target
	gen uint64
	key uint32
}

// RemoteCached is Remote through c.
func (t *Table) RemoteCached(c *Cache, pd *PD, qp QPRef, rkey uint32, va uint64, n uint64, need Access) ([]byte, error) {
	if g := t.gen.Load(); !c.g.ok || c.key != rkey || c.gen != g {
		t.mu.RLock()
		*c = Cache{g: t.remoteTarget(rkey), gen: g, key: rkey}
		t.mu.RUnlock()
	}
	return c.g.check(pd, qp, va, n, need)
}

// LocalCached is Local through c.
func (t *Table) LocalCached(c *Cache, pd *PD, lkey uint32, addr uint64, n uint64, need Access) ([]byte, error) {
	if g := t.gen.Load(); !c.g.ok || c.key != lkey || c.gen != g {
		t.mu.RLock()
		*c = Cache{g: t.lkeys[lkey].target(), gen: g, key: lkey}
		t.mu.RUnlock()
	}
	return c.g.check(pd, nil, addr, n, need)
}

func (g *target) check(pd *PD, qp QPRef, va, n uint64, need Access) ([]byte, error) {
	if !g.ok {
		return nil, ErrInvalidKey
	}
	if g.pd != pd {
		return nil, ErrPDMismatch
	}
	if g.qp != nil && g.qp != qp {
		return nil, ErrInvalidKey // a type 2B window bound to another queue pair
	}
	if g.access&need != need {
		return nil, ErrAccess
	}
	size := uint64(len(g.buf))
	if va < g.base {
		return nil, ErrOutOfBounds
	}
	off := va - g.base
	if off > size || n > size-off {
		return nil, ErrOutOfBounds
	}
	return g.buf[off : off+n : off+n], nil
}

// An SGE is one element of a scatter/gather list: Length bytes at Addr in the
// region with local key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}
