package lmrm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/xdproce/xdproce/roce"
)

// ProviderConfig configures a Provider. The zero value means the defaults.
type ProviderConfig struct {
	// MaxBytes bounds the memory the provider grants over all pools
	// (default DefaultMaxBytes); an LMRM_ALLOC beyond it is refused.
	MaxBytes uint64
	// Batch is how many consumed slots of a pool make an LMRM_RELEASE
	// (default: a quarter of the pool's slots, at most MaxRelease). A Batch
	// larger than a pool leaves its slots to Flush.
	Batch int
	// RecvDepth is the number of receives posted: bounds the data writes
	// that may arrive before Progress (default DefaultRecvDepth).
	RecvDepth int
	// IOVABase: as Config.IOVABase.
	IOVABase uint64
}

// Defaults of ProviderConfig.
const (
	DefaultMaxBytes  = 64 << 20
	DefaultRecvDepth = 128
)

// QueueDepths returns what the queue pair and completion queue under a
// Provider with this Config need at least.
func (c ProviderConfig) QueueDepths() (send, recv, cq int) {
	d := c.RecvDepth
	if d <= 0 {
		d = DefaultRecvDepth
	}
	return provSendBufs, d, d + provSendBufs
}

// provSendBufs is the number of control send buffers of a provider: enough
// that releases rarely wait for one (held-back releases coalesce).
const provSendBufs = 32

// DeliverFunc receives one message: the pool and slot it was written into,
// and its bytes, valid only during the call. The slot counts as consumed
// when the function returns.
type DeliverFunc func(pool uint8, slot uint32, b []byte)

// ppool is a pool the provider granted.
type ppool struct {
	mr       *roce.MR
	slotSize uint32
	count    uint32
	batch    int
	consumed []uint32 // slots delivered, not yet released
	held     []bool   // by slot: delivered, not yet released
}

// ProviderStats counts what a Provider holds and did.
type ProviderStats struct {
	Pools           int    // pools granted and not revoked
	RegisteredBytes uint64 // bytes of live pools (count × slot size)
	Delivered       uint64
	Releases        uint64 // LMRM_RELEASE sent
}

// A Provider grants memory to a requester and delivers what it writes. Its
// methods are safe for concurrent use; nothing happens between Progress
// calls.
type Provider struct {
	mu      sync.Mutex
	c       ctl
	cfg     ProviderConfig
	deliver DeliverFunc
	pools   []*ppool
	granted uint64
	stats   ProviderStats
	rel     Msg
}

// NewProvider makes a Provider over q, an RC queue pair of pd connected
// (RTS) to the requester's, whose completions arrive on cq, with at least
// cfg.QueueDepths; deliver receives the messages.
func NewProvider(q *roce.QP, pd *roce.PD, cq *roce.CQ, cfg *ProviderConfig, deliver DeliverFunc) (*Provider, error) {
	return newProvider(q, pd, cq, cfg, deliver)
}

func newProvider(q cQP, pd cPD, cq *roce.CQ, cfg *ProviderConfig, deliver DeliverFunc) (*Provider, error) {
	p := &Provider{deliver: deliver, rel: Msg{Kind: KRelease, Slots: make([]uint32, 0, MaxRelease)}}
	if cfg != nil {
		p.cfg = *cfg
	}
	if p.cfg.MaxBytes == 0 {
		p.cfg.MaxBytes = DefaultMaxBytes
	}
	if p.cfg.RecvDepth == 0 {
		p.cfg.RecvDepth = DefaultRecvDepth
	}
	if p.cfg.Batch < 0 || p.cfg.Batch > MaxRelease || p.cfg.RecvDepth < 1 || p.cfg.RecvDepth > 1<<16 || deliver == nil {
		return nil, fmt.Errorf("lmrm: new provider: batch %d (0..%d), recv depth %d (1..65536) or no deliver function",
			p.cfg.Batch, MaxRelease, p.cfg.RecvDepth)
	}
	if err := p.c.init(q, pd, cq, p.cfg.IOVABase, p.cfg.RecvDepth, provSendBufs, provSendBufs); err != nil {
		return nil, fmt.Errorf("lmrm: new provider: %w", err)
	}
	return p, nil
}

// Progress answers allocation requests, delivers the data written, and
// sends an LMRM_RELEASE whenever a pool's batch of consumed slots is full.
// A write into an unknown slot or one delivered and not yet released, or a
// malformed message, fails the provider with ErrProtocol. Failures are sticky.
func (p *Provider) Progress() error { return p.progress(context.Background(), false) }

// Wait is Progress that first blocks until a completion is there. When ctx
// ends first it returns ctx's error (wrapped), which does not fail the
// provider. It holds the provider while it blocks: call it from the
// goroutine that drives the provider.
func (p *Provider) Wait(ctx context.Context) error { return p.progress(ctx, true) }

func (p *Provider) progress(ctx context.Context, block bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.err != nil {
		return fmt.Errorf("lmrm: progress: %w", p.c.err)
	}
	err := p.c.reap(ctx, block, p.complete)
	if err != nil && block && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("lmrm: wait: %w", err)
	}
	if err == nil {
		err = p.releaseDue()
	}
	if err != nil {
		p.c.err = err
		return fmt.Errorf("lmrm: progress: %w", err)
	}
	return nil
}

func (p *Provider) complete(wc *roce.WC, msg []byte) error {
	if msg == nil {
		return p.data(wc)
	}
	m := &p.c.msg
	if err := Decode(msg, m); err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if m.Kind != KAlloc {
		return fmt.Errorf("%w: %v toward the provider", ErrProtocol, m.Kind)
	}
	return p.alloc(m)
}

// alloc answers an LMRM_ALLOC: count = ⌈bytes/slot⌉ slots of the minimum
// slot size, registered for remote write, or a refusal.
func (p *Provider) alloc(m *Msg) error {
	ack := Msg{Kind: KAllocAck, Pool: uint8(len(p.pools)), Status: AckRefused}
	count := (m.Bytes + uint64(m.MinSlot) - 1) / max(uint64(m.MinSlot), 1)
	size := count * uint64(m.MinSlot)
	if m.MinSlot > 0 && count > 0 && count <= MaxSlots && len(p.pools) < 256 && size <= p.cfg.MaxBytes-p.granted {
		mr, err := p.c.register(make([]byte, size), roce.LocalWrite|roce.RemoteWrite)
		if err == nil {
			batch := p.cfg.Batch
			if batch == 0 {
				batch = min(max(int(count)/4, 1), MaxRelease)
			}
			p.pools = append(p.pools, &ppool{mr: mr, slotSize: m.MinSlot, count: uint32(count), batch: batch, held: make([]bool, count)})
			p.granted += size
			ack = Msg{Kind: KAllocAck, Pool: ack.Pool, Addr: mr.Addr(), RKey: mr.RKey(), SlotSize: m.MinSlot, Count: uint32(count)}
		}
	}
	if err := p.c.send(&ack); err != nil {
		return err
	}
	return nil
}

// data delivers one data write and releases a batch when it is full.
func (p *Provider) data(wc *roce.WC) error {
	pi, slot, ok := ParseImm(wc.ImmData)
	if !ok || int(pi) >= len(p.pools) || p.pools[pi].mr == nil || slot >= p.pools[pi].count || wc.ByteLen > p.pools[pi].slotSize {
		return fmt.Errorf("%w: data write with immediate %#x (%d B) names no live slot", ErrProtocol, wc.ImmData, wc.ByteLen)
	}
	pl := p.pools[pi]
	if pl.held[slot] {
		return fmt.Errorf("%w: pool %d slot %d written again before its release", ErrProtocol, pi, slot)
	}
	pl.held[slot] = true
	off := uint64(slot) * uint64(pl.slotSize)
	p.deliver(pi, slot, pl.mr.Bytes()[off:off+uint64(wc.ByteLen)])
	p.stats.Delivered++
	pl.consumed = append(pl.consumed, slot)
	return p.release(pi, pl.batch)
}

// release sends LMRM_RELEASEs of pool pi's consumed slots (at most
// MaxRelease each) while at least least are consumed. With every send buffer
// busy it stops without error: the rest goes in a later Progress.
func (p *Provider) release(pi uint8, least int) error {
	pl := p.pools[pi]
	for len(pl.consumed) > 0 && len(pl.consumed) >= least {
		n := len(pl.consumed)
		if n > MaxRelease {
			n = MaxRelease
		}
		p.rel.Pool = pi
		p.rel.Slots = append(p.rel.Slots[:0], pl.consumed[:n]...)
		if err := p.c.send(&p.rel); errors.Is(err, ErrBusy) {
			return nil
		} else if err != nil {
			return err
		}
		for _, s := range pl.consumed[:n] {
			pl.held[s] = false
		}
		pl.consumed = append(pl.consumed[:0], pl.consumed[n:]...)
		p.stats.Releases++
	}
	return nil
}

// releaseDue sends the releases whose batch is full (those a busy send
// queue held back included).
func (p *Provider) releaseDue() error {
	for i, pl := range p.pools {
		if pl.mr != nil {
			if err := p.release(uint8(i), pl.batch); err != nil {
				return err
			}
		}
	}
	return nil
}

// Flush releases every pool's consumed slots now, batch full or not; with
// every send buffer busy it returns ErrBusy (Progress, then Flush again).
func (p *Provider) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, pl := range p.pools {
		if pl.mr == nil {
			continue
		}
		if err := p.release(uint8(i), 1); err != nil {
			return fmt.Errorf("lmrm: flush: %w", err)
		}
		if len(pl.consumed) > 0 {
			return fmt.Errorf("lmrm: flush: pool %d: %d slots left: %w", i, len(pl.consumed), ErrBusy)
		}
	}
	return nil
}

// Revoke withdraws pool pi: it sends LMRM_REVOKE, then deregisters the
// pool's memory, so that later writes into it fail at the requester with a
// remote access error.
func (p *Provider) Revoke(pi uint8) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if int(pi) >= len(p.pools) || p.pools[pi].mr == nil {
		return fmt.Errorf("lmrm: revoke pool %d: no such live pool", pi)
	}
	pl := p.pools[pi]
	if err := p.c.send(&Msg{Kind: KRevoke, Pool: pi}); err != nil {
		return fmt.Errorf("lmrm: revoke pool %d: %w", pi, err)
	}
	p.granted -= uint64(pl.count) * uint64(pl.slotSize)
	err := pl.mr.Deregister()
	pl.mr, pl.consumed = nil, nil
	if err != nil {
		return fmt.Errorf("lmrm: revoke pool %d: %w", pi, err)
	}
	return nil
}

// Stats returns the provider's counters.
func (p *Provider) Stats() ProviderStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.stats
	st.RegisteredBytes = p.granted
	for _, pl := range p.pools {
		if pl.mr != nil {
			st.Pools++
		}
	}
	return st
}

// Close fails later calls with ErrClosed and deregisters every region.
// Destroy the queue pair first.
func (p *Provider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.c.err == nil {
		p.c.err = ErrClosed
	}
	errs := []error{p.c.close()}
	for _, pl := range p.pools {
		if pl.mr != nil {
			errs = append(errs, pl.mr.Deregister())
			pl.mr = nil
		}
	}
	p.granted = 0
	return joinErr("close", errs)
}
