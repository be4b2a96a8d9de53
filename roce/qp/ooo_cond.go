package qp

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/wire"
)

// Conditional operations of an OOO queue pair (docs/ooo.md, "Conditional
// operations"; seed 002's conditional RDMA). Local only: nothing new goes
// on the wire but the notify's to-self bit, which the peer echoes and
// otherwise ignores.
//
// A queue pair has MaxCondQueues conditional queues, ids 1..MaxCondQueues.
// A component is an OOO operation posted with Notify ToSelf (and
// NotifyInitiator) and CondQueue q: its delivered completion adds 1 to
// queue q's counter. A conditional request is an OOO operation posted with
// CondQueue q and a Cond: it keeps its place in the send queue and goes to
// the wire when it reaches the head and its condition holds (work requests
// posted after it wait behind it). A failed component, or Fail, poisons the
// queue: its conditional requests complete with WCWRFlushErr, unsent.

// MaxCondQueues is the number of conditional queues of an OOO queue pair.
const MaxCondQueues = 16

// CondOp is the predicate of a condition.
type CondOp uint8

// Condition predicates (the zero value: no condition).
const (
	CondGE CondOp = iota + 1 // the counter is at least Value
	CondEQ                   // the counter is exactly Value
)

var condOpNames = [...]string{"CondOp(0)", "ge", "eq"}

func (o CondOp) String() string { return enumName(condOpNames[:], int(o), "CondOp") }

// A Cond is the condition of a conditional request: Op applied to the
// counter of the request's CondQueue and Value.
type Cond struct {
	Op    CondOp
	Value uint32
}

func (c Cond) holds(n uint32) bool {
	if c.Op == CondEQ {
		return n == c.Value
	}
	return n >= c.Value
}

// condQueue is one conditional queue: the counter and the poison flag.
// The progress goroutine adds to the counter; the application sets,
// clears, reads and fails it through CondCounter.
type condQueue struct {
	count  atomic.Uint32
	failed atomic.Bool
}

// CondState is a conditional queue's state as CondCounter.Get reads it.
type CondState struct {
	Count  uint32 // successful delivered completions of components (since the last Clear or Set)
	Failed bool   // a component failed: the queue's conditional requests flush
}

// A CondCounter addresses one conditional queue of an OOO queue pair
// (QP.CondCounter). Its methods are safe from any goroutine.
type CondCounter struct {
	q  *QP
	id uint8
}

// CondCounter returns conditional queue id (1..MaxCondQueues) of q.
func (q *QP) CondCounter(id uint8) CondCounter { return CondCounter{q: q, id: id} }

func (c CondCounter) queue(op string) (*condQueue, error) {
	if c.q.ooo == nil {
		return nil, fmt.Errorf("qp: conditional queue %d: %s: %v queue pair", c.id, op, c.q.typ)
	}
	if c.id == 0 || c.id > MaxCondQueues {
		return nil, fmt.Errorf("qp: conditional queue %d: %s: id out of range 1..%d", c.id, op, MaxCondQueues)
	}
	return &c.q.ooo.cond[c.id-1], nil
}

// Get returns the queue's counter and whether it failed.
func (c CondCounter) Get() (CondState, error) {
	k, err := c.queue("get")
	if err != nil {
		return CondState{}, err
	}
	return CondState{Count: k.count.Load(), Failed: k.failed.Load()}, nil
}

// Set sets the counter to n (the failure, if any, stays) and lets the
// engine check the conditional request waiting at the send queue's head.
func (c CondCounter) Set(n uint32) error {
	return c.update("set", func(k *condQueue) { k.count.Store(n) })
}

// Clear sets the counter to 0 and forgets a failure: the queue starts a
// new round.
func (c CondCounter) Clear() error {
	return c.update("clear", func(k *condQueue) { k.count.Store(0); k.failed.Store(false) })
}

// Fail poisons the queue, as a failed component does: the upper layer's
// way to say that a component will not complete (its timeout ran out, the
// target reported a protection error). The queue's conditional requests
// flush with WCWRFlushErr until Clear.
func (c CondCounter) Fail() error {
	return c.update("fail", func(k *condQueue) { k.failed.Store(true) })
}

// update applies f to the queue and rings the doorbell, so that Progress
// looks at the send queue's head again.
func (c CondCounter) update(op string, f func(*condQueue)) error {
	k, err := c.queue(op)
	if err != nil {
		return err
	}
	f(k)
	c.q.ring()
	return nil
}

// checkCond checks the conditional fields of an OOO work request at post.
func checkCond(wr *SendWR) error {
	toSelf := wr.Notify.ToSelf()
	switch {
	case wr.CondQueue > MaxCondQueues:
		return fmt.Errorf("qp: post send: conditional queue %d out of range 1..%d", wr.CondQueue, MaxCondQueues)
	case wr.Cond.Op > CondEQ:
		return fmt.Errorf("qp: post send: %v", wr.Cond.Op)
	case wr.CondQueue == 0 && (toSelf || wr.Cond.Op != 0):
		return errors.New("qp: post send: notify to self or a condition needs a conditional queue (CondQueue)")
	case wr.CondQueue != 0 && !toSelf && wr.Cond.Op == 0:
		return fmt.Errorf("qp: post send: conditional queue %d without notify to self (a component) or a condition", wr.CondQueue)
	case toSelf && wr.Cond.Op != 0:
		return errors.New("qp: post send: a request is a component (notify to self) or conditional, not both")
	case toSelf && wr.Notify&wire.NotifyInitiator == 0:
		return fmt.Errorf("qp: post send: notify %v: to self counts the delivered completion, which needs the initiator bit", wr.Notify)
	}
	return nil
}

// condComponentDone counts a component's delivered completion on its
// queue (progress goroutine) and releases the conditional request at the
// send queue's head when its condition now holds: == N is checked at every
// count, not only when Progress runs next.
func (q *QP) condComponentDone(s *ctxState) {
	if !s.notify.ToSelf() || s.condQ == 0 {
		return
	}
	n := q.ooo.cond[s.condQ-1].count.Add(1)
	head := q.comp.head
	if head == q.sqPosted.Load() {
		return
	}
	if w := q.sendAt(head); !w.started && w.ooo.condQ == s.condQ && w.ooo.cond.Op != 0 && w.ooo.cond.holds(n) {
		w.ooo.met = true
	}
}

// condComponentFailed poisons the queue of a component that failed (an
// error completion at post or start).
func (q *QP) condComponentFailed(w *sendWQE) {
	if o := w.ooo; o.notify.ToSelf() && o.condQ != 0 {
		q.ooo.cond[o.condQ-1].failed.Store(true)
	}
}

// condGate decides the fate of the conditional request w at the send
// queue's head before its first packet: go (its condition holds, now or at
// a count since), wait, or flush (its queue failed).
func (q *QP) condGate(w *sendWQE) (wait bool, st WCStatus) {
	o := w.ooo
	k := &q.ooo.cond[o.condQ-1]
	if k.failed.Load() {
		return false, WCWRFlushErr
	}
	if o.met || o.cond.holds(k.count.Load()) {
		return false, WCSuccess
	}
	return true, WCSuccess
}
