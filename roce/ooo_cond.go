package roce

import (
	"github.com/xdproce/xdproce/roce/qp"
	"github.com/xdproce/xdproce/roce/wire"
)

// Conditional operations of OOO queue pairs (docs/ooo.md, "Conditional
// operations"): components (Notify ToSelf|NotifyInitiator, CondQueue) count
// their delivered completions on a conditional queue of their queue pair;
// a conditional request (CondQueue, Cond) goes to the wire when its
// condition holds, or flushes with WCWRFlushErr when the queue failed.
type (
	// Cond is the condition of a conditional request (SendWR.Cond).
	Cond = qp.Cond
	// CondOp is a condition's predicate: CondGE or CondEQ.
	CondOp = qp.CondOp
	// CondCounter addresses one conditional queue (QP.CondCounter): Get,
	// Set, Clear, Fail.
	CondCounter = qp.CondCounter
	// CondState is a conditional queue's counter and failure.
	CondState = qp.CondState
)

// Predicates, the to-self notify bit and the number of conditional queues.
const (
	CondGE        = qp.CondGE
	CondEQ        = qp.CondEQ
	NotifyToSelf  = wire.NotifyToSelf
	MaxCondQueues = qp.MaxCondQueues
)

// CondCounter returns conditional queue id (1..MaxCondQueues) of this OOO
// queue pair. The queues belong to the queue pair, not the device: a
// conditional request waits in this queue pair's send queue for
// completions that arrive on this queue pair.
func (q *QP) CondCounter(id uint8) CondCounter { return q.q.CondCounter(id) }
