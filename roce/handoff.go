package roce

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Engines per queue (Options.Engines): each engine receives on its own
// queues of the link, but a frame's queue pair may belong to another engine
// (queue pairs are shared out by QPN, see Device.engineFor, while the peer
// and the NIC choose the queue). The receiving engine copies such a frame
// into a handRing towards the owner and wakes it; the owner decodes and
// delivers it in its next round. One ring per pair of engines, so each has
// one writer and one reader and needs no lock; the slots are made with the
// device, so a handoff allocates nothing. A frame finding the ring full
// stays in the receiving engine's batch, with the frames after it, until
// the owner has made room (Stats.HandoffStalls counts the rounds this took;
// the engine reads no more from its queues meanwhile, but keeps reading its
// own inboxes, so two engines waiting on each other both go on). A
// multicast frame for several engines cannot wait for some of them: it is
// dropped where the ring is full (Stats.HandoffDrops), and the protocol
// above UD copes as with a frame the link lost.

// handSlots is the smallest number of frames a handRing holds; it holds
// four receive batches (Options.RxBatch), rounded up to a power of two.
// (A variable for tests.)
var handSlots = 256

// handRing is a bounded single-producer single-consumer queue of frames.
type handRing struct {
	slots [][]byte // each with the capacity of the largest frame
	mask  uint32
	// taken counts the frames the reader has read but not yet released
	// (their slots stay the reader's until release).
	taken uint32
	// full is set by the writer when it found the ring full and waits for
	// room: the reader wakes it when it releases slots.
	full atomic.Bool
	_    [64]byte // head and tail on cache lines of their own
	head atomic.Uint32
	_    [60]byte
	tail atomic.Uint32
}

func newHandRing(frameSize, batch int) *handRing {
	n := 1
	for n < handSlots || n < 4*batch {
		n *= 2
	}
	r := &handRing{slots: make([][]byte, n), mask: uint32(n - 1)}
	buf := make([]byte, n*frameSize)
	for i := range r.slots {
		r.slots[i] = buf[i*frameSize : i*frameSize : (i+1)*frameSize]
	}
	return r
}

// put copies frame into the next free slot; false when the ring is full or
// the frame longer than a slot. The writer's.
func (r *handRing) put(frame []byte) bool {
	t := r.tail.Load()
	if t-r.head.Load() == uint32(len(r.slots)) {
		return false
	}
	i := t & r.mask
	s := r.slots[i]
	if len(frame) > cap(s) {
		return false
	}
	r.slots[i] = s[:copy(s[:cap(s)], frame)]
	r.tail.Store(t + 1)
	return true
}

// next returns the next frame not yet read, or nil; it stays valid until
// release. The reader's.
func (r *handRing) next() []byte {
	h := r.head.Load() + r.taken
	if h == r.tail.Load() {
		return nil
	}
	r.taken++
	return r.slots[h&r.mask]
}

// pending reports whether frames wait to be read.
func (r *handRing) pending() bool { return r.head.Load()+r.taken != r.tail.Load() }

// release gives the slots of the frames read back to the writer.
func (r *handRing) release() {
	if r.taken != 0 {
		r.head.Add(r.taken)
		r.taken = 0
	}
}

// handoff copies frame to engine to (another one), and reports false when
// its inbox from e is full. Either way to is woken at the end of the batch
// (wakeHanded).
func (e *engine) handoff(to *engine, frame []byte) bool {
	e.wakeMask |= 1 << to.idx
	r := to.inbox[e.idx]
	if !r.put(frame) {
		// Ask to be woken when the reader releases slots, then look
		// again: it may have released them before it could see full.
		r.full.Store(true)
		if !r.put(frame) {
			return false
		}
	}
	e.handoffs++
	return true
}

// receiveMulti is the receive step of an engine among several: it reads a
// batch from its queues (none while frames of the last one are held),
// hands out or handles the frames in order, stopping at the first whose
// engine has no room (the rest are held), then handles what other engines
// handed it. It returns how many frames of its own it dealt with.
func (e *engine) receiveMulti(now int64) (int, error) {
	var err error
	if len(e.held) == 0 {
		var n int
		n, err = e.l.Receive(e.rx)
		e.held = e.rx[:n]
	}
	i := 0
	for i < len(e.held) && e.input(e.held[i], now) {
		i++
	}
	e.held = e.held[i:]
	if len(e.held) > 0 {
		e.handStalls++
	}
	e.wakeHanded()
	e.inputHanded(now)
	return i, err
}

// wakeHanded wakes the engines handed frames since the last call.
func (e *engine) wakeHanded() {
	for m := e.wakeMask; m != 0; m &= m - 1 {
		to := e.d.engs[bits.TrailingZeros64(m)]
		if to.sleeping.Load() && to.sleeping.CompareAndSwap(true, false) {
			to.l.Wake()
		}
		to.poke() // in case it waits for room (awaitRoom)
	}
	e.wakeMask = 0
}

// poke ends a running or the next awaitRoom of e.
func (e *engine) poke() {
	select {
	case e.room <- struct{}{}:
	default:
	}
}

// awaitRoom is how an engine holding frames (receiveMulti) sleeps: not in
// its link's Wait, which returns at once while its queues hold frames it
// cannot read yet, but until an engine it waits on releases slots or hands
// it frames (poke), at most starvedWait. Doorbells wait as long.
func (e *engine) awaitRoom() {
	if e.stall == nil {
		e.stall = time.NewTimer(starvedWait)
	} else {
		e.stall.Reset(starvedWait)
	}
	select {
	case <-e.room:
		e.stall.Stop()
	case <-e.stall.C:
	}
}

// inputHanded decodes and delivers the frames other engines handed to e.
func (e *engine) inputHanded(now int64) {
	for _, r := range e.inbox {
		if r == nil {
			continue
		}
		for f := r.next(); f != nil; f = r.next() {
			e.inputOwn(f, now, true, false)
		}
	}
}

// releaseHanded gives the slots of the frames read in this round back, at
// its end (frames are the engine's for the whole round, as those of its
// link), and wakes the engines that wait for room.
func (e *engine) releaseHanded() {
	for j, r := range e.inbox {
		if r == nil {
			continue
		}
		r.release()
		if r.full.Load() && r.full.CompareAndSwap(true, false) {
			e.d.engs[j].poke()
		}
	}
}

// handedPending reports whether another engine handed e frames it has not read.
func (e *engine) handedPending() bool {
	for _, r := range e.inbox {
		if r != nil && r.pending() {
			return true
		}
	}
	return false
}
