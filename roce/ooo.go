package roce

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// OOO mode (docs/ooo.md): queue pairs of type OOO move data with
// out-of-order RDMA over datagrams. Each device has one pool of receive
// contexts (Options.OOOContexts), made when its first OOO queue pair is
// created; an OOO queue pair takes contexts from it with AcquireContexts.

// The vocabulary of OOO mode.
type (
	// Ctx names an OOO context: a 24-bit id and an 8-bit key.
	Ctx = wire.Ctx
	// Notify says who gets a completion when an OOO operation is placed
	// whole.
	Notify = wire.Notify
)

// OOO queue pair type, work request and completion opcodes, notify values.
const (
	OOO = qp.OOO

	WROOOWrite = qp.WROOOWrite
	WROOORead  = qp.WROOORead

	WCOOOWrite     = qp.WCOOOWrite
	WCOOORead      = qp.WCOOORead
	WCOOODelivered = qp.WCOOODelivered
	WCOOOTarget    = qp.WCOOOTarget

	NotifyNone      = wire.NotifyNone
	NotifyInitiator = wire.NotifyInitiator
	NotifyTarget    = wire.NotifyTarget
	NotifyBoth      = wire.NotifyBoth

	DefaultOOOContexts = qp.DefaultContexts // Options.OOOContexts when 0
	MaxOOOContexts     = qp.MaxContexts     // the largest Options.OOOContexts
	MaxOOOPaths        = qp.MaxPaths        // the largest SendWR.Paths
)

// ErrNoContexts: the device's pool has fewer free contexts than asked for.
var ErrNoContexts = qp.ErrNoContexts

// MakeCtx returns the context with id (24 bits) and key.
func MakeCtx(id uint32, key uint8) Ctx { return wire.MakeCtx(id, key) }

// OOOStats are the OOO counters of a device or a queue pair (docs/counters.md).
type OOOStats struct {
	StaleCtx            uint64 // packets for a context not held with that key (trickle traffic, after a release or recovery)
	StaleTID            uint64 // packets, READ requests and completions with a tid not current
	DupIndex            uint64 // packets whose index was placed already, duplicate completions
	CompletionsSent     uint64 // OOO_COMPLETION packets sent
	CompletionsReceived uint64 // OOO_COMPLETION packets that completed an operation
	ProtectionErrors    uint64 // packets refused for protection: their tid never completes
	ReadBusy            uint64 // READ requests ignored on a busy context
	WorkOverflow        uint64 // READ responses or completions dropped: the queue pair's work queue was full
	ThirdPartyRefused   uint64 // third-party packets for a controller or sink not admitted, dropped
}

func oooStats(c *qp.Stats) OOOStats {
	return OOOStats{
		StaleCtx: c.Get(qp.CtrStaleCtx), StaleTID: c.Get(qp.CtrStaleTID), DupIndex: c.Get(qp.CtrDupIndex),
		CompletionsSent: c.Get(qp.CtrOOOCompletionsSent), CompletionsReceived: c.Get(qp.CtrOOOCompletionsRecv),
		ProtectionErrors: c.Get(qp.CtrOOOProtErrors), ReadBusy: c.Get(qp.CtrOOOReadBusy),
		WorkOverflow: c.Get(qp.CtrOOOWorkOverflow), ThirdPartyRefused: c.Get(qp.CtrOOO3PRefused),
	}
}

func (s *OOOStats) add(o OOOStats) {
	s.StaleCtx += o.StaleCtx
	s.StaleTID += o.StaleTID
	s.DupIndex += o.DupIndex
	s.CompletionsSent += o.CompletionsSent
	s.CompletionsReceived += o.CompletionsReceived
	s.ProtectionErrors += o.ProtectionErrors
	s.ReadBusy += o.ReadBusy
	s.WorkOverflow += o.WorkOverflow
	s.ThirdPartyRefused += o.ThirdPartyRefused
}

// pathMTU is the default path MTU of a queue pair of type t: the device's,
// or for OOO the largest that still fits the link with the XRH's 24 bytes
// more per packet (docs/ooo-wire.md, Sizes: seg 4096 over IPv6 needs a link
// MTU of 4200).
func (d *Device) pathMTU(t QPType) MTU {
	if t == qp.OOO {
		return wire.PathMTU(d.props.MTU - wire.XRHLen)
	}
	return d.pmtu
}

// OOOPathMTU is the path MTU Connect gives an OOO queue pair on this device
// by default (PathMTU's, or smaller so that the XRH fits the link): what to
// tell a peer before connecting one.
func (d *Device) OOOPathMTU() MTU { return d.pathMTU(qp.OOO) }

// contextPool returns the device's OOO context pool, making it the first
// time (Options.OOOContexts, keys from Options.ContextSeed or, when 0, from
// crypto/rand).
func (d *Device) contextPool() (*qp.ContextPool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctxPool != nil {
		return d.ctxPool, nil
	}
	n := d.opts.OOOContexts
	if n == 0 {
		n = DefaultOOOContexts
	}
	seed := d.opts.ContextSeed
	if seed == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("context seed: %w", err)
		}
		seed = binary.LittleEndian.Uint64(b[:])
	}
	p, err := qp.NewContextPool(n, seed)
	if err != nil {
		return nil, err
	}
	d.ctxPool = p
	return p, nil
}

// AcquireContexts takes n contexts from the device's pool for this OOO
// queue pair, each with transaction id 0: tell the peer their ids and keys
// (the ids of its RemoteCtx, and of Ctx in its READs). They stay the queue
// pair's until ReleaseContexts or Destroy.
func (q *QP) AcquireContexts(n int) ([]Ctx, error) {
	c, err := q.q.AcquireContexts(n)
	if err != nil {
		return nil, fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	return c, nil
}

// ReleaseContexts gives contexts back to the device's pool. Their keys
// change, so packets still on their way to them are dropped (stale_ctx),
// and the pool hands them out again last (a FIFO). It returns once the
// engine has finished any packet it was placing through them, so memory a
// released context pointed at is the caller's alone (as after
// ibv_dereg_mr): a reissued operation arriving later is dropped as stale,
// never written while the caller reads.
func (q *QP) ReleaseContexts(ctxs []Ctx) error {
	if err := q.q.ReleaseContexts(ctxs); err != nil {
		return fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	q.d.sync()
	return nil
}

// RecoverContexts gives every context of this OOO queue pair a new key and
// transaction id 0, as after a failure: whatever was sent to them before
// (in flight, duplicated, replayed) is dropped as stale, without an error.
// It returns the contexts with their new keys, for the peer.
func (q *QP) RecoverContexts() ([]Ctx, error) {
	c, err := q.q.RecoverContexts()
	if err != nil {
		return nil, fmt.Errorf("roce: qp %#x: %w", q.e.qpn, err)
	}
	return c, nil
}
