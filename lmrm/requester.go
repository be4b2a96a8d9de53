package lmrm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/roce"
)

// Config configures a Requester. The zero Config means the defaults.
type Config struct {
	// Grow allows one more LMRM_ALLOC, of the first one's size, when every
	// slot is taken (Reserve returns ErrPending until its answer comes).
	Grow bool
	// Depth bounds the data writes in flight (default DefaultDepth).
	Depth int
	// IOVABase, when not zero, gives every region the requester registers
	// an I/O virtual address counted up from it (4 KiB-aligned): for
	// reproducible captures.
	IOVABase uint64
}

// DefaultDepth is Config.Depth's default.
const DefaultDepth = 256

// ctlBufs is the number of control receive and send buffers of a requester.
const ctlBufs = 8

// QueueDepths returns what the queue pair and completion queue under a
// Requester with this Config need at least.
func (c Config) QueueDepths() (send, recv, cq int) {
	d := c.Depth
	if d <= 0 {
		d = DefaultDepth
	}
	return d + ctlBufs, ctlBufs, d + 2*ctlBufs
}

// Slot is a reserved remote buffer: which pool, which slot, and how many
// bytes it holds.
type Slot struct {
	Pool  uint8
	Index uint32
	Size  uint32
}

// Slot states in a pool's metadata.
const (
	slotFree = iota
	slotReserved
	slotInFlight
)

// pool is the requester's metadata for one granted memory range: one state
// per remote slot, a FIFO of free slots, and a local staging region the
// data is written from.
type pool struct {
	id       uint8
	addr     uint64
	rkey     uint32
	slotSize uint32
	state    []uint8
	free     []uint32 // ring of free slots
	head, n  int
	staging  *roce.MR
	revoked  bool
	reserved int
	inFlight int
}

// Stats counts what a Requester holds and did.
type Stats struct {
	Pools      int // granted pools (revoked ones included)
	Free       int // slots of live pools free to reserve
	Reserved   int // reserved, not yet written
	InFlight   int // written, not yet released by the provider
	Writing    int // writes posted whose completion has not come
	AllocsSent int
	Releases   int // LMRM_RELEASE messages received
	Writes     uint64
}

// A Requester asks a provider for memory and writes messages into it. Its
// methods are safe for concurrent use; nothing happens between Progress
// calls.
type Requester struct {
	mu     sync.Mutex
	c      ctl
	cfg    Config
	pools  []*pool
	asked  *Msg // the LMRM_ALLOC without answer, if any
	first  Msg  // the first LMRM_ALLOC (Grow repeats it)
	grown  bool
	writes int
	stats  Stats
	wsge   [1]roce.SGE
}

// NewRequester makes a Requester over q, an RC queue pair of pd connected
// (RTS) to the provider's, whose completions arrive on cq, with at least
// cfg.QueueDepths.
func NewRequester(q *roce.QP, pd *roce.PD, cq *roce.CQ, cfg *Config) (*Requester, error) {
	return newRequester(q, pd, cq, cfg)
}

func newRequester(q cQP, pd cPD, cq *roce.CQ, cfg *Config) (*Requester, error) {
	r := &Requester{}
	if cfg != nil {
		r.cfg = *cfg
	}
	if r.cfg.Depth == 0 {
		r.cfg.Depth = DefaultDepth
	}
	if r.cfg.Depth < 1 || r.cfg.Depth > 1<<16 {
		return nil, fmt.Errorf("lmrm: new requester: depth %d out of range (1..65536)", r.cfg.Depth)
	}
	send, _, _ := r.cfg.QueueDepths()
	if err := r.c.init(q, pd, cq, r.cfg.IOVABase, ctlBufs, ctlBufs, send); err != nil {
		return nil, fmt.Errorf("lmrm: new requester: %w", err)
	}
	return r, nil
}

// Alloc sends one LMRM_ALLOC for bytes of memory in slots of at least
// minSlot bytes. The pool exists once Progress has seen the answer
// (Stats().Pools).
func (r *Requester) Alloc(bytes uint64, minSlot uint32) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if bytes == 0 || minSlot == 0 || uint64(minSlot) > bytes {
		return fmt.Errorf("lmrm: alloc %d B in slots of %d B: want 0 < slot ≤ bytes", bytes, minSlot)
	}
	if r.c.err != nil {
		return fmt.Errorf("lmrm: alloc: %w", r.c.err)
	}
	if r.asked != nil {
		return fmt.Errorf("lmrm: alloc: %w", ErrPending)
	}
	m := Msg{Kind: KAlloc, Bytes: bytes, MinSlot: minSlot}
	if err := r.sendAlloc(&m); err != nil {
		return fmt.Errorf("lmrm: alloc: %w", err)
	}
	if r.stats.AllocsSent == 1 {
		r.first = m
	}
	return nil
}

func (r *Requester) sendAlloc(m *Msg) error {
	if err := r.c.send(m); err != nil {
		return err
	}
	r.asked = m
	r.stats.AllocsSent++
	return nil
}

// Reserve takes a free slot, the oldest free one of the first live pool
// that has one. When none is free it returns ErrExhausted, or with
// Config.Grow sends one more LMRM_ALLOC (once) and returns ErrPending; with
// every pool revoked it returns ErrRevoked.
func (r *Requester) Reserve() (Slot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.err != nil {
		return Slot{}, fmt.Errorf("lmrm: reserve: %w", r.c.err)
	}
	live := 0
	for _, p := range r.pools {
		if p.revoked {
			continue
		}
		live++
		if p.n > 0 {
			s := p.free[p.head]
			p.head = (p.head + 1) % len(p.free)
			p.n--
			p.state[s] = slotReserved
			p.reserved++
			return Slot{Pool: p.id, Index: s, Size: p.slotSize}, nil
		}
	}
	switch {
	case r.asked != nil:
		return Slot{}, fmt.Errorf("lmrm: reserve: %w", ErrPending)
	case len(r.pools) == 0:
		return Slot{}, fmt.Errorf("lmrm: reserve: %w", ErrNoPool)
	case live == 0:
		return Slot{}, fmt.Errorf("lmrm: reserve: %w", ErrRevoked)
	case r.cfg.Grow && !r.grown:
		m := r.first
		if err := r.sendAlloc(&m); err != nil {
			return Slot{}, fmt.Errorf("lmrm: reserve: grow: %w", err)
		}
		r.grown = true
		return Slot{}, fmt.Errorf("lmrm: reserve: %w", ErrPending)
	}
	return Slot{}, fmt.Errorf("lmrm: reserve: %w", ErrExhausted)
}

// slotOf checks that s names a slot of a pool in state want.
func (r *Requester) slotOf(s Slot, want uint8) (*pool, error) {
	if int(s.Pool) >= len(r.pools) || s.Index >= uint32(len(r.pools[s.Pool].state)) {
		return nil, fmt.Errorf("pool %d slot %d does not exist", s.Pool, s.Index)
	}
	p := r.pools[s.Pool]
	if p.revoked {
		return nil, fmt.Errorf("pool %d: %w", s.Pool, ErrRevoked)
	}
	if p.state[s.Index] != want {
		return nil, fmt.Errorf("pool %d slot %d is not reserved", s.Pool, s.Index)
	}
	return p, nil
}

// Staging returns the local buffer a reserved slot is written from (its
// slot size long). Filling it and passing a prefix of it to Write spares
// Write's copy.
func (r *Requester) Staging(s Slot) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.slotOf(s, slotReserved)
	if err != nil {
		return nil, fmt.Errorf("lmrm: staging: %w", err)
	}
	off := uint64(s.Index) * uint64(p.slotSize)
	return p.staging.Bytes()[off : off+uint64(p.slotSize)], nil
}

// Write copies data into s's staging buffer and RDMA-writes it, with the
// immediate naming pool and slot, into the provider's slot. s must be a
// reserved slot; it stays in flight until the provider releases it. With
// Config.Depth writes in flight it returns ErrBusy (call Progress).
func (r *Requester) Write(s Slot, data []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.err != nil {
		return fmt.Errorf("lmrm: write: %w", r.c.err)
	}
	p, err := r.slotOf(s, slotReserved)
	if err != nil {
		return fmt.Errorf("lmrm: write: %w", err)
	}
	if len(data) > int(p.slotSize) {
		return fmt.Errorf("lmrm: write %d B: slot holds %d", len(data), p.slotSize)
	}
	if r.writes == r.cfg.Depth || r.c.sqUsed == r.c.sqDepth {
		return fmt.Errorf("lmrm: write: %w", ErrBusy)
	}
	off := uint64(s.Index) * uint64(p.slotSize)
	if dst := p.staging.Bytes()[off:]; len(data) > 0 && &dst[0] != &data[0] {
		copy(dst, data)
	}
	r.wsge[0] = roce.SGE{Addr: p.staging.Addr() + off, Length: uint32(len(data)), LKey: p.staging.LKey()}
	sgl := r.wsge[:]
	if len(data) == 0 {
		sgl = nil
	}
	err = r.c.q.PostSend(roce.SendWR{ID: idWrite | uint64(s.Pool)<<20 | uint64(s.Index), Opcode: roce.WRRDMAWriteImm,
		Flags: roce.Signaled, SGL: sgl, Imm: Imm(s.Pool, s.Index), RemoteAddr: p.addr + off, RKey: p.rkey})
	if err != nil {
		return fmt.Errorf("lmrm: write: %w", err)
	}
	r.c.sqUsed++
	r.writes++
	p.state[s.Index] = slotInFlight
	p.reserved--
	p.inFlight++
	r.stats.Writes++
	return nil
}

// Progress handles what completed: the provider's answers, releases and
// revocations, and the completions of writes. A write the provider refused
// (remote access error: the pool was deregistered, or its rkey was wrong)
// fails the requester with ErrRevoked; a write that failed otherwise (its
// retries exhausted, the queue pair in error) fails it with the completion
// status; a malformed or hostile message fails it with ErrProtocol.
// Failures are sticky.
func (r *Requester) Progress() error { return r.progress(context.Background(), false) }

// Wait is Progress that first blocks until a completion is there. When ctx
// ends first it returns ctx's error (wrapped), which does not fail the
// requester. It holds the requester while it blocks: call it from the
// goroutine that drives the requester.
func (r *Requester) Wait(ctx context.Context) error { return r.progress(ctx, true) }

func (r *Requester) progress(ctx context.Context, block bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.err != nil {
		return fmt.Errorf("lmrm: progress: %w", r.c.err)
	}
	if err := r.c.reap(ctx, block, r.complete); err != nil {
		if block && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return fmt.Errorf("lmrm: wait: %w", err)
		}
		r.c.err = err
		return fmt.Errorf("lmrm: progress: %w", err)
	}
	return nil
}

func (r *Requester) complete(wc *roce.WC, msg []byte) error {
	if wc.ID&idKind == idWrite {
		r.writes--
		if wc.Status == roce.WCSuccess {
			return nil
		}
		pi, si := int(wc.ID>>20&0xFF), wc.ID&(MaxSlots-1)
		if wc.Status != roce.WCRemAccessErr {
			// Not the provider's refusal: the path or the queue pair
			// failed (retries exhausted, flushed), the pool stands.
			return fmt.Errorf("write into pool %d slot %d completed with %v", pi, si, wc.Status)
		}
		if pi < len(r.pools) {
			r.pools[pi].revoked = true
		}
		return fmt.Errorf("write into pool %d slot %d completed with %v: %w", pi, si, wc.Status, ErrRevoked)
	}
	if msg == nil {
		return fmt.Errorf("%w: unexpected data write (immediate %#x) toward the requester", ErrProtocol, wc.ImmData)
	}
	m := &r.c.msg
	if err := Decode(msg, m); err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	switch m.Kind {
	case KAllocAck:
		return r.granted(m)
	case KRelease:
		return r.released(m)
	case KRevoke:
		if int(m.Pool) >= len(r.pools) {
			return fmt.Errorf("%w: %v of unknown pool %d", ErrProtocol, m.Kind, m.Pool)
		}
		r.pools[m.Pool].revoked = true
		return nil
	}
	return fmt.Errorf("%w: %v toward the requester", ErrProtocol, m.Kind)
}
