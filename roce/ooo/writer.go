package ooo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/xdproce/xdproce/roce"
)

// Config tunes a Writer; the zero value takes the defaults.
type Config struct {
	Timeout    time.Duration // the least timeout of an attempt (0: 2 ms)
	First      time.Duration // the timeout before a round trip was measured (0: 50 ms; at least Timeout)
	Backoff    float64       // each retry of an operation on a lane that delivered nothing since waits this many times longer (0: 2; at least 1)
	MaxTimeout time.Duration // the longest timeout of an attempt (0: 2 s)
	MaxTries   int           // attempts of one operation before the call fails (0: 32)
	Paths      uint8         // UDP source ports an operation's packets spread over (roce.SendWR.Paths; 0: 1)
	Success    float64       // the sizing target: the least probability of an operation arriving whole (0: 0.75)
	MaxPackets int           // the largest operation, in packets (0: 256)
	Loss       float64       // the loss estimate to start from (0: none)
	DownAfter  int           // consecutive timeouts that take a lane out of a call (0: 3)
	Window     int           // packets in flight over all lanes before the next operation waits (0: 1024)
	Tag        uint32        // the tag of every operation (echoed in the target's completions)
}

func (c *Config) fill() error {
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Millisecond
	}
	if c.First <= 0 {
		c.First = 50 * time.Millisecond
	}
	c.First = max(c.First, c.Timeout)
	if c.Backoff == 0 {
		c.Backoff = 2
	}
	if !(c.Backoff >= 1) {
		return fmt.Errorf("backoff %v below 1", c.Backoff)
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 2 * time.Second
	}
	c.MaxTimeout = max(c.MaxTimeout, c.First)
	if c.MaxTries <= 0 {
		c.MaxTries = 32
	}
	if c.Paths > roce.MaxOOOPaths {
		return fmt.Errorf("paths %d above %d", c.Paths, roce.MaxOOOPaths)
	}
	if c.Success == 0 {
		c.Success = 0.75
	}
	if !(c.Success > 0 && c.Success < 1) {
		return fmt.Errorf("success target %v not in (0, 1)", c.Success)
	}
	if c.MaxPackets <= 0 {
		c.MaxPackets = 256
	}
	if c.DownAfter <= 0 {
		c.DownAfter = 3
	}
	if c.Window <= 0 {
		c.Window = 1024
	}
	return nil
}

// Region is a local buffer as registered on one lane's device: Addr is the
// address of its byte 0 (roce.MR.Addr), LKey its lkey, RKey its rkey (a READ
// places the response by rkey: the region needs remote write access).
type Region struct {
	Addr       uint64
	LKey, RKey uint32
}

// Target is the peer's region for one lane: the VA of its byte 0, its rkey,
// and the contexts the peer's queue pair holds for this lane (one operation
// in flight on each).
type Target struct {
	Ctxs []roce.Ctx
	VA   uint64
	RKey uint32
}

// Lane is one OOO queue pair a Writer sends on. CQ is its send CQ: the
// writer polls it and nothing else may.
type Lane struct {
	QP     *roce.QP
	CQ     *roce.CQ
	Local  Region
	Remote Target
}

// Stats count what a Writer did.
type Stats struct {
	Attempts         uint64        // work requests posted (first tries and reissues)
	Delivered        uint64        // operations whose delivered completion came
	Bytes            uint64        // bytes of the delivered operations
	Retries          uint64        // reissues after a timeout or a failed local completion
	StaleCompletions uint64        // completions for a tid no longer current (ignored)
	Late             uint64        // of those, of the slot's attempt before the current one: the timeout was too short
	Failovers        uint64        // lanes taken out of a call after DownAfter timeouts in a row
	CommitsPosted    uint64        // conditional commits posted (WriteCommit, StreamCommit; one per round)
	CommitFlushes    uint64        // commits flushed unsent because an operation of their round failed
	CommitRetries    uint64        // commits reissued because their delivered completion was late (not in Retries, which counts operations)
	Loss             float64       // the current estimate of the packet loss rate
	OpPackets        int           // the current operation size, in packets
	RTT, RTTDev      time.Duration // the smoothed round trip of delivered attempts and its mean deviation
}

// ErrTooManyTries: an operation was not delivered in Config.MaxTries attempts.
var ErrTooManyTries = errors.New("ooo: operation not delivered")

// A Writer moves byte ranges over its lanes with OOO WRITEs and READs,
// reissuing what is not delivered (package comment). One call at a time.
type Writer struct {
	cfg   Config
	lanes []lane
	slots []slot
	mu    sync.Mutex // one call at a time; Stats
	st    Stats
	est   lossEstimate
	srtt  time.Duration // smoothed round trip of delivered attempts
	rttv  time.Duration // its mean deviation
	rtts  recentRTTs    // the last round trips
	rr    int           // the lane the next operation tries first
	// packets of the attempts in flight (Config.Window)
	inflight int
	// WriteCommit, StreamCommit (commit.go): the call's conditional state,
	// this side's context for the commits' delivered completions, their
	// last tid.
	cm        *commitRun
	commitCtx roce.Ctx
	commitTID uint32
}

type lane struct {
	Lane
	seg    int   // the queue pair's segment (path MTU) in bytes
	free   []int // idle slots
	misses int   // timeouts since the last delivery
	down   bool  // out for the rest of this call
	// the queue pair's stale_tid at the last look (lateDropped)
	staleTID uint64
}

// slot is a pair of contexts, local and remote, on one lane, with the tid
// of its last attempt.
type slot struct {
	lane          int
	local, remote roce.Ctx
	tid           uint32
	op            op // the attempt in flight (op.n < 0: idle)
	// A commit call's attempt: the conditional queue it counts on (q; 0:
	// none, it counts nowhere).
	inCommit bool
	q        uint8
	sent     time.Time
	deadline time.Time
	// The attempt before, timed out: its late delivered completion is
	// still a round-trip sample (the tid tells it apart).
	prevTID     uint32
	prevSent    time.Time
	prevPackets int
}

// op is a byte range: local and remote offsets, length, tries so far, and
// the sequence number of the call's range it is part of.
type op struct {
	local, remote uint64
	n             int
	tries         int
	seq           uint64
}

// NewWriter makes a writer over lanes, acquiring one local context on each
// lane's queue pair for every remote context of that lane.
func NewWriter(cfg Config, lanes ...Lane) (*Writer, error) {
	if err := cfg.fill(); err != nil {
		return nil, fmt.Errorf("ooo: %w", err)
	}
	if len(lanes) == 0 {
		return nil, errors.New("ooo: no lanes")
	}
	w := &Writer{cfg: cfg, est: newLossEstimate(cfg.Loss)}
	for i, l := range lanes {
		if l.QP == nil || l.CQ == nil || l.QP.Type() != roce.OOO {
			w.Close()
			return nil, fmt.Errorf("ooo: lane %d: needs an OOO queue pair and its send CQ", i)
		}
		if len(l.Remote.Ctxs) == 0 {
			w.Close()
			return nil, fmt.Errorf("ooo: lane %d: no remote contexts", i)
		}
		_, attr := l.QP.Query()
		local, err := l.QP.AcquireContexts(len(l.Remote.Ctxs))
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("ooo: lane %d: %w", i, err)
		}
		ln := lane{Lane: l, seg: attr.PathMTU.Bytes()}
		ln.Remote.Ctxs = append([]roce.Ctx(nil), l.Remote.Ctxs...)
		for j, rc := range ln.Remote.Ctxs {
			ln.free = append(ln.free, len(w.slots))
			w.slots = append(w.slots, slot{lane: i, local: local[j], remote: rc, op: op{n: -1}})
		}
		w.lanes = append(w.lanes, ln)
	}
	return w, nil
}

// Close gives every local context back to its queue pair's pool; completions
// still on their way are dropped by the transport (stale_ctx).
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for i := range w.lanes {
		var held []roce.Ctx
		for _, s := range w.slots {
			if s.lane == i && s.local != 0 {
				held = append(held, s.local)
			}
		}
		if i == 0 && w.commitCtx != 0 {
			held = append(held, w.commitCtx)
			w.commitCtx = 0
		}
		if len(held) > 0 {
			errs = append(errs, w.lanes[i].QP.ReleaseContexts(held))
		}
	}
	for i := range w.slots {
		w.slots[i].local = 0
	}
	return errors.Join(errs...)
}

// Stats returns the counters and the current sizing.
func (w *Writer) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.st
	st.Loss = w.est.loss()
	st.OpPackets = OpPackets(st.Loss, w.cfg.Success, w.cfg.MaxPackets)
	st.RTT, st.RTTDev = w.srtt, w.rttv
	return st
}

// Write places bytes [local, local+n) of the local buffer at [remote,
// remote+n) of the peer's region and returns once every byte is delivered
// (the target's completion came for each operation), when an operation
// fails MaxTries times, or when ctx ends (then the contexts of what was in
// flight are replaced: package comment). notify is NotifyInitiator or
// NotifyBoth (the target's user gets a completion too).
func (w *Writer) Write(ctx context.Context, local, remote uint64, n int, notify roce.Notify) error {
	return w.once(ctx, false, local, remote, n, notify)
}

// Read fetches bytes [remote, remote+n) of the peer's region into [local,
// local+n) of the local buffer, as Write does in the other direction.
func (w *Writer) Read(ctx context.Context, local, remote uint64, n int, notify roce.Notify) error {
	return w.once(ctx, true, local, remote, n, notify)
}
