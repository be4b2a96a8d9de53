package enlarge

import (
	"errors"
	"fmt"
	"time"
)

// Mode chooses how a channel provisions its buffers.
type Mode uint8

// Modes. The zero value is Enlarge.
const (
	// Enlarge starts with a small ring and promotes it along the ladder.
	Enlarge Mode = iota
	// Baseline registers a fixed large ring (32 × 4 KiB per direction by
	// default) from the start and never promotes: the MVAPICH-style
	// comparison point.
	Baseline
)

func (m Mode) String() string {
	switch m {
	case Enlarge:
		return "enlarge"
	case Baseline:
		return "baseline"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Defaults.
const (
	DefaultRingSlots      = 4
	DefaultGrowSlots      = 16
	DefaultSmall          = 512
	DefaultThreshold      = 90
	DefaultLargeSlots     = 1
	DefaultTailTimeout    = 200 * time.Microsecond
	DefaultAckTimeout     = time.Second
	DefaultMaxAckTimeouts = 10
	BaselineSlots         = 32
	BaselineSlotSize      = 4096
	MinSmall, MaxSmall    = 100, 2000    // the seed's range for the first step
	MinLarge, MaxLarge    = 1000, 200000 // the seed's range for every later step
	MinThreshold          = 80
	MaxThreshold          = 100
	maxSlots              = 1024
	maxLargeSlots         = 16
	minTailTimeout        = time.Microsecond
	maxTailTimeout        = time.Second
	maxAckTimeout         = time.Hour
	defaultLargeStep1     = 8 << 10
	defaultLargeStep2     = 128 << 10
	maxPhases             = 16
	baselineMaxSlotBytes  = 1 << 20
)

// DefaultLadder is the default phase ladder: 512 B → 8 KiB → 128 KiB.
var DefaultLadder = []int{DefaultSmall, defaultLargeStep1, defaultLargeStep2}

// Config configures a Channel. Both ends of a connection must use the same
// configuration. The zero value (or nil) means the defaults.
type Config struct {
	Mode Mode
	// Ladder is the slot size of each phase, smallest first. Phase 0 is the
	// eager ring of RingSlots slots; every later phase is one buffer of
	// LargeSlots slots. Default DefaultLadder; Baseline: one step of 4 KiB.
	Ladder []int
	// RingSlots is the number of slots of the phase-0 ring a channel starts
	// with (default 4; Baseline 32).
	RingSlots int
	// GrowSlots is the number of slots the phase-0 ring grows to on demand
	// (default 16, DESIGN.md's ring). A sender that finds all but one slot
	// of the small ring outstanding and has another message to send writes
	// an ENLARGE_REQ for phase 0 into the last slot instead; the receiver
	// answers with a ring of GrowSlots slots of the same size, and the
	// direction stays in phase 0. So an idle connection costs RingSlots
	// slots an end and one that streams small messages gets GrowSlots in
	// flight after one round trip. Negative, or not above RingSlots: the
	// ring never grows. Baseline mode never grows.
	GrowSlots int
	// LargeSlots is the number of slots of a promoted buffer (default 1).
	LargeSlots int
	// Threshold is the percentage of the current slot an iovec element may
	// fill and still go eagerly (80–100, default 90).
	Threshold int
	// TailTimeout bounds how long a call that sees an ENLARGE_ACK's head
	// waits for its tail (default 200 µs).
	TailTimeout time.Duration
	// WholeVectorLarge chooses the seed's alternative for an iovec with an
	// oversize element: instead of sending the elements before it eagerly
	// (the prefix) and promoting for the rest, Send promotes first and sends
	// nothing of the vector until the promotion is done; then every element
	// goes over the larger buffer.
	WholeVectorLarge bool
	// AckTimeout is one ack timeout: how long a sending direction with an
	// ENLARGE_REQ out may go without a complete, well-formed ENLARGE_ACK
	// before the timeout counts (default 1 s, at least TailTimeout). The
	// request is never resent, so a lost or corrupt ack would otherwise
	// leave the direction waiting for ever.
	AckTimeout time.Duration
	// MaxAckTimeouts is how many ack timeouts in a row (counted from the
	// request) fail the sending direction: Send then returns an error
	// wrapping ErrAckTimeout, at once and on every later call (default 10,
	// so 10 s with the default AckTimeout; negative: never, Send returns 0
	// bytes and no error for as long as it is called).
	MaxAckTimeouts int
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("invalid configuration")

// withDefaults returns a copy of c (nil allowed) with defaults filled in and
// validated.
func (c *Config) withDefaults() (Config, error) {
	var r Config
	if c != nil {
		r = *c
		r.Ladder = append([]int(nil), c.Ladder...)
	}
	switch r.Mode {
	case Enlarge:
		if len(r.Ladder) == 0 {
			r.Ladder = append([]int(nil), DefaultLadder...)
		}
		if r.RingSlots == 0 {
			r.RingSlots = DefaultRingSlots
		}
		if r.GrowSlots == 0 {
			r.GrowSlots = DefaultGrowSlots
		}
	case Baseline:
		if len(r.Ladder) == 0 {
			r.Ladder = []int{BaselineSlotSize}
		}
		if r.RingSlots == 0 {
			r.RingSlots = BaselineSlots
		}
		r.GrowSlots = -1
	default:
		return r, fmt.Errorf("enlarge: config: unknown mode %d: %w", r.Mode, ErrConfig)
	}
	if r.GrowSlots <= r.RingSlots {
		r.GrowSlots = -1 // no growth step
	}
	if r.LargeSlots == 0 {
		r.LargeSlots = DefaultLargeSlots
	}
	if r.Threshold == 0 {
		r.Threshold = DefaultThreshold
	}
	if r.TailTimeout == 0 {
		r.TailTimeout = DefaultTailTimeout
	}
	if r.AckTimeout == 0 {
		r.AckTimeout = DefaultAckTimeout
	}
	if r.MaxAckTimeouts == 0 {
		r.MaxAckTimeouts = DefaultMaxAckTimeouts
	}
	return r, r.validate()
}

func (c *Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("enlarge: config: "+format+": %w", append(args, ErrConfig)...)
	}
	if c.Threshold < MinThreshold || c.Threshold > MaxThreshold {
		return bad("threshold %d%% outside %d–%d%%", c.Threshold, MinThreshold, MaxThreshold)
	}
	if c.RingSlots < 1 || c.RingSlots > maxSlots {
		return bad("ring slots %d outside 1–%d", c.RingSlots, maxSlots)
	}
	if c.grows() && (c.GrowSlots > maxSlots || c.RingSlots < 2) {
		return bad("grow slots %d with ring slots %d: growth needs 2 or more ring slots and at most %d grown", c.GrowSlots, c.RingSlots, maxSlots)
	}
	if c.LargeSlots < 1 || c.LargeSlots > maxLargeSlots {
		return bad("large slots %d outside 1–%d", c.LargeSlots, maxLargeSlots)
	}
	if c.TailTimeout < minTailTimeout || c.TailTimeout > maxTailTimeout {
		return bad("tail timeout %v outside %v–%v", c.TailTimeout, minTailTimeout, maxTailTimeout)
	}
	if c.AckTimeout < c.TailTimeout || c.AckTimeout > maxAckTimeout {
		return bad("ack timeout %v outside %v (the tail timeout)–%v", c.AckTimeout, c.TailTimeout, maxAckTimeout)
	}
	if c.Mode == Baseline {
		if len(c.Ladder) != 1 {
			return bad("baseline mode takes one slot size, got %d", len(c.Ladder))
		}
		if c.Ladder[0] < MinSmall || c.Ladder[0] > baselineMaxSlotBytes {
			return bad("baseline slot size %d outside %d–%d", c.Ladder[0], MinSmall, baselineMaxSlotBytes)
		}
		return nil
	}
	if len(c.Ladder) < 2 || len(c.Ladder) > maxPhases {
		return bad("ladder has %d steps, want 2–%d", len(c.Ladder), maxPhases)
	}
	if s := c.Ladder[0]; s < MinSmall || s > MaxSmall {
		return bad("small step %d B outside %d–%d B", s, MinSmall, MaxSmall)
	}
	for i := 1; i < len(c.Ladder); i++ {
		s := c.Ladder[i]
		if s < MinLarge || s > MaxLarge {
			return bad("step %d is %d B, outside %d–%d B", i, s, MinLarge, MaxLarge)
		}
		if s <= c.Ladder[i-1] {
			return bad("step %d (%d B) not larger than step %d (%d B)", i, s, i-1, c.Ladder[i-1])
		}
	}
	return nil
}

// Validate reports whether c (after defaults are applied) is usable. Errors
// wrap ErrConfig.
func (c *Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// slots is the number of slots of phase p's buffer (for phase 0, the ring a
// channel starts with).
func (c *Config) slots(p int) int {
	if p == 0 {
		return c.RingSlots
	}
	return c.LargeSlots
}

// grows reports whether the phase-0 ring grows on demand.
func (c *Config) grows() bool { return c.GrowSlots > c.RingSlots }

// EagerSlots is the most eager messages a channel with this configuration
// (defaults filled in) has out at once: the ring's slots, or the grown
// ring's. A Pool serving one channel needs that many slots. 0 when the
// configuration is invalid.
func (c *Config) EagerSlots() int {
	d, err := c.withDefaults()
	if err != nil {
		return 0
	}
	return max(d.RingSlots, d.GrowSlots)
}

// GrownRingBytes is the size of the phase-0 ring after it has grown (0 when
// it never grows).
func (c *Config) GrownRingBytes() int {
	if !c.grows() {
		return 0
	}
	return c.GrowSlots * c.Ladder[0]
}

// threshold is the largest element that goes eagerly in phase p.
func (c *Config) threshold(p int) int { return c.Ladder[p] * c.Threshold / 100 }

// top is the last phase.
func (c *Config) top() int { return len(c.Ladder) - 1 }

// phaseFor is the phase an element of n bytes needs: the first one whose
// threshold admits it, or the top one (the element then goes in pieces).
func (c *Config) phaseFor(n int) int {
	for p := range c.Ladder {
		if n <= c.threshold(p) {
			return p
		}
	}
	return c.top()
}

// QueueDepths returns the send and receive queue sizes (MaxSendWR,
// MaxRecvWR) a channel with this configuration needs from its queue pair, and
// the completion queue depth that holds both. They include two entries of
// headroom each: roce/qp pushes a completion before it frees the queue entry,
// so an entry reused at once after polling can briefly find the queue full.
func (c *Config) QueueDepths() (send, recv, cq int, err error) {
	d, err := c.withDefaults()
	if err != nil {
		return 0, 0, 0, err
	}
	for p := range d.Ladder {
		recv = max(recv, d.recvDepth(p))
	}
	send = d.RingSlots + d.LargeSlots + 4
	if d.grows() {
		// the small ring's writes may be outstanding beside the grown one's
		recv = max(recv, d.GrowSlots+recvSpare)
		send += d.GrowSlots
	}
	recv += 2
	return send, recv, send + recv, nil
}

// RingBytes is the size of phase p's receive buffer.
func (c *Config) RingBytes(p int) int { return c.slots(p) * c.Ladder[p] }
