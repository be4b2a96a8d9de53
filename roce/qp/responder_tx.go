package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// The responder's transmit half: READ responses and atomic ACKs from the
// ring's FIFO (responder_replay.go), then the coalesced ACK or NAK the
// pipeline queued (queueAck), all sent from Progress.

type pendingAck struct {
	want     bool
	syndrome uint8
	psn      uint32
	msn      uint32
}

// respProgress transmits queued READ responses and atomic ACKs, then the
// pending ACK/NAK. It reports false when it ran out of transmit buffers or
// budget.
func (q *QP) respProgress(out Output) bool {
	r := &q.resp
	budget := reqBudget
	for r.txN > 0 {
		i := int(r.txq[r.txHead])
		x := &r.res[i]
		if x.kind == resAtomic {
			if !q.sendAtomicAck(out, x) {
				return false
			}
		} else {
			for { // at least one packet: a zero-length READ gets one empty response
				if budget == 0 {
					return false
				}
				ok, fail := q.sendReadResponse(out, x)
				if fail {
					return true
				}
				if !ok {
					return false
				}
				budget--
				if x.txOff >= x.length {
					break
				}
			}
		}
		x.queued, x.sent = false, true
		r.txHead = (r.txHead + 1) % resSlots
		r.txN--
	}
	if r.tooMany {
		q.stats.inc(CtrErrNAKsSent)
		q.queueAck(wire.NAKInvalidRequest, r.tooManyPSN)
		q.e.finalNAK = true
		q.fail()
		if q.sendAck(out) {
			q.e.finalNAK = false
		}
		return true
	}
	if r.ack.want {
		return q.sendAck(out)
	}
	return true
}

// sendAck transmits the pending ACK/NAK; false when no buffer is free.
func (q *QP) sendAck(out Output) bool {
	r := &q.resp
	buf := out.TxBuffer()
	if buf == nil {
		return false
	}
	p := &q.e.pkt
	*p = q.e.hdr
	p.BTH.Opcode = wire.RCAck
	p.BTH.PSN = r.ack.psn
	p.AETH = wire.AETH{Syndrome: r.ack.syndrome, MSN: r.ack.msn}
	n := 0
	if r.sr.n > 0 && r.ack.syndrome>>5 == 0 {
		n = q.srSack(buf) // requests are held past a hole: the ACK is a SACK
	}
	q.emit(out, buf, n)
	r.ack.want = false
	return true
}

func (q *QP) sendAtomicAck(out Output, x *resource) bool {
	buf := out.TxBuffer()
	if buf == nil {
		return false
	}
	p := &q.e.pkt
	*p = q.e.hdr
	p.BTH.Opcode = wire.RCAtomicAck
	p.BTH.PSN = x.firstPSN
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), MSN: x.msn}
	p.AtomicAck.Orig = x.orig
	q.emit(out, buf, 0)
	return true
}

var readRespOps = [5]wire.Opcode{0, wire.RCReadResponseOnly, wire.RCReadResponseFirst,
	wire.RCReadResponseMiddle, wire.RCReadResponseLast}

// sendReadResponse transmits the next READ response packet of x. ok is false
// when no buffer is free; fail is true when the memory is gone (the QP is
// then in Error).
func (q *QP) sendReadResponse(out Output, x *resource) (ok, fail bool) {
	buf := out.TxBuffer()
	if buf == nil {
		return false, false
	}
	pmtu := uint64(q.e.pmtu)
	rest := x.length - x.txOff
	pos := wire.PosOnly
	switch {
	case x.txOff == 0 && rest <= pmtu:
	case x.txOff == 0:
		pos = wire.PosFirst
	case rest <= pmtu:
		pos = wire.PosLast
	default:
		pos = wire.PosMiddle
	}
	n := min(rest, pmtu)
	p := &q.e.pkt
	*p = q.e.hdr
	p.BTH.Opcode = readRespOps[pos]
	p.BTH.PSN = x.txPSN
	p.AETH = wire.AETH{Syndrome: wire.ACKSyndrome(wire.UnlimitedCredits), MSN: x.msn}
	hl := p.HeaderLen()
	if n > 0 {
		m, err := q.tbl.RemoteCached(&q.rkeyCache, q.pd, q, x.rkey, x.va+x.txOff, n, mr.RemoteRead)
		if err != nil || hl+int(n)+7 > len(buf) {
			// Deregistered while being read: remote access error (class C).
			q.stats.inc(CtrErrNAKsSent)
			q.queueAck(wire.NAKRemoteAccess, x.txPSN)
			q.e.finalNAK = true
			q.fail()
			return false, true
		}
		copy(buf[hl:], m)
	}
	q.emit(out, buf, int(n))
	x.txOff += n
	x.txPSN = wire.PSNAdd(x.txPSN, 1)
	return true, false
}
