package netlab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Bottleneck makes a relay's a→b direction (frames read on its first
// interface, written on its second) a slow switch port: a FIFO queue drained
// at Rate by a token bucket, ECN marking RED-like on the instantaneous queue
// depth, and tail drop when the queue is full. The zero value (Rate 0) is off.
//
// Marking: with the queue holding q (frames, or bytes with Bytes) when a frame
// arrives, an ECN-capable frame (IPv4 TOS or IPv6 traffic class ECN bits
// ECT(0) or ECT(1)) is marked CE never while q ≤ MarkMin, with probability
// MarkP·(q−MarkMin)/(MarkMax−MarkMin) while MarkMin < q < MarkMax, and always
// once q ≥ MarkMax. Marking rewrites the ECN bits (and updates the IPv4 header
// checksum); the RoCEv2 ICRC masks the TOS and traffic class, so a marked RoCE
// frame still passes its ICRC check. Frames that are not ECN-capable (and
// frames already CE) are never marked and never dropped early: only the tail
// drop applies to them.
type Bottleneck struct {
	// Rate is the drain rate in bits per second of frame bytes as the packet
	// socket sees them (Ethernet header to the end of the payload; no
	// preamble, FCS or inter-frame gap). 0 turns the bottleneck off.
	Rate int64
	// Burst is the token bucket's depth in bytes; 0 means the bytes of 5 ms
	// at Rate, at least two frames of the interface's MTU: what an idle
	// port saves up. While frames wait the port counts as busy, and time the
	// relay's goroutine was not scheduled is made up by sending the queued
	// frames at once (at most the queue), so the long-run rate holds.
	Burst int
	// Queue is the queue's limit: frames, or bytes when Bytes is set. A frame
	// that would take the queue past it is dropped (TailDropped). 0 means
	// 1000 frames (with Bytes: 1000 frames of the interface's MTU).
	Queue int
	// Bytes makes Queue, MarkMin and MarkMax count bytes instead of frames.
	Bytes bool
	// MarkMin, MarkMax and MarkP set ECN marking (see above); MarkP 0 turns
	// it off. 0 ≤ MarkMin ≤ MarkMax, MarkP in (0, 1].
	MarkMin, MarkMax int
	MarkP            float64
}

// BottleneckStats counts what a relay's bottleneck did.
type BottleneckStats struct {
	Forwarded, Bytes uint64 // frames and frame bytes written out of the queue
	ECT, Marked      uint64 // ECN-capable frames enqueued; of them, marked CE
	TailDropped      uint64 // frames dropped at a full queue
	// MaxFrames and MaxBytes are the deepest the queue got.
	MaxFrames, MaxBytes uint64
}

type bottleneckCounters struct {
	forwarded, bytes, ect, marked, tailDropped, maxFrames, maxBytes atomic.Uint64
}

func (c *bottleneckCounters) stats() BottleneckStats {
	return BottleneckStats{
		Forwarded: c.forwarded.Load(), Bytes: c.bytes.Load(), ECT: c.ect.Load(), Marked: c.marked.Load(),
		TailDropped: c.tailDropped.Load(), MaxFrames: c.maxFrames.Load(), MaxBytes: c.maxBytes.Load(),
	}
}

// check validates b and fills in its defaults for frames up to maxFrame bytes.
func (b *Bottleneck) check(maxFrame int) error {
	if b.Rate < 0 || b.Burst < 0 || b.Queue < 0 || b.MarkMin < 0 || b.MarkMax < 0 {
		return errors.New("netlab: relay: bottleneck: negative rate, burst, queue or threshold")
	}
	if b.Burst == 0 {
		b.Burst = max(int(b.Rate/8/200), 2*maxFrame)
	}
	if b.Queue == 0 {
		b.Queue = 1000
		if b.Bytes {
			b.Queue *= maxFrame
		}
	}
	if b.Bytes && b.Queue < maxFrame {
		return fmt.Errorf("netlab: relay: bottleneck: queue of %d bytes holds no %d-byte frame", b.Queue, maxFrame)
	}
	if b.MarkP < 0 || b.MarkP > 1 {
		return fmt.Errorf("netlab: relay: bottleneck: marking probability %v outside [0, 1]", b.MarkP)
	}
	if b.MarkP > 0 && b.MarkMin > b.MarkMax {
		return fmt.Errorf("netlab: relay: bottleneck: marking threshold min %d above max %d", b.MarkMin, b.MarkMax)
	}
	return nil
}

// bottleneck is the queue and token bucket of one relay direction; the
// direction's goroutine owns it.
type bottleneck struct {
	cfg    Bottleneck
	rng    *rand.Rand
	c      *bottleneckCounters
	rate   float64 // bytes per ns
	tokens float64 // bytes; may go negative by one frame (deficit pacing)
	last   int64   // ns of the last refill
	fresh  bool    // nothing sent yet: the first frame finds a full bucket
	busy   bool    // frames were left queued at the last drain

	// The queue: frames stored back to back in data (a frame never wraps;
	// the space at the end that is too short for one is skipped), their
	// offsets and lengths in a ring of ents.
	data        []byte
	ents        []span
	head, n     int // first entry, number of entries
	wr          int // where the next frame goes in data
	queuedBytes int
	maxF, maxB  int
}

type span struct{ off, n int }

// minFrame bounds the entries a byte-limited queue may hold (the Ethernet
// header and an ARP body are 42 bytes; nothing shorter crosses a veth).
const minFrame = 42

func newBottleneck(cfg Bottleneck, maxFrame int, rng *rand.Rand, c *bottleneckCounters) *bottleneck {
	b := &bottleneck{cfg: cfg, rng: rng, c: c, rate: float64(cfg.Rate) / 8 / 1e9, fresh: true}
	entries, size := cfg.Queue, cfg.Queue*maxFrame
	if cfg.Bytes {
		entries, size = cfg.Queue/minFrame+1, cfg.Queue
	}
	b.data = make([]byte, size+2*maxFrame)
	b.ents = make([]span, entries)
	return b
}

// depth is the queue's fill in its own unit.
func (b *bottleneck) depth() int {
	if b.cfg.Bytes {
		return b.queuedBytes
	}
	return b.n
}

// enqueue marks frame when the queue asks for it and copies it in, or drops
// it when the queue is full.
func (b *bottleneck) enqueue(frame []byte) {
	n := len(frame)
	full := b.n == len(b.ents) || (b.cfg.Bytes && b.queuedBytes+n > b.cfg.Queue)
	off := -1
	if !full {
		off = b.place(n)
	}
	if off < 0 {
		b.c.tailDropped.Add(1)
		return
	}
	if ecnCapable(frame) {
		b.c.ect.Add(1)
		if b.shouldMark() && markCE(frame) {
			b.c.marked.Add(1)
		}
	}
	copy(b.data[off:], frame)
	b.ents[(b.head+b.n)%len(b.ents)] = span{off, n}
	b.n++
	b.wr = off + n
	b.queuedBytes += n
	if b.n > b.maxF {
		b.maxF = b.n
		b.c.maxFrames.Store(uint64(b.n))
	}
	if b.queuedBytes > b.maxB {
		b.maxB = b.queuedBytes
		b.c.maxBytes.Store(uint64(b.queuedBytes))
	}
}

// place finds room for n contiguous bytes, or returns -1.
func (b *bottleneck) place(n int) int {
	if b.n == 0 {
		b.wr = 0
		return 0
	}
	rd := b.ents[b.head].off
	if b.wr > rd { // the frames lie in [rd, wr)
		if b.wr+n <= len(b.data) {
			return b.wr
		}
		if n < rd {
			return 0
		}
		return -1
	}
	if b.wr+n < rd { // wrapped: free space is [wr, rd)
		return b.wr
	}
	return -1
}

func (b *bottleneck) shouldMark() bool {
	cfg := &b.cfg
	if cfg.MarkP == 0 {
		return false
	}
	q := b.depth()
	switch {
	case q >= cfg.MarkMax:
		return true
	case q <= cfg.MarkMin:
		return false
	}
	return b.rng.Float64() < cfg.MarkP*float64(q-cfg.MarkMin)/float64(cfg.MarkMax-cfg.MarkMin)
}

// refill adds the tokens earned since the last call. An idle port (empty
// queue at the last drain) saves up to Burst. A busy one would have been
// sending all along: when the relay's goroutine was not scheduled for a while
// it catches up, up to what is queued, so the rate holds on a loaded machine.
func (b *bottleneck) refill(now int64) {
	if b.fresh {
		b.tokens, b.last, b.fresh = float64(b.cfg.Burst), now, false
		return
	}
	limit := float64(b.cfg.Burst)
	if b.busy {
		limit = max(limit, float64(b.queuedBytes))
	}
	b.tokens = min(limit, b.tokens+float64(now-b.last)*b.rate)
	b.last = now
}

// drain writes frames while the bucket has tokens. write reports whether the
// frame left (false: the socket is full, keep it and try later).
func (b *bottleneck) drain(now int64, write func([]byte) bool) {
	if b.n == 0 {
		return
	}
	b.refill(now)
	for b.n > 0 && b.tokens > 0 {
		e := b.ents[b.head]
		if !write(b.data[e.off : e.off+e.n]) {
			return
		}
		b.tokens -= float64(e.n)
		b.c.forwarded.Add(1)
		b.c.bytes.Add(uint64(e.n))
		b.pop()
	}
	b.busy = b.n > 0
}

// pop removes the frame at the head of the queue.
func (b *bottleneck) pop() {
	b.queuedBytes -= b.ents[b.head].n
	b.head = (b.head + 1) % len(b.ents)
	b.n--
}

// wait is how long until drain has something to send: 0 when it can now,
// -1 when the queue is empty. When the bucket is in deficit it waits for a
// quarter of the burst (at least one frame) rather than for each frame, so
// pacing wakes up once per several frames.
func (b *bottleneck) wait(now int64) time.Duration {
	if b.n == 0 {
		return -1
	}
	if b.tokens > 0 {
		return 0
	}
	want := max(float64(b.cfg.Burst)/4, float64(b.ents[b.head].n)) - b.tokens
	d := time.Duration(want/b.rate) - time.Duration(now-b.last)
	return max(d, 0)
}

// ipHeader returns the offset of the IP header of an Ethernet frame
// (skipping one 802.1Q tag) and whether it is IPv6; -1 when it is neither
// IPv4 nor IPv6 or too short.
func ipHeader(f []byte) (int, bool) {
	if len(f) < 14 {
		return -1, false
	}
	off, et := 14, binary.BigEndian.Uint16(f[12:])
	if et == 0x8100 && len(f) >= 18 {
		off, et = 18, binary.BigEndian.Uint16(f[16:])
	}
	switch {
	case et == 0x0800 && len(f) >= off+20 && f[off]>>4 == 4:
		return off, false
	case et == 0x86DD && len(f) >= off+40 && f[off]>>4 == 6:
		return off, true
	}
	return -1, false
}

// ecnBits returns the ECN field of an IP frame, or -1.
func ecnBits(f []byte) int {
	off, v6 := ipHeader(f)
	switch {
	case off < 0:
		return -1
	case v6:
		return int(f[off+1]>>4) & 3
	}
	return int(f[off+1]) & 3
}

func ecnCapable(f []byte) bool {
	e := ecnBits(f)
	return e == 1 || e == 2
}

// markCE sets the ECN field of an ECT(0) or ECT(1) frame to CE, updating the
// IPv4 header checksum incrementally (RFC 1624, eqn. 3); it reports whether
// it did.
func markCE(f []byte) bool {
	if !ecnCapable(f) {
		return false
	}
	off, v6 := ipHeader(f)
	if v6 {
		f[off+1] |= 0x30
		return true
	}
	old := binary.BigEndian.Uint16(f[off:])
	f[off+1] |= 3
	sum := uint32(^binary.BigEndian.Uint16(f[off+10:])) + uint32(^old) + uint32(binary.BigEndian.Uint16(f[off:]))
	sum = sum&0xffff + sum>>16
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(f[off+10:], ^uint16(sum))
	return true
}
