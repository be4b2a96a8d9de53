package qp

import "fmt"

// dump describes the engine state of q for test failures.
func (q *QP) dump() string {
	r, c, s := &q.req, &q.comp, &q.resp
	out := fmt.Sprintf("QP %#x %v: sq posted %d done %d | req idx %d off %d psn %#x max %#x rdAtomic %d rnrUntil %d | "+
		"comp head %d ackPSN %#x deadline %d retries %d cwnd %d fast %d/%d srtt %d gap %v/%#x nak %v/%#x | "+
		"resp epsn %#x msn %d nakSent %v seq %d rq %d/%d txN %d ack %+v",
		q.qpn, q.e.state, q.sqPosted.Load(), q.sqDone.Load(), r.idx, r.off, r.psn, r.maxPSN, r.rdAtomic, r.rnrUntil,
		c.head, c.ackPSN, c.deadline, c.retries, c.cwnd, c.fastDeadline, c.fastTries, c.srtt, c.gapSet, c.gapPSN, c.nakSet, c.nakPSN,
		s.epsn, s.msn, s.nakSent, s.seq, s.rqHead, q.rqPosted.Load(), s.txN, s.ack)
	for i := c.head; i != q.sqPosted.Load(); i++ {
		w := &q.sq[i&q.sqMask]
		out += fmt.Sprintf("\n  wqe %d %v started %v done %v psn %#x..%#x read %#x len %d", i, w.opcode, w.started, w.done, w.firstPSN, w.lastPSN, w.readPSN, w.length)
	}
	return out
}
