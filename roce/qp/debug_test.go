package qp

import "fmt"

// dump describes the engine state of q for test failures.
func (q *QP) dump() string {
	r, c, s, w := &q.req, &q.comp, &q.resp, &q.win
	out := fmt.Sprintf("QP %#x %v: sq posted %d done %d | req idx %d off %d psn %#x rdAtomic %d | "+
		"comp head %d retries %d gap %v/%#x nak %v/%#x | "+
		"win una %#x max %#x deadline %d cwnd %d fast %d/%d srtt %d rnrUntil %d | "+
		"resp epsn %#x msn %d nakSent %v seq %d rq %d/%d txN %d ack %+v",
		q.qpn, q.e.state, q.sqPosted.Load(), q.sqDone.Load(), r.idx, r.off, r.psn, r.rdAtomic,
		c.head, c.retries, c.gapSet, c.gapPSN, c.nakSet, c.nakPSN,
		w.una, w.max, w.deadline, w.cwnd, w.fastDeadline, w.fastTries, w.srtt, w.rnrUntil,
		s.epsn, s.msn, s.nakSent, s.seq, s.rqHead, q.rqPosted.Load(), s.txN, s.ack)
	for i := c.head; i != q.sqPosted.Load(); i++ {
		w := q.sendAt(i)
		out += fmt.Sprintf("\n  wqe %d %v started %v done %v psn %#x..%#x read %#x len %d", i, w.opcode, w.started, w.done, w.firstPSN, w.lastPSN, w.readPSN, w.length)
	}
	return out
}
