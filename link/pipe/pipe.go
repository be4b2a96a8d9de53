package pipe

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/link/internal/bufpool"
)

// Defaults for the zero values of Config.
const (
	DefaultMTU       = 1500
	DefaultDepth     = 1024
	DefaultTxBuffers = 256
	// DefaultReorderHold bounds how long a reordered frame waits for a later
	// frame to overtake it.
	DefaultReorderHold = time.Millisecond
)

// Config describes a pipe. The zero value is a fault-free 1500-byte link.
type Config struct {
	// MTU is the L3 MTU (68..65000); frames are at most MTU+18 bytes. 0 means
	// DefaultMTU.
	MTU int
	// Depth is the receive queue of each end, in frames; frames held back by
	// Reorder or Delay occupy it too. 0 means DefaultDepth.
	Depth int
	// TxBuffers is the number of transmit buffers of each end (what Alloc
	// hands out). 0 means DefaultTxBuffers.
	TxBuffers int
	// Seed seeds the fault PRNGs (one per direction).
	Seed uint64
	// AtoB and BtoA are the faults met by frames sent by end a and by end b.
	AtoB, BtoA Faults
}

// Faults describes the impairments of one direction. Rates are probabilities
// per frame in [0, 1].
type Faults struct {
	// Loss drops the frame.
	Loss float64
	// Duplicate delivers the frame twice.
	Duplicate float64
	// Corrupt flips one random byte of the frame (XOR with a random non-zero
	// value).
	Corrupt float64
	// ECNMark sets the IP ECN bits of an ECN-capable frame (ECT(0) or
	// ECT(1)) to CE, as a congested switch marks instead of dropping (the
	// IPv4 checksum follows; the RoCEv2 ICRC masks the TOS). Other frames
	// pass unmarked.
	ECNMark float64
	// Reorder holds the frame back until the next frame of this direction has
	// been sent (and, unless lost, delivered: they swap places), or at most
	// ReorderHold.
	Reorder float64
	// ReorderHold bounds the wait of a reordered frame; 0 means
	// DefaultReorderHold.
	ReorderHold time.Duration
	// Delay holds the frame back for DelayTime, or until DelayFrames later
	// frames have been sent in this direction, whichever comes first (a zero
	// disables that condition; at least one must be set when Delay > 0).
	Delay       float64
	DelayTime   time.Duration
	DelayFrames int
}

func (f *Faults) validate() error {
	for _, r := range [...]struct {
		name string
		v    float64
	}{{"loss", f.Loss}, {"duplicate", f.Duplicate}, {"corrupt", f.Corrupt}, {"ecn mark", f.ECNMark}, {"reorder", f.Reorder}, {"delay", f.Delay}} {
		if !(r.v >= 0 && r.v <= 1) { // also refuses NaN
			return fmt.Errorf("%s rate %v not in [0, 1]", r.name, r.v)
		}
	}
	if f.ReorderHold < 0 || f.DelayTime < 0 || f.DelayFrames < 0 {
		return errors.New("negative reorder hold, delay time or delay frames")
	}
	if f.Delay > 0 && f.DelayTime == 0 && f.DelayFrames == 0 {
		return errors.New("delay rate set but neither DelayTime nor DelayFrames")
	}
	return nil
}

// Stats counts what one direction did with the frames sent into it.
type Stats struct {
	Frames     uint64 // frames passed to Send
	Delivered  uint64 // frames put into the receive queue (duplicates included)
	Received   uint64 // frames taken by the receiver's Receive
	Lost       uint64 // dropped by the Loss fault
	Reordered  uint64 // held back by the Reorder fault
	Duplicated uint64 // extra copies delivered by the Duplicate fault (none when the queue is full)
	Corrupted  uint64 // frames with a byte flipped
	Marked     uint64 // frames marked CE by the ECNMark fault
	Delayed    uint64 // held back by the Delay fault
	Overflow   uint64 // dropped because the receive queue was full
	PeerClosed uint64 // dropped because the receiving end was closed
}

// Errors returned by Send (wrapping none of the link sentinels).
var (
	errForeign = errors.New("pipe: send: buffer not from this link's Alloc, or already handed back")
	errRunt    = errors.New("pipe: send: frame shorter than an Ethernet header")
)

// A Link is one end of a pipe. It implements link.Link.
type Link struct {
	props  link.Props
	tx     *direction // frames this end sends
	rx     *direction // frames this end receives
	pool   bufpool.Pool
	notify chan struct{} // data arrived or Wake; capacity 1
	done   chan struct{} // closed by Close
	closed atomic.Bool
	once   sync.Once
	timer  *time.Timer
}

var _ link.Link = (*Link)(nil)

// New returns the two connected ends of a pipe.
func New(cfg Config) (a, b *Link, err error) {
	if cfg.MTU == 0 {
		cfg.MTU = DefaultMTU
	}
	if cfg.Depth == 0 {
		cfg.Depth = DefaultDepth
	}
	if cfg.TxBuffers == 0 {
		cfg.TxBuffers = DefaultTxBuffers
	}
	switch {
	case cfg.MTU < 68 || cfg.MTU > 65000:
		return nil, nil, fmt.Errorf("pipe: new: MTU %d not in 68..65000", cfg.MTU)
	case cfg.Depth < 1 || cfg.Depth > 1<<20:
		return nil, nil, fmt.Errorf("pipe: new: depth %d not in 1..%d", cfg.Depth, 1<<20)
	case cfg.TxBuffers < 1 || cfg.TxBuffers > 1<<20:
		return nil, nil, fmt.Errorf("pipe: new: %d transmit buffers not in 1..%d", cfg.TxBuffers, 1<<20)
	}
	if err := cfg.AtoB.validate(); err != nil {
		return nil, nil, fmt.Errorf("pipe: new: a→b faults: %w", err)
	}
	if err := cfg.BtoA.validate(); err != nil {
		return nil, nil, fmt.Errorf("pipe: new: b→a faults: %w", err)
	}
	maxFrame := cfg.MTU + 18
	a = newEnd(cfg, maxFrame, 0x0a)
	b = newEnd(cfg, maxFrame, 0x0b)
	ab := newDirection(cfg.AtoB, cfg.Depth, maxFrame, cfg.Seed, 1, b.notify)
	ba := newDirection(cfg.BtoA, cfg.Depth, maxFrame, cfg.Seed, 2, a.notify)
	a.tx, a.rx = ab, ba
	b.tx, b.rx = ba, ab
	return a, b, nil
}

func newEnd(cfg Config, maxFrame int, mac byte) *Link {
	l := &Link{
		props: link.Props{
			Name:     "pipe",
			MTU:      cfg.MTU,
			MaxFrame: maxFrame,
			// Locally administered, unicast: 02:00:00:00:00:0a and …:0b.
			HWAddr: net.HardwareAddr{0x02, 0, 0, 0, 0, mac},
		},
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		timer:  time.NewTimer(time.Hour),
	}
	l.timer.Stop()
	l.pool.Init(cfg.TxBuffers, maxFrame)
	return l
}

// Props describes the link: Name "pipe", the configured MTU, MaxFrame =
// MTU+18 and a made-up MAC address (02:00:00:00:00:0a for a, …:0b for b).
func (l *Link) Props() link.Props {
	p := l.props
	p.HWAddr = append(net.HardwareAddr(nil), l.props.HWAddr...)
	return p
}

// Stats returns the counters of the direction this end sends into.
func (l *Link) Stats() Stats {
	d := l.tx
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// SetFaults replaces the faults met by frames this end sends from now on
// (frames already held back keep their release conditions).
func (l *Link) SetFaults(f Faults) error {
	if err := f.validate(); err != nil {
		return fmt.Errorf("pipe: set faults: %w", err)
	}
	d := l.tx
	d.mu.Lock()
	d.faults = f
	d.mu.Unlock()
	return nil
}

// Alloc hands out free transmit buffers of MaxFrame bytes.
func (l *Link) Alloc(bufs [][]byte) int {
	if l.closed.Load() {
		return 0
	}
	return l.pool.Alloc(bufs)
}

// Free hands back unsent buffers from Alloc. Slices that are not
// outstanding buffers of this link are ignored.
func (l *Link) Free(bufs [][]byte) {
	for _, b := range bufs {
		l.pool.Put(b)
	}
}

// Send copies the frames into the peer's receive queue, applying this
// direction's faults, and returns the buffers to the link. It returns
// link.ErrClosed after Close, and an error for a buffer that does not come
// from Alloc or a frame shorter than 14 bytes (the other frames are still
// sent).
func (l *Link) Send(frames [][]byte) error {
	if l.closed.Load() {
		for _, f := range frames {
			l.pool.Put(f)
		}
		return link.ErrClosed
	}
	var err error
	d := l.tx
	d.mu.Lock()
	now := nowNS()
	delivered := false
	for _, f := range frames {
		if !l.pool.Put(f) {
			err = errForeign
			continue
		}
		if len(f) < 14 {
			err = errRunt
		} else if d.send(f, now) {
			delivered = true
		}
	}
	d.mu.Unlock()
	if delivered {
		select {
		case d.notify <- struct{}{}:
		default:
		}
	}
	return err
}

// Receive takes up to len(frames) frames from the receive queue. The frames
// stay valid until the next Receive call. It never blocks.
func (l *Link) Receive(frames [][]byte) (int, error) {
	if l.closed.Load() {
		return 0, link.ErrClosed
	}
	d := l.rx
	d.mu.Lock()
	n := d.receive(frames, nowNS())
	d.mu.Unlock()
	return n, nil
}

// Wait blocks until a frame can be received, Wake is called, the link is
// closed, or the timeout passes (negative: no limit; 0: just look).
func (l *Link) Wait(timeout time.Duration) error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	d := l.rx
	var end int64 // the caller's deadline (0: none)
	if timeout > 0 {
		end = nowNS() + int64(timeout)
	}
	defer l.timer.Stop()
	for {
		d.mu.Lock()
		now := nowNS()
		ready, next := d.pending(now)
		d.mu.Unlock()
		if ready {
			return nil
		}
		wait := time.Duration(-1)
		if end != 0 {
			if wait = time.Duration(end - now); wait <= 0 {
				return nil
			}
		} else if timeout == 0 {
			return nil
		}
		if next >= 0 && (wait < 0 || time.Duration(next-now) < wait) {
			wait = max(time.Duration(next-now), 1)
		}
		var tc <-chan time.Time
		if wait > 0 {
			l.timer.Reset(wait)
			tc = l.timer.C
		}
		select {
		case <-l.notify:
			return nil
		case <-l.done:
			return link.ErrClosed
		case <-tc:
			return nil
		case <-d.rehold:
			// A frame was held since the deadline was computed: compute
			// it again.
			if !l.timer.Stop() {
				select {
				case <-l.timer.C:
				default:
				}
			}
		}
	}
}

// Wake makes a concurrent Wait, or else the next one, return at once.
func (l *Link) Wake() {
	select {
	case l.notify <- struct{}{}:
	default:
	}
}

// Close closes this end. Later calls on it return link.ErrClosed; the peer
// sees no error, and frames it sends are dropped.
func (l *Link) Close() error {
	err := link.ErrClosed
	l.once.Do(func() {
		l.closed.Store(true)
		d := l.rx
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		close(l.done)
		err = nil
	})
	return err
}

var epoch = time.Now()

// nowNS is monotonic nanoseconds since the package loaded.
func nowNS() int64 { return int64(time.Since(epoch)) }

// held is a frame held back by Reorder or Delay.
type held struct {
	slot  int32
	until int64  // release at this time (ns); <0: never by time
	after uint64 // release once stats.Frames reaches this; 0: never by count
}

// direction is the queue from one end to the other. Its fields are guarded by mu.
type direction struct {
	mu     sync.Mutex
	faults Faults
	rng    *rand.Rand
	slots  [][]byte
	lens   []int32
	free   []int32 // free slots (stack)
	ready  []int32 // ring of slots ready to be received
	head   int     // index of the oldest ready slot
	nready int
	held   []held
	lent   []int32 // slots returned by the last Receive, reclaimed by the next
	closed bool    // the receiving end is closed
	stats  Stats
	notify chan struct{} // the receiving end's
	// rehold tells a Wait of the receiving end that a frame was held since
	// it computed its deadline (capacity 1).
	rehold chan struct{}
}

func newDirection(f Faults, depth, maxFrame int, seed, stream uint64, notify chan struct{}) *direction {
	d := &direction{
		faults: f,
		rng:    rand.New(rand.NewPCG(seed, stream)),
		slots:  make([][]byte, depth),
		lens:   make([]int32, depth),
		free:   make([]int32, depth),
		ready:  make([]int32, depth),
		held:   make([]held, 0, depth),
		lent:   make([]int32, 0, depth),
		notify: notify,
		rehold: make(chan struct{}, 1),
	}
	back := make([]byte, depth*maxFrame)
	for i := range depth {
		d.slots[i] = back[i*maxFrame : (i+1)*maxFrame : (i+1)*maxFrame]
		d.free[i] = int32(depth - 1 - i)
	}
	return d
}

// chance reports whether an event of probability p happens.
func (d *direction) chance(p float64) bool {
	return p > 0 && (p >= 1 || d.rng.Float64() < p)
}

// send applies the faults to one frame and queues it; it reports whether
// anything became ready for the receiver.
func (d *direction) send(f []byte, now int64) bool {
	d.stats.Frames++
	if d.closed {
		d.stats.PeerClosed++
		return false
	}
	ft := &d.faults
	if d.chance(ft.Loss) {
		d.stats.Lost++
		return false
	}
	s := d.take(f)
	if s < 0 {
		d.stats.Overflow++
		return false
	}
	if d.chance(ft.Corrupt) {
		b := d.slots[s][:len(f)]
		b[d.rng.IntN(len(b))] ^= byte(1 + d.rng.IntN(255))
		d.stats.Corrupted++
	}
	if d.chance(ft.ECNMark) && markCE(d.slots[s][:len(f)]) {
		d.stats.Marked++
	}
	dup := int32(-1)
	nheld := len(d.held)
	if d.chance(ft.Duplicate) {
		if dup = d.take(d.slots[s][:len(f)]); dup >= 0 {
			d.stats.Duplicated++
		}
	}
	switch {
	case d.chance(ft.Delay):
		h := held{slot: s, until: -1}
		if ft.DelayTime > 0 {
			h.until = now + int64(ft.DelayTime)
		}
		if ft.DelayFrames > 0 {
			h.after = d.stats.Frames + uint64(ft.DelayFrames)
		}
		d.held = append(d.held, h)
		d.stats.Delayed++
	case d.chance(ft.Reorder):
		hold := ft.ReorderHold
		if hold == 0 {
			hold = DefaultReorderHold
		}
		d.held = append(d.held, held{slot: s, until: now + int64(hold), after: d.stats.Frames + 1})
		d.stats.Reordered++
	default:
		d.push(s)
	}
	if dup >= 0 {
		d.push(dup)
	}
	d.release(now)
	if len(d.held) > nheld {
		select {
		case d.rehold <- struct{}{}:
		default:
		}
	}
	return d.nready > 0
}

// take copies f into a free slot, or returns -1 when there is none.
func (d *direction) take(f []byte) int32 {
	n := len(d.free)
	if n == 0 {
		return -1
	}
	s := d.free[n-1]
	d.free = d.free[:n-1]
	d.lens[s] = int32(copy(d.slots[s], f))
	return s
}

// push makes slot s ready for the receiver.
func (d *direction) push(s int32) {
	d.ready[(d.head+d.nready)%len(d.ready)] = s
	d.nready++
	d.stats.Delivered++
}

// release makes held frames whose time or count has come ready, in the order
// they were held.
func (d *direction) release(now int64) {
	if len(d.held) == 0 {
		return
	}
	k := 0
	for _, h := range d.held {
		if (h.until >= 0 && h.until <= now) || (h.after != 0 && d.stats.Frames >= h.after) {
			d.push(h.slot)
			continue
		}
		d.held[k] = h
		k++
	}
	d.held = d.held[:k]
}

// receive reclaims the slots lent by the previous call and lends up to
// len(frames) ready frames.
func (d *direction) receive(frames [][]byte, now int64) int {
	d.free = append(d.free, d.lent...)
	d.lent = d.lent[:0]
	d.release(now)
	n := min(len(frames), d.nready)
	for i := range n {
		s := d.ready[d.head]
		d.head = (d.head + 1) % len(d.ready)
		frames[i] = d.slots[s][:d.lens[s]]
		d.lent = append(d.lent, s)
	}
	d.nready -= n
	d.stats.Received += uint64(n)
	return n
}

// pending reports whether a frame is ready (after releasing due ones) and
// the earliest time a held frame is due (-1: none by time).
func (d *direction) pending(now int64) (bool, int64) {
	d.release(now)
	next := int64(-1)
	for _, h := range d.held {
		if h.until >= 0 && (next < 0 || h.until < next) {
			next = h.until
		}
	}
	return d.nready > 0, next
}
