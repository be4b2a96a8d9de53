package daemon

import (
	"sync"

	"github.com/xdproce/xdproce/link"
)

// Frames from clients to the wire. A client's goroutine copies each frame
// from its port straight into a transmit buffer of the uplink (the AF_XDP
// UMEM: one copy) and sends the buffers it filled at the end of its batch
// (one Send, one kick a batch), without waking the uplink goroutine. Only
// when the uplink has no free transmit buffer does a frame go to the
// egress queue, which the uplink goroutine drains: a client then waits for
// room there, never for the uplink's buffers. While the queue holds frames
// no client sends directly, and a client sends the buffers it filled
// before it queues a frame, so each client's frames leave in order.

// wireTx is a client's transmit buffers of its current batch: [0, n)
// filled, [n, m) allocated and still empty. Used by the client's
// goroutine only.
type wireTx struct {
	bufs [rxBatch][]byte
	n, m int
	want int // frames left in the batch: how many buffers to allocate at most
}

// egress is the queue of frames from clients to the wire that found no
// transmit buffer, and the lock on the uplink's transmit side: Alloc,
// Send and Free of the uplink are called with mu held. Fixed slots:
// nothing is allocated per frame.
type egress struct {
	mu     sync.Mutex
	room   sync.Cond
	slots  [][]byte
	lens   []int
	head   int
	count  int
	closed bool
}

func (q *egress) init(maxFrame, n int) {
	q.room.L = &q.mu
	q.slots = make([][]byte, n)
	q.lens = make([]int, n)
	for i := range q.slots {
		q.slots[i] = make([]byte, maxFrame)
	}
}

// put copies frame, its first len(hdr) bytes replaced by hdr, into one of
// t's transmit buffers of l, allocating buffers when t has none left. It
// reports false when it could not (the queue holds frames, or l has no
// free buffer): the frame is not taken, and the frames t holds have been
// sent, so that the caller may queue the frame behind them.
func (q *egress) put(t *wireTx, l link.Link, frame, hdr []byte, st *counters) bool {
	if t.n == t.m && !q.alloc(t, l, st) {
		return false
	}
	b := t.bufs[t.n]
	if len(frame) > len(b) {
		return true // longer than the link's frames: dropped
	}
	b = b[:copy(b, frame)]
	copy(b, hdr)
	t.bufs[t.n] = b
	t.n++
	if t.want > 1 {
		t.want--
	}
	return true
}

// alloc gives t more transmit buffers (all of t's are filled); false when
// the queue holds frames or l has none free, after sending t's frames.
func (q *egress) alloc(t *wireTx, l link.Link, st *counters) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.m == len(t.bufs) {
		q.sendLocked(t, l, st)
	}
	if q.count == 0 && !q.closed {
		k := l.Alloc(t.bufs[t.m : t.m+min(max(t.want, 1), len(t.bufs)-t.m)])
		t.m += k
		if k > 0 {
			return true
		}
	}
	q.sendLocked(t, l, st)
	return false
}

// sendLocked sends t's filled buffers and frees its empty ones; q.mu held.
func (q *egress) sendLocked(t *wireTx, l link.Link, st *counters) {
	if t.n > 0 {
		if err := l.Send(t.bufs[:t.n]); err != nil {
			st.wireErrors.Add(1)
		}
		st.wireTx.Add(uint64(t.n))
	}
	if t.m > t.n {
		l.Free(t.bufs[t.n:t.m])
	}
	clear(t.bufs[:t.m])
	t.n, t.m = 0, 0
}

// txRefuser is a link that can say the kernel left frames in its transmit
// ring (xsk: copy mode, the driver busy).
type txRefuser interface{ TxRefused() bool }

// flush sends the frames t holds (the end of a client's batch). If the
// kernel refused some, the uplink is woken: its Wait kicks them again
// within xsk.TxRetryWait.
func (q *egress) flush(t *wireTx, l link.Link, st *counters) {
	t.want = 0
	if t.m == 0 {
		return
	}
	q.mu.Lock()
	q.sendLocked(t, l, st)
	q.mu.Unlock()
	if r, ok := l.(txRefuser); ok && r.TxRefused() {
		l.Wake()
	}
}

// push queues frame, its first len(hdr) bytes replaced by hdr, waiting for
// room while the queue is full (it then reports true), and wakes the
// uplink when the queue was empty (otherwise it is awake or about to
// drain).
func (q *egress) push(frame, hdr []byte, l link.Link) (waited bool) {
	q.mu.Lock()
	for q.count == len(q.slots) && !q.closed {
		waited = true
		l.Wake()
		q.room.Wait()
	}
	if q.closed || len(frame) > len(q.slots[0]) {
		q.mu.Unlock()
		return waited
	}
	i := (q.head + q.count) % len(q.slots)
	copy(q.slots[i], frame)
	copy(q.slots[i], hdr)
	q.lens[i] = len(frame)
	q.count++
	wake := q.count == 1
	q.mu.Unlock()
	if wake {
		l.Wake()
	}
	return waited
}

// drain sends what is queued through l; it reports whether frames are
// left (the link had no transmit buffers for them).
func (q *egress) drain(l link.Link, bufs [][]byte, st *counters) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.count > 0 {
		k := l.Alloc(bufs[:min(q.count, len(bufs))])
		if k == 0 {
			st.wireNoBuffer.Add(1)
			return true
		}
		for j := range k {
			i := (q.head + j) % len(q.slots)
			bufs[j] = bufs[j][:copy(bufs[j], q.slots[i][:q.lens[i]])]
		}
		if err := l.Send(bufs[:k]); err != nil {
			st.wireErrors.Add(1)
		}
		st.wireTx.Add(uint64(k))
		q.head = (q.head + k) % len(q.slots)
		q.count -= k
		q.room.Broadcast()
	}
	return false
}

// tryPush queues frame unless the queue is full (the uplink goroutine's
// own frames: it cannot wait for itself to drain); it reports whether it
// did.
func (q *egress) tryPush(frame []byte, l link.Link) bool {
	q.mu.Lock()
	if q.closed || q.count == len(q.slots) || len(frame) > len(q.slots[0]) {
		q.mu.Unlock()
		return false
	}
	i := (q.head + q.count) % len(q.slots)
	q.lens[i] = copy(q.slots[i], frame)
	q.count++
	q.mu.Unlock()
	l.Wake()
	return true
}

func (q *egress) close() {
	q.mu.Lock()
	q.closed = true
	q.room.Broadcast()
	q.mu.Unlock()
}
