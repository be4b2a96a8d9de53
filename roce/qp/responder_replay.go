package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// The responder's READ/atomic ring: the last max_dest_rd_atomic READ and
// atomic requests, kept to replay duplicates (IBA 9.7), and the FIFO of
// those whose responses wait to be sent (responder_tx.go sends them).

const resSlots = MaxRdAtomicLimit // READ/atomic resources: max_dest_rd_atomic of them are used

type resKind uint8

const (
	resNone resKind = iota
	resRead
	resAtomic
)

// A resource is a READ or atomic request the responder answered: kept for
// replaying duplicates (IBA 9.7: READ responses are regenerated,
// atomic results replayed, never re-executed) and as the transmit state of
// its responses.
type resource struct {
	kind              resKind
	firstPSN, lastPSN uint32
	msn               uint32
	orig              uint64 // atomic: the value before the operation
	// READ response transmission (of the original or a replayed request).
	va     uint64
	rkey   uint32
	length uint64
	txPSN  uint32
	txOff  uint64
	queued bool
	sent   bool // the response went out whole at least once
}

func (r *responder) clearTx() {
	for i := range r.res {
		r.res[i].queued = false
	}
	r.txHead, r.txN = 0, 0
}

// isTail reports whether resource i is the last one queued.
func (r *responder) isTail(i int) bool {
	return r.txN > 0 && int(r.txq[(r.txHead+r.txN-1)%resSlots]) == i
}

// dequeue takes resource i out of the transmit queue, wherever it is.
func (r *responder) dequeue(i int) {
	if !r.res[i].queued {
		return
	}
	r.res[i].queued = false
	k := 0
	for k < r.txN && int(r.txq[(r.txHead+k)%resSlots]) != i {
		k++
	}
	for ; k+1 < r.txN; k++ {
		r.txq[(r.txHead+k)%resSlots] = r.txq[(r.txHead+k+1)%resSlots]
	}
	r.txN--
}

func (r *responder) enqueue(i int) {
	if r.res[i].queued {
		return
	}
	r.res[i].queued = true
	r.txq[(r.txHead+r.txN)%resSlots] = uint8(i)
	r.txN++
}

// newResource takes the ring's next slot (respCheckResource found it free).
func (r *responder) newResource(n int, kind resKind, first, last uint32) int {
	i := r.resNext
	r.resNext = (r.resNext + 1) % n
	r.res[i] = resource{kind: kind, firstPSN: first, lastPSN: last, msn: r.msn}
	return i
}

// respDuplicate answers a request already executed (IBA 9.7): SEND and
// WRITE are acknowledged again, READ responses regenerated from memory,
// atomic results replayed from the resource cache, never re-executed.
func (q *QP) respDuplicate(k *respPkt) (respState, respAction) {
	r := &q.resp
	p := k.p
	q.stats.inc(CtrDuplicates)
	switch k.info.Kind {
	case wire.KindSend, wire.KindWrite:
		if p.BTH.AckReq {
			k.syndrome, k.nakPSN = wire.ACKSyndrome(wire.UnlimitedCredits), wire.PSNAdd(r.epsn, wire.PSNMask)
			return respDone, respActNAK
		}
		return respDone, respActNone
	case wire.KindReadRequest:
		for i := range r.res {
			x := &r.res[i]
			if x.kind != resRead || !wire.PSNInWindow(p.BTH.PSN, x.firstPSN, uint32(wire.PSNDiff(x.lastPSN, x.firstPSN))+1) {
				continue
			}
			n := npkts(uint64(p.RETH.DMALen), q.e.pmtu)
			if wire.PSNBefore(x.lastPSN, wire.PSNAdd(p.BTH.PSN, n-1)) {
				return respDrop, respActNone // asks for more than the original
			}
			if p.RETH.DMALen > 0 {
				if _, err := q.tbl.Remote(q.pd, q, p.RETH.RKey, p.RETH.VA, uint64(p.RETH.DMALen), mr.RemoteRead); err != nil {
					return respDrop, respActNone
				}
			}
			q.stats.inc(CtrReplays)
			if x.queued && r.isTail(i) && !wire.PSNBefore(p.BTH.PSN, x.txPSN) {
				return respDone, respActNone // the answer under way covers it
			}
			r.dequeue(i) // answered in arrival order: after everything queued
			x.va, x.rkey, x.length, x.txPSN, x.txOff = p.RETH.VA, p.RETH.RKey, uint64(p.RETH.DMALen), p.BTH.PSN, 0
			r.enqueue(i)
			return respDone, respActNone
		}
	case wire.KindCompareSwap, wire.KindFetchAdd:
		for i := range r.res {
			x := &r.res[i]
			if x.kind == resAtomic && x.firstPSN == p.BTH.PSN {
				q.stats.inc(CtrReplays)
				if !r.isTail(i) {
					r.dequeue(i) // answered in arrival order, as READs
					r.enqueue(i)
				}
				return respDone, respActNone
			}
		}
	}
	return respDrop, respActNone
}
