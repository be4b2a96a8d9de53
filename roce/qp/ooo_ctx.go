package qp

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/wire"
)

// Limits of NewContextPool.
const (
	DefaultContexts = 1 << 16           // contexts of a device's pool unless configured
	MaxContexts     = GroupCtxFirst - 1 // ids are 24 bits, id 0 is never handed out, the top 64 Ki are group contexts
)

// ErrNoContexts: the pool has fewer free contexts than asked for.
var ErrNoContexts = errors.New("qp: no free OOO contexts")

// A ContextPool is a device's OOO receive contexts (the seed's rCxt): every
// OOO queue pair of the device takes its contexts from it in batches
// (Acquire) and gives them back (Release, Destroy). The free contexts form a
// FIFO: Acquire takes from the head, Release appends to the tail, so a
// context comes back into use as late as possible and packets still on
// their way to it from before (trickle traffic) find it free (dropped) or
// with another key (dropped) rather than mistaken for a new operation.
//
// Acquire, Release and Recover are safe from any goroutine; the per-packet
// state (ctxState) belongs to the progress goroutine of the device, which
// runs every queue pair holding contexts of the pool.
type ContextPool struct {
	mu         sync.Mutex
	ctxs       []rcxt // by id; ctxs[0] is never handed out
	head, tail uint32 // the free list (ids, 0: empty)
	free       int
}

// rcxt is one context. own and epoch are what the progress goroutine
// reads, with atomics; next and key change under the pool's lock; st is
// the progress goroutine's alone.
type rcxt struct {
	// own is the holder's QPN << 8 | the current key; 0 while free (QPNs
	// are ≥ 2, so a held context is never 0).
	own atomic.Uint32
	// epoch moves at every Acquire and Recover: the progress goroutine
	// resets st when it finds it moved.
	epoch atomic.Uint32
	next  uint32 // the free list's link
	key   uint8  // the key the next holder gets (bumped at Release and Recover)
	st    *ctxState
}

// ctxState is what a context knows about its current operation (the rCxt
// fields the seed does not list; docs/ooo.md). Only the progress goroutine
// touches it.
type ctxState struct {
	epoch uint32  // the rcxt epoch this state belongs to
	role  ctxRole // what the current operation is to this side
	tid   uint32  // the current transaction id (0: none since acquired)
	// Flags of the current operation.
	done     bool // every byte placed (and its completions produced), or the completion received
	poisoned bool // a protection error: this tid never completes
	busy     bool // READ source: the response is queued or streaming
	acked    bool // this side's WRITE, or a READ it served: the completion packet came
	fifo     bool // half-FIFO: the data goes to this side's receive queue (target, READ sink) or a READ is answered so (source)
	fifoReq  bool // READ source of an OOO_READ_REQ_FROM_FIFO: its user has not answered yet
	// The operation, as its packets describe it.
	total  uint32      // bytes
	seg    uint32      // segment size in bytes (packet i carries offset i × seg)
	npkts  uint32      // packets of the operation
	placed uint32      // distinct packets placed
	bitmap []uint64    // packet indices placed: duplicates are dropped, so placement is idempotent
	base   uint64      // the VA of byte 0 of the operation (the sink's, for a READ source)
	rkey   uint32      // the rkey every packet of the operation names (the sink's, for a READ source)
	notify wire.Notify // who gets completions
	peer   wire.Ctx    // the other side's context: where completions and READ responses go
	tag    uint32      // the initiator's tag
	wrID   uint64      // this side's operations: the work request, for the delivered completion
	condQ  uint8       // this side's component: the conditional queue its delivered completion counts on
	// READ source: the data and how far the response has gone.
	srcVA  uint64
	srcKey uint32
	sent   uint32
	// Third-party source: the sink the response goes to (nil: the
	// connected peer) and the controller its completion goes to.
	sink *sink
	ctl  wire.XTP
}

// ctxRole is what a context's current operation is to the side holding it.
type ctxRole uint8

const (
	roleIdle       ctxRole = iota // no operation yet
	roleTarget                    // a peer's WRITE places data here
	roleWriteInit                 // this side's WRITE: waiting for its completion
	roleReadSink                  // this side's READ: its response places data here
	roleReadSource                // a peer's READ of this side: the response streams from here
)

// NewContextPool makes a pool of n contexts (ids 1..n; 0 < n ≤
// MaxContexts), their first keys drawn from seed (a fixed seed makes keys,
// and so captures, reproducible). The free list starts in id order.
func NewContextPool(n int, seed uint64) (*ContextPool, error) {
	if n <= 0 || n > MaxContexts {
		return nil, fmt.Errorf("qp: context pool: %d contexts out of range 1..%d", n, MaxContexts)
	}
	p := &ContextPool{ctxs: make([]rcxt, n+1), head: 1, tail: uint32(n), free: n}
	x := seed
	for i := 1; i <= n; i++ {
		x += 0x9E3779B97F4A7C15 // splitmix64
		z := x
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		p.ctxs[i].key = uint8(z ^ z>>31)
		if i < n {
			p.ctxs[i].next = uint32(i + 1)
		}
	}
	return p, nil
}

// Len returns the number of contexts; Free those not held.
func (p *ContextPool) Len() int { return len(p.ctxs) - 1 }

// Free returns the number of contexts on the free list.
func (p *ContextPool) Free() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.free
}

// Acquire gives n contexts to the queue pair qpn, from the head of the free
// list, each with transaction id 0 (any tid ≥ 1 starts an operation).
func (p *ContextPool) Acquire(qpn uint32, n int) ([]wire.Ctx, error) {
	if n <= 0 {
		return nil, fmt.Errorf("qp: acquire contexts: count %d", n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n > p.free {
		return nil, wrap(ErrNoContexts, fmt.Sprintf("qp: acquire %d contexts: %d free", n, p.free))
	}
	out := make([]wire.Ctx, n)
	for i := range out {
		id := p.head
		c := &p.ctxs[id]
		p.head = c.next
		c.next = 0
		c.epoch.Add(1)
		c.own.Store(qpn<<8 | uint32(c.key))
		out[i] = wire.MakeCtx(id, c.key)
	}
	p.free -= n
	if p.free == 0 {
		p.tail = 0
	}
	return out, nil
}

// Release gives the contexts held by qpn back, to the tail of the free list,
// with their keys bumped: packets still addressed to them are dropped. It
// fails, releasing none, when one is not held by qpn with that key.
func (p *ContextPool) Release(qpn uint32, ctxs []wire.Ctx) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range ctxs {
		if id := x.ID(); id == 0 || int(id) >= len(p.ctxs) || p.ctxs[id].own.Load() != qpn<<8|uint32(x.Key()) {
			return fmt.Errorf("qp: release context %v: not held by QP %#x", x, qpn)
		}
	}
	for _, x := range ctxs {
		p.release(x.ID())
	}
	return nil
}

// ReleaseAll releases every context qpn holds (at Destroy).
func (p *ContextPool) ReleaseAll(qpn uint32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := 1; id < len(p.ctxs); id++ {
		if o := p.ctxs[id].own.Load(); o != 0 && o>>8 == qpn {
			p.release(uint32(id))
		}
	}
}

func (p *ContextPool) release(id uint32) {
	c := &p.ctxs[id]
	c.own.Store(0)
	c.key++
	if p.tail == 0 {
		p.head = id
	} else {
		p.ctxs[p.tail].next = id
	}
	p.tail = id
	p.free++
}

// Recover gives every context qpn holds a new key and transaction id 0 (the
// seed's recovery): packets sent before, still in flight or replayed, no
// longer match and are dropped as stale contexts. It returns the contexts
// with their new keys, in id order.
func (p *ContextPool) Recover(qpn uint32) []wire.Ctx {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []wire.Ctx
	for id := 1; id < len(p.ctxs); id++ {
		c := &p.ctxs[id]
		if o := c.own.Load(); o == 0 || o>>8 != qpn {
			continue
		}
		c.key++
		c.epoch.Add(1)
		c.own.Store(qpn<<8 | uint32(c.key))
		out = append(out, wire.MakeCtx(uint32(id), c.key))
	}
	return out
}

// Holds reports whether qpn holds x (with x's key).
func (p *ContextPool) Holds(qpn uint32, x wire.Ctx) bool {
	id := x.ID()
	return id != 0 && int(id) < len(p.ctxs) && p.ctxs[id].own.Load() == qpn<<8|uint32(x.Key())
}

// state returns the state of context x for the queue pair qpn, or nil when
// qpn does not hold x with x's key. A state from before the context's last
// Acquire or Recover is reset (transaction id 0, no operation). Progress
// goroutine only; it allocates only the first time a context is used.
func (p *ContextPool) state(qpn uint32, x wire.Ctx) *ctxState {
	id := x.ID()
	if id == 0 || int(id) >= len(p.ctxs) {
		return nil
	}
	c := &p.ctxs[id]
	if c.own.Load() != qpn<<8|uint32(x.Key()) {
		return nil
	}
	ep := c.epoch.Load()
	s := c.st
	if s == nil {
		s = &ctxState{}
		c.st = s
	} else if s.epoch == ep {
		return s
	}
	bm := s.bitmap[:0]
	*s = ctxState{epoch: ep, bitmap: bm}
	return s
}

// start begins operation tid on s: every field but the bitmap's storage is
// set anew and the bitmap is sized for npkts and cleared.
func (s *ctxState) start(role ctxRole, tid, total, seg uint32) {
	bm := s.bitmap
	*s = ctxState{epoch: s.epoch, role: role, tid: tid, total: total, seg: seg}
	s.npkts = 1
	if total > 0 && seg > 0 {
		s.npkts = uint32((uint64(total) + uint64(seg) - 1) / uint64(seg))
	}
	words := int((s.npkts + 63) / 64)
	if cap(bm) < words {
		bm = make([]uint64, words)
	}
	bm = bm[:words]
	clear(bm)
	s.bitmap = bm
}

// mark sets packet idx in the bitmap and reports whether it was clear.
func (s *ctxState) mark(idx uint32) bool {
	w, b := &s.bitmap[idx/64], uint64(1)<<(idx%64)
	if *w&b != 0 {
		return false
	}
	*w |= b
	return true
}
