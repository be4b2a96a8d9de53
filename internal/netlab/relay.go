package netlab

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// RelayConfig sets the impairments of a Relay. Probabilities are per frame,
// in [0, 1], drawn from a generator seeded with Seed (each direction its own
// stream), so a run with the same seed and the same frame order makes the same
// decisions.
type RelayConfig struct {
	Seed uint64
	// Loss drops a frame.
	Loss float64
	// Reorder holds a frame back and sends it after the next one (or alone
	// after ReorderHold when no next frame comes).
	Reorder float64
	// Duplicate sends a frame twice.
	Duplicate float64
	// Corrupt flips one bit of a frame at a random offset ≥ CorruptFrom.
	Corrupt float64
	// CorruptFrom is the first byte corruption may hit; 0 means 42 (past the
	// Ethernet, IPv4 and UDP headers, so the frame still reaches its socket
	// and only end-to-end checks such as the ICRC can catch it).
	CorruptFrom int
	// Delay postpones every frame by Delay plus a uniform share of Jitter
	// (frames stay in order).
	Delay, Jitter time.Duration
	// ReorderHold bounds how long a held frame waits; 0 means 2 ms.
	ReorderHold time.Duration
	// Queue bounds the frames in flight per direction; 0 means 4096. Frames
	// beyond it are dropped and counted as Overflow.
	Queue int
	// Filter, when set, selects the frames that may be impaired; the others
	// (e.g. ARP) are forwarded untouched.
	Filter func(frame []byte) bool
	// Bottleneck, when its Rate is set, shapes the a→b direction (frames
	// read on StartRelay's first interface) after the impairments above.
	// It is fixed when the relay starts.
	Bottleneck Bottleneck
}

// RelayStats counts what a relay did, both directions together.
type RelayStats struct {
	Received, Forwarded                          uint64 // frames read; frames written (duplicates included)
	ForwardedBytes                               uint64 // bytes of the frames written
	Lost, Reordered, Duplicated, Corrupted       uint64 // impairments applied
	Delayed, Overflow, SendErrors, ReceiveErrors uint64
	// Bottleneck counts the a→b bottleneck's work; zero without one.
	Bottleneck BottleneckStats
}

type relayCounters struct {
	received, forwarded, forwardedBytes, lost, reordered, duplicated, corrupted atomic.Uint64
	delayed, overflow, sendErrors, receiveErrors                                atomic.Uint64
	bn                                                                          bottleneckCounters
}

// A Relay forwards Ethernet frames between two interfaces of one namespace
// through AF_PACKET sockets, impairing them as configured.
type Relay struct {
	cfg   RelayConfig                 // as started
	imp   atomic.Pointer[RelayConfig] // the impairments in force (Impair changes them)
	fds   [2]int
	c     relayCounters
	stop  atomic.Bool
	wg    sync.WaitGroup
	once  sync.Once
	start time.Time
}

// StartRelay starts forwarding between a and b (two interfaces of one
// namespace, usually made with LinkConfig.Bare). The lab stops it on Close.
func (l *Lab) StartRelay(a, b *Iface, cfg RelayConfig) (*Relay, error) {
	if a.NS != b.NS {
		return nil, errors.New("netlab: relay: interfaces in different namespaces")
	}
	if err := cfg.checkImpairments(); err != nil {
		return nil, err
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	mtu := max(a.MTU, b.MTU)
	if cfg.Bottleneck.Rate > 0 {
		if err := cfg.Bottleneck.check(mtu + 18); err != nil {
			return nil, err
		}
	}
	r := &Relay{cfg: cfg, fds: [2]int{-1, -1}, start: time.Now()}
	r.imp.Store(&cfg)
	err := a.NS.Do(func() error {
		for i, e := range []*Iface{a, b} {
			fd, err := openPacket(e.Index)
			if err != nil {
				return fmt.Errorf("netlab: relay on %s: %w", e.Name, err)
			}
			r.fds[i] = fd
		}
		return nil
	})
	if err != nil {
		r.closeFDs()
		return nil, err
	}
	for dir := range 2 {
		d := &relayDir{
			r: r, in: r.fds[dir], out: r.fds[1-dir],
			rng:  rand.New(rand.NewPCG(cfg.Seed, uint64(dir)+0x9e3779b97f4a7c15)),
			bufs: make([][]byte, cfg.Queue+2),
			q:    make([]queued, 0, cfg.Queue+2),
		}
		for i := range d.bufs {
			d.bufs[i] = make([]byte, mtu+18+64)
		}
		d.free = make([]int, len(d.bufs))
		for i := range d.free {
			d.free[i] = i
		}
		d.held = -1
		d.write = d.writeOut
		d.rd = newBatchReader(recvBatch)
		if dir == 0 && cfg.Bottleneck.Rate > 0 {
			d.bn = newBottleneck(cfg.Bottleneck, mtu+18, d.rng, &r.c.bn)
		}
		r.wg.Add(1)
		go d.run()
	}
	l.mu.Lock()
	l.relays = append(l.relays, r)
	l.mu.Unlock()
	return r, nil
}

// checkImpairments validates the probabilities and fills in the defaults of
// CorruptFrom and ReorderHold.
func (cfg *RelayConfig) checkImpairments() error {
	for _, p := range []float64{cfg.Loss, cfg.Reorder, cfg.Duplicate, cfg.Corrupt} {
		if p < 0 || p > 1 {
			return fmt.Errorf("netlab: relay: probability %v outside [0, 1]", p)
		}
	}
	if cfg.CorruptFrom <= 0 {
		cfg.CorruptFrom = 42
	}
	if cfg.ReorderHold <= 0 {
		cfg.ReorderHold = 2 * time.Millisecond
	}
	return nil
}

// Impair replaces the relay's impairments (Loss, Reorder, Duplicate,
// Corrupt, CorruptFrom, Delay, Jitter, ReorderHold, Filter) with cfg's, for
// the frames read from now on: a running leg can be made lossy, blackholed
// (Loss 1) or clean again. cfg's Seed, Queue and Bottleneck are not used:
// they are fixed when the relay starts.
func (r *Relay) Impair(cfg RelayConfig) error {
	if err := cfg.checkImpairments(); err != nil {
		return err
	}
	cfg.Seed, cfg.Queue, cfg.Bottleneck = r.cfg.Seed, r.cfg.Queue, r.cfg.Bottleneck
	r.imp.Store(&cfg)
	return nil
}

// Stats returns the counters so far.
func (r *Relay) Stats() RelayStats {
	c := &r.c
	return RelayStats{
		Received: c.received.Load(), Forwarded: c.forwarded.Load(), ForwardedBytes: c.forwardedBytes.Load(),
		Lost: c.lost.Load(), Reordered: c.reordered.Load(), Duplicated: c.duplicated.Load(),
		Corrupted: c.corrupted.Load(), Delayed: c.delayed.Load(), Overflow: c.overflow.Load(),
		SendErrors: c.sendErrors.Load(), ReceiveErrors: c.receiveErrors.Load(),
		Bottleneck: c.bn.stats(),
	}
}

// Close stops the relay and waits for its goroutines (at most a few
// milliseconds); frames still queued are dropped. Later calls do nothing.
func (r *Relay) Close() error {
	r.once.Do(func() {
		r.stop.Store(true)
		r.wg.Wait()
		r.closeFDs()
	})
	return nil
}

func (r *Relay) closeFDs() {
	for i, fd := range r.fds {
		if fd >= 0 {
			unix.Close(fd)
			r.fds[i] = -1
		}
	}
}

type queued struct {
	buf int   // index into bufs
	n   int   // frame length
	due int64 // ns since relay start
}

// relayDir forwards one direction; one goroutine owns it.
type relayDir struct {
	r       *Relay
	in, out int
	rng     *rand.Rand
	bufs    [][]byte
	free    []int    // free buffer indexes
	q       []queued // FIFO by due time
	held    int      // buffer index of the frame held for reordering, or -1
	heldN   int
	heldDue int64
	bn      *bottleneck       // a→b only, when configured
	write   func([]byte) bool // writeOut, bound once (no allocation per frame)

	// One batch read: the buffer indexes, the buffers, the frame lengths.
	rd        *batchReader
	batch     [recvBatch]int
	batchBufs [recvBatch][]byte
	batchLens [recvBatch]int
}

// recvBatch is how many frames one read system call may return.
const recvBatch = 32

const pollSlice = 10 * time.Millisecond

func (d *relayDir) now() int64 { return int64(time.Since(d.r.start)) }

func (d *relayDir) run() {
	defer d.r.wg.Done()
	pfd := []unix.PollFd{{Fd: int32(d.in), Events: unix.POLLIN}}
	for !d.r.stop.Load() {
		timeout := pollSlice
		now := d.now()
		if len(d.q) > 0 {
			timeout = min(timeout, time.Duration(max(d.q[0].due-now, 0)))
		}
		if d.held >= 0 {
			timeout = min(timeout, time.Duration(max(d.heldDue-now, 0)))
		}
		if d.bn != nil {
			if w := d.bn.wait(now); w >= 0 {
				timeout = min(timeout, w)
			}
		}
		if err := pollIn(pfd, timeout); err != nil && !errors.Is(err, unix.EINTR) {
			d.r.c.receiveErrors.Add(1)
			time.Sleep(time.Millisecond)
		}
		d.receive()
		d.flush()
	}
}

func (d *relayDir) receive() {
	cfg := d.r.imp.Load()
	for range 256 / recvBatch {
		if len(d.free) == 0 {
			// Queue full: read and drop so the socket does not back up.
			var scratch [1]byte
			if _, _, err := unix.Recvfrom(d.in, scratch[:], unix.MSG_DONTWAIT|unix.MSG_TRUNC); err != nil {
				return
			}
			d.r.c.received.Add(1)
			d.r.c.overflow.Add(1)
			continue
		}
		k := min(recvBatch, len(d.free))
		for i := range k {
			d.batch[i] = d.free[len(d.free)-1-i]
			d.batchBufs[i] = d.bufs[d.batch[i]]
		}
		d.free = d.free[:len(d.free)-k]
		got, err := d.rd.read(d.in, d.batchBufs[:k], d.batchLens[:k])
		for i := k - 1; i >= got; i-- {
			d.free = append(d.free, d.batch[i]) // unused, back in their places
		}
		if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EINTR) {
			d.r.c.receiveErrors.Add(1)
		}
		for i := range got {
			d.take(cfg, d.batch[i], d.batchLens[i])
		}
		if got < k {
			return
		}
		if d.bn != nil {
			d.flush() // keep the bottleneck's output paced while a burst comes in
		}
	}
}

// take impairs the frame of n bytes just read into buffer bi and queues it
// (or drops it, putting bi back on the free list).
func (d *relayDir) take(cfg *RelayConfig, bi, n int) {
	buf := d.bufs[bi]
	d.r.c.received.Add(1)
	if n > len(buf) {
		d.r.c.overflow.Add(1)
		d.free = append(d.free, bi)
		return
	}
	impair := cfg.Filter == nil || cfg.Filter(buf[:n])
	if impair && d.chance(cfg.Loss) {
		d.r.c.lost.Add(1)
		d.free = append(d.free, bi)
		return
	}
	if impair && d.chance(cfg.Corrupt) {
		from := min(cfg.CorruptFrom, n-1)
		off := from + d.rng.IntN(n-from)
		buf[off] ^= 1 << d.rng.IntN(8)
		d.r.c.corrupted.Add(1)
	}
	due := d.now()
	if cfg.Delay > 0 || cfg.Jitter > 0 {
		due += int64(cfg.Delay)
		if cfg.Jitter > 0 {
			due += d.rng.Int64N(int64(cfg.Jitter))
		}
		if len(d.q) > 0 && d.q[len(d.q)-1].due > due {
			due = d.q[len(d.q)-1].due // keep FIFO order
		}
		d.r.c.delayed.Add(1)
	}
	if impair && d.held < 0 && d.chance(cfg.Reorder) {
		d.held, d.heldN, d.heldDue = bi, n, due+int64(cfg.ReorderHold)
		d.r.c.reordered.Add(1)
		return
	}
	dup := impair && d.chance(cfg.Duplicate)
	d.q = append(d.q, queued{buf: bi, n: n, due: due})
	if dup {
		if len(d.free) > 0 {
			di := d.free[len(d.free)-1]
			d.free = d.free[:len(d.free)-1]
			copy(d.bufs[di], buf[:n])
			d.q = append(d.q, queued{buf: di, n: n, due: due})
			d.r.c.duplicated.Add(1)
		} else {
			d.r.c.overflow.Add(1)
		}
	}
	if d.held >= 0 {
		// The held frame goes after this one: that is the reordering.
		d.q = append(d.q, queued{buf: d.held, n: d.heldN, due: due})
		d.held = -1
	}
}

func (d *relayDir) chance(p float64) bool {
	return p > 0 && d.rng.Float64() < p
}

func (d *relayDir) flush() {
	now := d.now()
	if d.held >= 0 && d.heldDue <= now {
		d.q = append(d.q, queued{buf: d.held, n: d.heldN, due: now})
		d.held = -1
	}
	i := 0
	for ; i < len(d.q) && d.q[i].due <= now; i++ {
		e := d.q[i]
		if d.bn != nil {
			d.bn.enqueue(d.bufs[e.buf][:e.n])
		} else if !d.write(d.bufs[e.buf][:e.n]) {
			break // try again on the next round
		}
		d.free = append(d.free, e.buf)
	}
	d.q = d.q[:copy(d.q, d.q[i:])]
	if d.bn != nil {
		d.bn.drain(d.now(), d.write)
	}
}

// writeOut sends a frame and counts it; false means the socket is full and
// the frame should be tried again (any other error counts and drops it).
func (d *relayDir) writeOut(f []byte) bool {
	if _, err := unix.Write(d.out, f); err != nil {
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ENOBUFS) {
			return false
		}
		d.r.c.sendErrors.Add(1)
		return true
	}
	d.r.c.forwarded.Add(1)
	d.r.c.forwardedBytes.Add(uint64(len(f)))
	return true
}
