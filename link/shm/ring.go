package shm

import (
	"sync/atomic"
	"unsafe"

	"github.com/xdproce/xdproce/link/internal/bufpool"
)

// ring is one direction's control block and descriptors in the shared
// mapping. Indexes are free-running uint32s; entry i lives at i & mask. Every
// access to shared memory is one atomic load or store of an aligned word, so
// each value the peer wrote is fetched once and then checked.
type ring struct {
	tail *atomic.Uint32 // written by the producer
	head *atomic.Uint32 // written by the consumer
	need *atomic.Uint32 // non-zero: the consumer sleeps on its eventfd
	desc unsafe.Pointer
	mask uint32
	size uint32
}

func newRing(mem []byte, l *layout, d int) ring {
	c := unsafe.Pointer(&mem[l.ctl[d]])
	return ring{
		tail: (*atomic.Uint32)(unsafe.Add(c, tailOff)),
		head: (*atomic.Uint32)(unsafe.Add(c, headOff)),
		need: (*atomic.Uint32)(unsafe.Add(c, needOff)),
		desc: unsafe.Pointer(&mem[l.desc[d]]),
		mask: uint32(l.ring - 1),
		size: uint32(l.ring),
	}
}

func (r *ring) entry(i uint32) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Add(r.desc, uintptr(i&r.mask)*descSize))
}

// The indexes of both ends start at 0 (a fresh port is all zeros) and are
// never read back from the shared memory to initialise them.

// txQueue is the producer side of a direction: this end's frame buffers in
// the direction's area and the private books on them. Which slot sits at
// which ring position is kept here, not read back from the shared
// descriptors.
type txQueue struct {
	ring
	pool    bufpool.Pool // slots: free, held by the caller (taken), or queued
	slots   int
	budget  int     // buffers the caller may hold at once
	held    int     // buffers the caller holds
	prod    uint32  // next position to fill (published as tail)
	cons    uint32  // positions before this are consumed (the peer's head, checked)
	posSlot []int32 // slot queued at each ring position
}

func newTxQueue(mem []byte, l *layout, d int) txQueue {
	q := txQueue{
		ring:    newRing(mem, l, d),
		slots:   l.slots,
		budget:  l.buffers,
		posSlot: make([]int32, l.ring),
	}
	q.pool.InitOn(mem[l.area[d]:], l.slots, l.slotSize, l.maxFrame)
	return q
}

// reclaim frees the slots the consumer has released. A head outside
// [cons, prod] is ignored and counted.
func (q *txQueue) reclaim(st *counts) {
	h := q.head.Load()
	if h-q.cons > q.prod-q.cons {
		st.badIndexes++
		return
	}
	for ; q.cons != h; q.cons++ {
		q.pool.Release(q.posSlot[q.cons&q.mask])
	}
}

func (q *txQueue) alloc(bufs [][]byte, st *counts) int {
	want := min(len(bufs), q.budget-q.held)
	if q.pool.Free() < want {
		q.reclaim(st)
	}
	n := q.pool.Alloc(bufs[:want])
	q.held += n
	return n
}

// take takes b (a buffer from alloc, possibly resliced shorter) back from
// the caller and returns its slot, or -1 if b is not an outstanding buffer.
func (q *txQueue) take(b []byte) int32 {
	s := q.pool.Take(b)
	if s >= 0 {
		q.held--
	}
	return s
}

func (q *txQueue) put(bufs [][]byte) {
	for _, b := range bufs {
		if s := q.take(b); s >= 0 {
			q.pool.Release(s)
		}
	}
}

// send queues the frames and publishes the new tail; it reports whether any
// frame was queued. Every buffer comes back to the free list or the ring.
func (q *txQueue) send(frames [][]byte, st *counts) (bool, error) {
	var err error
	start := q.prod
	reclaimed := false
	for _, f := range frames {
		s := q.take(f)
		if s < 0 {
			err = errForeign
			continue
		}
		if len(f) < minFrame {
			err = errRunt
			q.pool.Release(s)
			continue
		}
		if q.prod-q.cons >= q.size && !reclaimed {
			q.reclaim(st) // once a call: the peer's head is read at most once
			reclaimed = true
		}
		if q.prod-q.cons >= q.size {
			st.overflow++
			q.pool.Release(s)
			continue
		}
		q.entry(q.prod).Store(uint64(q.pool.Offset(s)) | uint64(len(f))<<32)
		q.posSlot[q.prod&q.mask] = s
		q.prod++
	}
	if q.prod == start {
		return false, err
	}
	st.sent += uint64(q.prod - start)
	q.tail.Store(q.prod)
	return true, err
}

// wantsWake reports whether the consumer said it sleeps, clearing its flag,
// so that one signal is sent per sleep.
func (q *txQueue) wantsWake() bool {
	return q.need.CompareAndSwap(1, 0)
}

// rxQueue is the consumer side of a direction.
type rxQueue struct {
	ring
	area     []byte
	slotSize uint32
	maxFrame uint32
	head     uint32 // next position to read; frames before it are lent or dropped
	pub      uint32 // head as last published
}

func newRxQueue(mem []byte, l *layout, d int) rxQueue {
	q := rxQueue{
		ring:     newRing(mem, l, d),
		area:     mem[l.area[d] : l.area[d]+l.slots*l.slotSize : l.area[d]+l.slots*l.slotSize],
		slotSize: uint32(l.slotSize),
		maxFrame: uint32(l.maxFrame),
	}
	return q
}

// avail returns how many positions the producer has published beyond head,
// or 0 (counted when st is not nil) if its tail is behind head or more than
// the ring size ahead.
func (q *rxQueue) avail(st *counts) uint32 {
	n := q.tail.Load() - q.head
	if n > q.size {
		if st != nil {
			st.badIndexes++
		}
		return 0
	}
	return n
}

// release hands the frames lent by the last receive back to the producer.
func (q *rxQueue) release() {
	if q.pub != q.head {
		q.pub = q.head
		q.ring.head.Store(q.pub)
	}
}

// receive lends up to len(frames) frames; descriptors that fail the checks
// are consumed and counted, their frames dropped.
func (q *rxQueue) receive(frames [][]byte, st *counts) int {
	q.release()
	avail := q.avail(st)
	n := 0
	for ; avail > 0 && n < len(frames); avail-- {
		d := q.entry(q.head).Load()
		q.head++
		off, ln := uint32(d), uint32(d>>32)
		if off%q.slotSize != 0 || uint64(off) >= uint64(len(q.area)) || ln < minFrame || ln > q.maxFrame {
			st.badDescs++
			continue
		}
		frames[n] = q.area[off : off+ln : off+ln]
		n++
	}
	st.received += uint64(n)
	return n
}

// counts are one call's contributions to Stats.
type counts struct {
	sent, received, overflow, wakeups, badDescs, badIndexes uint64
}
