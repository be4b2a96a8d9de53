package roce

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xdproce/xdproce/link"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// engine is a progress goroutine's state. A device has one, or
// Options.Engines, each on its share of the link's queues with its share of
// the queue pairs (engines.go). Everything here is owned by that goroutine
// but the doorbell fields and the inboxes' writers' sides.
type engine struct {
	d    *Device
	l    link.Link        // this engine's queues (the whole link when it is the only engine)
	chk  link.ICRCChecker // l's, when it verifies ICRCs itself (link/udp); else nil
	idx  int              // in Device.engs
	cpus []int            // pinned to these (Options.CPUs; nil: not pinned)

	// Doorbells: queue pairs with work posted, for the next round.
	bell     atomic.Bool
	sleeping atomic.Bool
	readyMu  sync.Mutex
	posted   []*qpEntry
	rounds   atomic.Uint64 // rounds run (Device.sync)

	// Queue pairs to hand to another engine (Device.settle).
	moveMu      sync.Mutex
	moves       []qpMove
	movePending atomic.Bool

	// Frames other engines received for this one's queue pairs: inbox[j]
	// from engine j (nil for this one and on a single-engine device).
	inbox    []*handRing
	wakeMask uint64        // engines handed frames in this batch (handoff.go)
	held     [][]byte      // received frames not yet handled: an inbox was full
	room     chan struct{} // poked when an inbox has room or frames came (awaitRoom)
	stall    *time.Timer   // awaitRoom's (made at the first)

	rx  [][]byte
	pkt wire.Packet
	tx  txq

	work   []*qpEntry // queue pairs to run this round
	again  []*qpEntry // starved of transmit buffers last round: run again
	ready  []*qpEntry // swapped with Device.ready
	timers timerHeap
	// removedSeen is Device.removed when the timer heap was last compacted.
	removedSeen uint64

	// Counters, published to Device.st at the end of each round.
	rxFrames, rxBytes                                       uint64
	delivered                                               uint64 // frames handed to a queue pair
	dropBadICRC, dropMalformed, dropNotRoCE, dropUnknownQPN uint64
	rxErrors                                                uint64
	naps                                                    uint64
	handoffs, handDrops, handStalls                         uint64
}

// Timeout of one Wait when transmit buffers ran out: the link frees them as
// frames leave.
const starvedWait = 50 * time.Microsecond

func newEngine(d *Device, l link.Link, idx int) *engine {
	e := &engine{
		d:      d,
		l:      l,
		idx:    idx,
		rx:     make([][]byte, d.opts.RxBatch),
		work:   make([]*qpEntry, 0, 64),
		again:  make([]*qpEntry, 0, 64),
		ready:  make([]*qpEntry, 0, 64),
		timers: make(timerHeap, 0, 64),
		room:   make(chan struct{}, 1),
	}
	e.chk, _ = l.(link.ICRCChecker)
	e.tx.init(l, 64)
	return e
}

// run is the progress goroutine. It reports on started whether it could pin
// itself (Options.CPUs) before it does anything else.
func (e *engine) run(started chan<- error) {
	d := e.d
	// A link that ends by itself (the xdproce daemon behind link/shm went
	// away) ends the device: Close flushes the queue pairs, so waiting
	// applications see WR_FLUSH_ERR and later verbs fail.
	defer func() {
		if !d.closing.Load() {
			d.linkLost.Store(true)
			go d.Close()
		}
	}()
	defer func() {
		if d.live.Add(-1) == 0 {
			close(d.done)
		}
	}()
	defer e.tx.release()
	if len(e.cpus) > 0 {
		// Locked and never unlocked: the runtime ends the thread with
		// the goroutine instead of reusing it. When the goroutine ran on
		// the main thread, which cannot end, the runtime parks that for
		// good instead: restore runs first, so neither keeps the
		// narrowed mask.
		runtime.LockOSThread()
		restore, err := pinThread(e.cpus)
		if err != nil {
			started <- err
			return
		}
		defer restore()
	}
	started <- nil
	spin := newSpinner(d.opts.BusyPoll)
	spinning := d.opts.BusyPoll != 0 // without it no round reads the clock to ask the spinner
	coalesce := d.opts.RxCoalesce
	if d.opts.BusyPoll > 0 {
		coalesce = 0
	}
	var active int64 // time of the last round that did something
	var woke uint64  // qp.WokeWaiters when this engine last went to sleep
	multi := len(d.engs) > 1
	for !d.closing.Load() {
		now := d.now()
		if e.movePending.Load() {
			e.applyMoves() // engines.go
		}
		var n int
		var err error
		if multi {
			n, err = e.receiveMulti(now) // handoff.go
		} else {
			n, err = e.l.Receive(e.rx)
		}
		if err != nil {
			if errors.Is(err, link.ErrClosed) {
				return
			}
			e.rxErrors++
			n = 0
		}
		if !multi {
			for i := 0; i < n; i++ {
				e.inputOwn(e.rx[i], now, false, e.chk != nil && e.chk.ICRCChecked(i))
			}
		}
		e.collect(now)
		if n > 0 || len(e.work) > 0 {
			active = now
		}
		for i, q := range e.work {
			e.work[i] = nil
			q.touched = false
			if q.dead.Load() {
				continue
			}
			dl := q.q.Progress(now, &e.tx)
			e.qpEvents(q, false)
			q.deadline = dl
			if dl != 0 && (q.heapAt == 0 || dl < q.heapAt) {
				q.heapAt = dl
				e.timers.push(timer{at: dl, e: q})
			}
			if e.tx.starved {
				e.tx.starved = false
				e.again = append(e.again, q)
			}
		}
		e.work = e.work[:0]
		e.tx.endRound()
		if multi {
			e.releaseHanded()
		}
		sent := e.tx.frames
		e.publish()
		spin.round(now, n, sent)
		if len(e.held) > 0 {
			e.awaitRoom() // handoff.go
			continue
		}
		if err == nil && n == len(e.rx) {
			continue // more frames are waiting
		}
		// In a stream of received frames, nap (Options.RxCoalesce) rather
		// than spin; otherwise poll again while the spinner says so.
		nap := coalesce > 0 && n >= 2 && sent*8 < uint64(n)
		if !nap && spinning && spin.spin(d.now(), active) {
			runtime.Gosched()
			continue
		}
		// Sleep until a frame, a doorbell or the next deadline.
		timeout := time.Duration(-1)
		if nap {
			timeout = coalesce
		}
		if len(e.again) > 0 || err != nil {
			timeout = starvedWait
		} else if len(e.timers) > 0 {
			t := time.Duration(e.timers[0].at - d.now())
			if t <= 0 {
				continue
			}
			if timeout < 0 || t < timeout {
				timeout = t
			}
		}
		if !nap {
			e.yieldToWoken(&woke) // yield.go
		}
		e.sleeping.Store(true)
		if e.bell.Load() || d.closing.Load() || multi && e.handedPending() {
			e.sleeping.Store(false)
			continue
		}
		var werr error
		enginesAsleep.Add(1) // yield.go
		if nap {
			e.naps++
			werr = link.Nap(e.l, timeout)
		} else {
			werr = e.l.Wait(timeout)
		}
		enginesAsleep.Add(-1)
		e.sleeping.Store(false)
		if werr != nil && errors.Is(werr, link.ErrClosed) {
			return
		}
	}
}

// collect builds this round's work list beyond the queue pairs that received
// frames: those starved last round, those whose doorbell rang, those whose
// timer is due.
func (e *engine) collect(now int64) {
	for i, q := range e.again {
		e.again[i] = nil
		if q.eng.Load() != e {
			e.d.doorbell(q) // moved since (engines.go)
			continue
		}
		e.schedule(q)
	}
	e.again = e.again[:0]
	if e.bell.Swap(false) {
		e.readyMu.Lock()
		e.ready, e.posted = e.posted, e.ready[:0]
		e.readyMu.Unlock()
		for i, q := range e.ready {
			e.ready[i] = nil
			q.queued.Store(false)
			if q.eng.Load() != e {
				e.d.doorbell(q) // moved since it rang (engines.go)
				continue
			}
			e.schedule(q)
		}
		e.ready = e.ready[:0]
	}
	if r := e.d.removed.Load(); r-e.removedSeen > uint64(len(e.timers)/2) {
		// Removed queue pairs' elements would stay until their time came
		// (a local ACK timeout: up to seconds), each keeping its queue
		// pair's memory: with as many removals as half the heap, keep only
		// the live elements.
		e.removedSeen = r
		e.timers.compact(e)
	}
	for len(e.timers) > 0 && e.timers[0].at <= now {
		t := e.timers.pop()
		q := t.e
		if q.eng.Load() != e || q.heapAt != t.at {
			continue // superseded by an earlier element
		}
		q.heapAt = 0
		switch {
		case q.deadline == 0 || q.dead.Load():
		case q.deadline <= now:
			e.schedule(q)
		default: // moved later since: wait again
			q.heapAt = q.deadline
			e.timers.push(timer{at: q.deadline, e: q})
		}
	}
}

func (e *engine) schedule(q *qpEntry) {
	if !q.touched {
		q.touched = true
		e.work = append(e.work, q)
	}
}

// input decodes one received frame and hands it to its queue pair. The frame
// is the engine's until the next Receive and nobody else reads it meanwhile
// (capture.Wrap has written it out inside Receive), so it is decoded in place
// (wire.InPlace, as DecodeWritable; the frame stays byte-identical). The OOO
// opcodes are decoded (wire.AcceptOOO) only while the device has an OOO queue
// pair, and reach only those: elsewhere they are malformed, as on a device
// without OOO mode (docs/ooo.md); the SR opcodes likewise (wire.AcceptSR)
// only for queue pairs connected with selective repeat (docs/sr-wire.md). A frame with a bad
// ICRC is dropped and counted: links that rebuild headers
// (link.Props.SyntheticHeaders) put the sender's IPv4 Identification back
// themselves (link/udp recovers it from the ICRC, which verifies it: a
// frame it reports checked, link.ICRCChecker, is not hashed again).
//
// On a device of several engines input hands a frame for another engine's
// queue pair over to it before decoding it (the owner checks it); inputOwn
// is the rest, and all of it on a device of one engine.
//
// input reports false, having done nothing, when the frame's engine has no
// room for it: the caller keeps it for a later round.
func (e *engine) input(frame []byte, now int64) bool {
	if n, ok := wire.PeekDestQPN(frame); ok && n != MulticastQPN {
		if q := e.d.lookup(n); q != nil && q.eng.Load() != e {
			if !e.handoff(q.eng.Load(), frame) {
				return false
			}
			e.rxFrames++
			e.rxBytes += uint64(len(frame))
			return true
		}
	}
	e.inputOwn(frame, now, false, false)
	return true
}

// inputOwn is input for a frame whose queue pair is this engine's, or
// none's; handed says another engine received it (handoff.go): it was
// counted there, and goes to no other engine. checked says the link
// verified the frame's ICRC (link.ICRCChecker): it is not computed again.
func (e *engine) inputOwn(frame []byte, now int64, handed, checked bool) {
	if !handed {
		e.rxFrames++
		e.rxBytes += uint64(len(frame))
	}
	if e.d.shared != nil && place.Is(frame) {
		e.placeInput(frame, now) // place.go
		return
	}
	p := &e.pkt
	flags := wire.InPlace
	if e.d.oooQPs.Load() > 0 {
		flags |= wire.AcceptOOO
	}
	if e.d.srQPs.Load() > 0 {
		flags |= wire.AcceptSR
	}
	if checked {
		flags |= wire.ICRCChecked
	}
	if err := p.DecodeWith(frame, flags); err != nil {
		switch {
		case errors.Is(err, wire.ErrBadICRC):
			e.dropBadICRC++
			return
		case errors.Is(err, wire.ErrNotRoCE):
			e.dropNotRoCE++
			return
		default:
			e.dropMalformed++
			return
		}
	}
	q := e.d.lookup(p.BTH.DestQPN)
	if q == nil || q.dead.Load() || q.eng.Load() != e {
		if p.BTH.DestQPN == MulticastQPN { // never a queue pair's (mcast.go)
			e.multicast(frame, p, now, handed)
			return
		}
		// Another engine's only for a handed frame whose queue pair
		// changed engines since (moved when it connected, or destroyed
		// and made again): not handed twice.
		e.dropUnknownQPN++
		return
	}
	// Only a device with OOO queue pairs decodes OOO opcodes (their
	// transport bits are 110); the opcode's high bits say it without
	// copying its table entry.
	if flags&wire.AcceptOOO != 0 && p.BTH.Opcode>>5 == 6 && q.q.Type() != qp.OOO {
		e.dropMalformed++ // as on a device without OOO queue pairs: an unknown opcode
		return
	}
	// Likewise the SR opcodes (111) reach only queue pairs connected with
	// selective repeat (docs/sr-wire.md).
	if flags&wire.AcceptSR != 0 && p.BTH.Opcode>>5 == 7 && !q.sr.Load() {
		e.dropMalformed++
		return
	}
	// deliver's body, kept inline on the unicast path (one call less per frame).
	e.delivered++
	e.schedule(q)
	q.q.Receive(p, now, &e.tx)
	if !q.commEst || q.q.Resets() != q.resets {
		e.qpEvents(q, true)
	}
}

// deliver hands p to the queue pair q (multicast; input does the same
// inline).
func (e *engine) deliver(q *qpEntry, p *wire.Packet, now int64) {
	e.delivered++
	e.schedule(q)
	q.q.Receive(p, now, &e.tx)
	if !q.commEst || q.q.Resets() != q.resets {
		e.qpEvents(q, true)
	}
}

// publish adds this round's counters to the device's.
func (e *engine) publish() {
	s := &e.d.st
	s.rounds.Add(1)
	e.rounds.Add(1)
	if e.handoffs|e.handDrops|e.handStalls != 0 {
		s.handoffs.Add(e.handoffs)
		s.handDrops.Add(e.handDrops)
		s.handStalls.Add(e.handStalls)
		e.handoffs, e.handDrops, e.handStalls = 0, 0, 0
	}
	if e.naps != 0 {
		s.naps.Add(e.naps)
		e.naps = 0
	}
	if e.rxFrames != 0 {
		s.rxFrames.Add(e.rxFrames)
		s.rxBytes.Add(e.rxBytes)
		s.delivered.Add(e.delivered)
		e.rxFrames, e.rxBytes, e.delivered = 0, 0, 0
	}
	if e.tx.frames != 0 {
		s.txFrames.Add(e.tx.frames)
		s.txBytes.Add(e.tx.bytes)
		e.tx.frames, e.tx.bytes = 0, 0
	}
	if e.tx.sent|e.tx.lost != 0 {
		s.txSent.Add(e.tx.sent)
		s.txLost.Add(e.tx.lost)
		e.tx.sent, e.tx.lost = 0, 0
	}
	if e.dropBadICRC|e.dropMalformed|e.dropNotRoCE|e.dropUnknownQPN|e.rxErrors|e.tx.noBuf|e.tx.sendErrs != 0 {
		s.dropBadICRC.Add(e.dropBadICRC)
		s.dropMalformed.Add(e.dropMalformed)
		s.dropNotRoCE.Add(e.dropNotRoCE)
		s.dropUnknownQPN.Add(e.dropUnknownQPN)
		s.rxErrors.Add(e.rxErrors)
		s.txNoBuffer.Add(e.tx.noBuf)
		s.txErrors.Add(e.tx.sendErrs)
		e.dropBadICRC, e.dropMalformed, e.dropNotRoCE, e.dropUnknownQPN = 0, 0, 0, 0
		e.rxErrors, e.tx.noBuf, e.tx.sendErrs = 0, 0, 0
	}
}

// txq implements qp.Output over a link: buffers come from link.Alloc in
// batches, committed frames go out with link.Send in batches.
type txq struct {
	l       link.Link
	poolBuf [][]byte // backing array of pool
	pool    [][]byte // allocated, not handed out
	lent    [][]byte // handed out by TxBuffer, not yet committed
	out     [][]byte // committed, not yet sent
	starved bool

	frames, bytes, noBuf, sendErrs uint64
	sent, lost                     uint64 // frames in Send calls that succeeded, that failed
}

func (t *txq) init(l link.Link, batch int) {
	t.l = l
	t.poolBuf = make([][]byte, batch)
	t.pool = t.poolBuf[:0]
	t.lent = make([][]byte, 0, 8)
	t.out = make([][]byte, 0, batch)
}

// TxBuffer implements qp.Output.
func (t *txq) TxBuffer() []byte {
	if len(t.pool) == 0 {
		n := t.l.Alloc(t.poolBuf)
		if n == 0 && len(t.out) > 0 {
			t.flush()
			n = t.l.Alloc(t.poolBuf)
		}
		if n == 0 {
			t.noBuf++
			t.starved = true
			return nil
		}
		t.pool = t.poolBuf[:n]
	}
	b := t.pool[len(t.pool)-1]
	t.pool[len(t.pool)-1] = nil
	t.pool = t.pool[:len(t.pool)-1]
	t.lent = append(t.lent, b)
	return b
}

// TxCommit implements qp.Output.
func (t *txq) TxCommit(frame []byte) {
	if len(frame) == 0 {
		return
	}
	for i, b := range t.lent {
		if &b[0] == &frame[0] {
			last := len(t.lent) - 1
			t.lent[i] = t.lent[last]
			t.lent[last] = nil
			t.lent = t.lent[:last]
			break
		}
	}
	t.out = append(t.out, frame)
	t.frames++
	t.bytes += uint64(len(frame))
	if len(t.out) == cap(t.out) {
		t.flush()
	}
}

func (t *txq) flush() {
	if len(t.out) == 0 {
		return
	}
	if err := t.l.Send(t.out); err != nil {
		t.sendErrs++
		t.lost += uint64(len(t.out))
	} else {
		t.sent += uint64(len(t.out))
	}
	clear(t.out)
	t.out = t.out[:0]
}

// endRound sends what was committed and hands buffers given out but never
// committed back to the link.
func (t *txq) endRound() {
	t.flush()
	if len(t.lent) > 0 {
		t.l.Free(t.lent)
		clear(t.lent)
		t.lent = t.lent[:0]
	}
}

// release returns every buffer the engine holds to the link.
func (t *txq) release() {
	t.endRound()
	if len(t.pool) > 0 {
		t.l.Free(t.pool)
		clear(t.pool)
		t.pool = t.pool[:0]
	}
}

// timer is one element of the engine's timer heap.
type timer struct {
	at int64
	e  *qpEntry
}

// timerHeap is a binary min-heap on at.
type timerHeap []timer

func (h *timerHeap) push(t timer) {
	*h = append(*h, t)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].at <= s[i].at {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

// compact drops the elements of queue pairs removed, moved to another
// engine or superseded by an earlier element, then restores the heap order.
func (h *timerHeap) compact(e *engine) {
	s := *h
	n := 0
	for _, t := range s {
		if q := t.e; !q.dead.Load() && q.eng.Load() == e && q.heapAt == t.at {
			s[n] = t
			n++
		}
	}
	clear(s[n:])
	s = s[:n]
	for i := n/2 - 1; i >= 0; i-- {
		s.down(i)
	}
	*h = s
}

// down moves element i down to its place.
func (h timerHeap) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].at < h[l].at {
			m = r
		}
		if h[i].at <= h[m].at {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

func (h *timerHeap) pop() timer {
	s := *h
	t := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = timer{}
	s = s[:last]
	s.down(0)
	*h = s
	return t
}
