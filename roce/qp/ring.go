package qp

import "github.com/xdproce/xdproce/roce/mr"

// Work queue rings that grow on demand. A queue pair's send and receive
// rings start with initialRing slots and double, up to the ring size
// MaxSendWR/MaxRecvWR rounds up to, when a post finds them full: a queue
// pair that never has more than a few requests outstanding never pays for
// MaxSendWR of them.
//
// The poster (under QP.mu) grows a ring while the engine reads it without
// a lock, so a ring never moves a WQE: the slots hold pointers, a grown ring
// is a new slot array published atomically (QP.sq, QP.rq), and every index
// the engine may still look at (from sqDone/rqDone on) names the same WQE
// in the old ring and the new one. The engine loads the ring after the
// posted index it read (sqPosted, rqPosted), so the ring it gets covers
// every index below it. A slot array is never written once published.

// initialRing is the number of slots a ring starts with.
const initialRing = 2

// A wqeRing is a ring of 2^k WQE pointers, indexed by free-running indices.
type wqeRing[T any] struct {
	mask  uint32
	slots []*T
}

// at returns the WQE of index i.
func (r *wqeRing[T]) at(i uint32) *T { return r.slots[i&r.mask] }

// size is the number of slots.
func (r *wqeRing[T]) size() uint32 { return r.mask + 1 }

// newRing returns a ring of the WQEs in fresh (len a power of 2).
func newRing[T any](fresh []T) *wqeRing[T] {
	r := &wqeRing[T]{mask: uint32(len(fresh) - 1), slots: make([]*T, len(fresh))}
	for i := range fresh {
		r.slots[i] = &fresh[i]
	}
	return r
}

// grown returns a ring twice r's size: the indices from..from+size-1 keep
// their WQEs (those from the oldest one the engine may use on, so every
// outstanding WQE stays where the engine finds it), and the next size
// indices get the WQEs of fresh (len(fresh) == size).
func (r *wqeRing[T]) grown(from uint32, fresh []T) *wqeRing[T] {
	n := r.size()
	g := &wqeRing[T]{mask: 2*n - 1, slots: make([]*T, 2*n)}
	for i := from; i != from+n; i++ {
		g.slots[i&g.mask] = r.at(i)
	}
	for k := range fresh {
		g.slots[(from+n+uint32(k))&g.mask] = &fresh[k]
	}
	return g
}

// firstRing is the size a ring of up to max slots starts with.
func firstRing(max int) int { return min(initialRing, ringSize(max)) }

// newSendWQEs returns n send WQEs with their SGE, inline, (UD) address
// vector and (OOO) OOO operation buffers.
func (q *QP) newSendWQEs(n int) []sendWQE {
	ws := make([]sendWQE, n)
	sges := make([]mr.SGE, n*q.maxSGE)
	var inline []byte
	if q.maxInline > 0 {
		inline = make([]byte, n*q.maxInline)
	}
	var avs []AddressVector
	if q.typ == UD {
		avs = make([]AddressVector, n)
	}
	var oos []oooWR
	if q.typ == OOO {
		oos = make([]oooWR, n)
	}
	for i := range ws {
		w := &ws[i]
		if avs != nil {
			w.av = &avs[i]
		}
		if oos != nil {
			w.ooo = &oos[i]
		}
		w.sglBuf = sges[i*q.maxSGE : (i+1)*q.maxSGE : (i+1)*q.maxSGE]
		if inline != nil {
			w.inlineBuf = inline[i*q.maxInline : (i+1)*q.maxInline : (i+1)*q.maxInline]
		}
	}
	return ws
}

// newRecvWQEs returns n receive WQEs; PostRecv gives a slot its SGE buffer
// when it first posts a non-empty SGL into it.
func (q *QP) newRecvWQEs(n int) []recvWQE { return make([]recvWQE, n) }

// sendSlot returns the send WQE the next post fills (q.mu held, a send WQE
// free under MaxSendWR), growing the ring when every slot is in use.
func (q *QP) sendSlot() *sendWQE {
	r, done := q.sq.Load(), q.sqDone.Load()
	if q.sqPost-done >= r.size() {
		r = r.grown(done, q.newSendWQEs(int(r.size())))
		q.sq.Store(r)
	}
	return r.at(q.sqPost)
}

// recvSlot is sendSlot for the receive ring.
func (q *QP) recvSlot() *recvWQE {
	r, done := q.rq.Load(), q.rqDone.Load()
	if q.rqPost-done >= r.size() {
		r = r.grown(done, q.newRecvWQEs(int(r.size())))
		q.rq.Store(r)
	}
	return r.at(q.rqPost)
}

// sendAt returns the send WQE of index i; the engine calls it for an index
// below a sqPosted it loaded before.
func (q *QP) sendAt(i uint32) *sendWQE { return q.sq.Load().at(i) }

// recvAt is sendAt for the receive ring (i below a loaded rqPosted).
func (q *QP) recvAt(i uint32) *recvWQE { return q.rq.Load().at(i) }
