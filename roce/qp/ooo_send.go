package qp

import (
	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/wire"
)

// oooBudget is how many packets an OOO queue pair sends per Progress: the
// device runs every queue pair with work once per round, so READ responses
// and WRITEs of several queue pairs interleave every oooBudget packets.
const oooBudget = 16

// oooWorkSlots is the size of an OOO queue pair's work queue (READ
// responses to stream, completions waiting for a transmit buffer).
const oooWorkSlots = 256

// oooEngine is an OOO queue pair's engine state beside the rings and CQs it
// shares with the other types. Progress goroutine only, but for pool.
type oooEngine struct {
	pool *ContextPool
	pkt  uint32 // the next packet of the work request at the send queue's head
	// The work queue, a ring: READ responses stream from it round robin,
	// oooBudget packets at a time.
	work        [oooWorkSlots]oooWork
	wHead, wLen uint32
	srcCache    mr.Cache // the READ sources' region
	cond        [MaxCondQueues]condQueue
	sinks       sinks      // third-party sinks admitted (AdmitSink)
	groups      groupTable // this side's group contexts (ooo_group.go)
}

// oooWork is one entry of the work queue.
type oooWork struct {
	cpl             bool     // a completion packet to send (else: the READ response of context from)
	from            wire.Ctx // this side's context
	dest            wire.Ctx // completion: the peer's context
	tid, total, tag uint32
	notify          wire.Notify
}

// oooWR is the OOO part of a send work request.
type oooWR struct {
	ctx, remoteCtx wire.Ctx
	tid            uint32
	notify         wire.Notify
	tag            uint32
	paths          uint8
	sinkRKey       uint32
	sink           ThirdParty // WROOO3PRead: the sink
	condQ          uint8      // conditional queue (component or conditional request)
	cond           Cond       // a conditional request's condition
	met            bool       // the condition held at a count while it waited at the head
	// Half-RDMA / half-FIFO (ooo_fifo.go).
	opTotal uint32 // the operation's bytes when it is not this request's length (pieces, READ to FIFO)
	opOff   uint64 // a piece's offset in its operation
	seg     uint32 // the segment when it is not the path MTU (a reply: the requester's)
}

func (o *oooEngine) queue(w oooWork) bool {
	if o.wLen == oooWorkSlots {
		return false
	}
	o.work[(o.wHead+o.wLen)%oooWorkSlots] = w
	o.wLen++
	return true
}

func (o *oooEngine) pop() oooWork {
	w := o.work[o.wHead]
	o.wHead = (o.wHead + 1) % oooWorkSlots
	o.wLen--
	return w
}

// oooProgress sends up to oooBudget packets: completions that found no
// buffer in Receive, READ responses (each stream oooBudget packets at a
// time, then to the back of the queue), then the send queue's WRITEs and
// READ requests. It returns now when work is left, else 0: the transport
// has no timers.
func (q *QP) oooProgress(out Output) int64 {
	o := q.ooo
	budget := oooBudget
	more, blocked := false, false
	for n := o.wLen; n > 0 && budget > 0 && !more; n-- {
		w := o.pop()
		if w.cpl {
			if !q.oooEmitCompletion(&w, out) {
				o.queue(w)
				more = true
			} else {
				budget--
			}
			continue
		}
		s := o.pool.state(q.qpn, w.from)
		if s == nil || s.role != roleReadSource || s.tid != w.tid || !s.busy {
			continue // the context was released, recovered or reused since
		}
		for budget > 0 && s.busy {
			if !q.oooEmitResponse(s, w.from, out) {
				more = true
				break
			}
			budget--
		}
		if s.busy {
			o.queue(w)
		}
	}
	if q.e.state == RTS {
		for budget > 0 && !more {
			head := q.comp.head
			if head == q.sqPosted.Load() {
				break
			}
			w := q.sendAt(head)
			if !w.started && w.ooo.cond.Op != 0 {
				wait, st := q.condGate(w)
				if st != WCSuccess {
					q.oooRetire(w, st)
					continue
				}
				if wait {
					blocked = true // until a count, Set, Clear or Fail
					break
				}
			}
			if !w.started {
				if st := q.oooStart(w); st != WCSuccess {
					q.oooRetire(w, st)
					continue
				}
				w.started = true
			}
			buf := out.TxBuffer()
			if buf == nil {
				more = true
				break
			}
			budget--
			if st, last := q.oooBuild(w, buf, out); st != WCSuccess || last {
				q.oooRetire(w, st)
			}
		}
		more = more || !blocked && q.comp.head != q.sqPosted.Load()
	}
	if more || o.wLen > 0 {
		return q.e.now
	}
	return 0
}

// oooStart checks a work request's local side as its first packet is about
// to go and sets up its context: for a WRITE the one its completion comes
// to (if any), for a READ the one its response lands in.
func (q *QP) oooStart(w *sendWQE) WCStatus {
	o := w.ooo
	if w.opcode == WROOOReadReply {
		return q.fifoReplyStart(w)
	}
	var s *ctxState
	read := w.opcode == WROOORead || w.opcode == WROOOReadFromFIFO || w.opcode == WROOOReadToFIFO
	if o.ctx != 0 || read {
		if s = q.ooo.pool.state(q.qpn, o.ctx); s == nil {
			return WCLocQPOpErr // released or recovered since the post
		}
	}
	switch w.opcode {
	case WROOORead, WROOOReadFromFIFO:
		g := &w.sgl[0]
		if _, err := q.tbl.Remote(q.pd, q, o.sinkRKey, g.Addr, uint64(g.Length), mr.RemoteWrite); err != nil {
			return WCLocProtErr
		}
		s.start(roleReadSink, o.tid, uint32(w.length), q.e.pmtu)
		s.base, s.rkey = g.Addr, o.sinkRKey
	case WROOO3PRead:
		if s == nil {
			return WCSuccess
		}
		// The controller waits for the sink's completion, as a WRITE's
		// initiator for its target's.
		s.start(roleWriteInit, o.tid, o.sink.Len, q.e.pmtu)
		s.peer, s.notify, s.tag, s.wrID = o.sink.Ctx, o.notify, o.tag, w.id
		return WCSuccess
	case WROOOReadToFIFO:
		s.start(roleReadSink, o.tid, o.opTotal, q.e.pmtu)
		s.fifo = true
	default:
		if st := q.checkPiece(w); st != WCSuccess {
			return st
		}
		if w.inline == nil && !q.checkSGL(w.sgl, 0) {
			return WCLocProtErr
		}
		if s == nil {
			return WCSuccess
		}
		// The pieces of one operation share its context: only the first
		// starts it.
		if o.opTotal == 0 || s.role != roleWriteInit || s.tid != o.tid {
			s.start(roleWriteInit, o.tid, max(o.opTotal, uint32(w.length)), q.e.pmtu)
		}
	}
	s.peer, s.notify, s.tag, s.wrID, s.condQ = o.remoteCtx, o.notify, o.tag, w.id, o.condQ
	return WCSuccess
}

// oooBuild builds the next packet of w into buf and sends it; last reports
// that it was w's last.
func (q *QP) oooBuild(w *sendWQE, buf []byte, out Output) (st WCStatus, last bool) {
	o, e := w.ooo, &q.e
	p := &e.pkt
	*p = e.hdr
	idx := q.ooo.pkt
	if o.paths > 1 && e.attr.AV.SrcPort == 0 {
		p.SrcPort = spreadPort(e.hdr.SrcPort, idx%uint32(o.paths))
	}
	seg := e.pmtu
	if o.seg != 0 {
		seg = o.seg
	}
	total := uint32(w.length)
	if o.opTotal != 0 {
		total = o.opTotal
	}
	p.XRH = wire.XRH{Ctx: o.remoteCtx, TID: o.tid, Total: total, Initiator: o.ctx, Notify: o.notify,
		Seg: wire.MTUFromBytes(int(seg)), Tag: o.tag}
	switch w.opcode {
	case WROOORead:
		p.BTH.Opcode = wire.OOOReadReq
		p.RETH = wire.RETH{VA: w.remoteAddr, RKey: w.rkey, DMALen: total}
		p.XRR = wire.XRR{VA: w.sgl[0].Addr, RKey: o.sinkRKey}
		q.emit(out, buf, 0)
		return WCSuccess, true
	case WROOOReadToFIFO:
		p.BTH.Opcode = wire.OOOReadReqToFIFO
		p.RETH = wire.RETH{VA: w.remoteAddr, RKey: w.rkey, DMALen: total}
		q.emit(out, buf, 0)
		return WCSuccess, true
	case WROOOReadFromFIFO:
		p.BTH.Opcode = wire.OOOReadReqFromFIFO
		p.XRR = wire.XRR{VA: w.sgl[0].Addr, RKey: o.sinkRKey}
		q.emit(out, buf, 0)
		return WCSuccess, true
	case WROOO3PRead:
		q.oooBuild3P(w, buf, out)
		return WCSuccess, true
	}
	off := uint64(idx) * uint64(seg)
	n := min(w.length-off, uint64(seg))
	p.BTH.Opcode, p.BTH.PSN = wire.OOOWrite, uint32((o.opOff+off)/uint64(seg))
	if w.opcode == WROOOFIFOSend {
		p.BTH.Opcode = wire.OOOFIFOSend // no RETH: the peer's receive queue takes it
	} else {
		p.RETH = wire.RETH{VA: w.remoteAddr + off, RKey: w.rkey, DMALen: uint32(n)}
	}
	hl := p.HeaderLen()
	if hl+int(n)+wire.ICRCLen > len(buf) {
		q.stats.inc(CtrEncodeErrors)
		return WCLocLenErr, true
	}
	dst := buf[hl : hl+int(n)]
	if w.inline != nil {
		copy(dst, w.inline[off:])
	} else if st := q.sglCopy(w.sgl, off, dst, false); st != WCSuccess {
		return st, true
	}
	q.emit(out, buf, int(n))
	q.ooo.pkt++
	return WCSuccess, off+n >= w.length
}

// spreadPort is the UDP source port of path k from base: base + k, kept in
// the RoCE source port range 0xC000..0xFFFF when base is in it.
func spreadPort(base uint16, k uint32) uint16 {
	if base < 0xC000 {
		return base + uint16(k)
	}
	return 0xC000 | (base-0xC000+uint16(k))&0x3FFF
}

// oooRetire completes the work request at the send queue's head, in order:
// a local completion (signaled, or any error) which says the packets went
// to the link, not that they arrived. An error leaves the QP as it is.
func (q *QP) oooRetire(w *sendWQE, st WCStatus) {
	o := w.ooo
	wc := WC{ID: w.id, Status: st, Opcode: w.opcode.wcOpcode(), QPN: q.qpn, Ctx: o.ctx, TID: o.tid, Tag: o.tag}
	if st == WCSuccess {
		wc.ByteLen = uint32(w.length) + o.sink.Len
	} else {
		q.condComponentFailed(w)
	}
	w.started = false
	signal := st != WCSuccess || w.flags&Signaled != 0 // read before the slot is handed back
	q.ooo.pkt = 0
	q.comp.head++
	q.sqDone.Store(q.comp.head) // from here the slot belongs to the poster
	if signal {
		q.scq.push(&wc)
	}
}

// oooEmitResponse sends the next packet of the READ response of s (this
// side's context from) as an OOO_WRITE to the reader's context and buffer.
// It reports false when no transmit buffer is free. A source no longer
// readable ends the response with a protection error.
func (q *QP) oooEmitResponse(s *ctxState, from wire.Ctx, out Output) bool {
	buf := out.TxBuffer()
	if buf == nil {
		return false
	}
	e := &q.e
	idx := s.sent
	off := uint64(idx) * uint64(s.seg)
	n := min(uint64(s.total)-off, uint64(s.seg))
	p := &e.pkt
	if s.sink != nil {
		*p = s.sink.hdr
		p.BTH.Opcode, p.XTPController = wire.OOO3PWrite, s.ctl
	} else {
		*p = e.hdr
		p.BTH.Opcode = wire.OOOWrite
	}
	p.BTH.PSN = idx
	if s.fifo {
		p.BTH.Opcode = wire.OOOFIFOSend // no RETH: the reader's receive queue takes it
	} else {
		p.RETH = wire.RETH{VA: s.base + off, RKey: s.rkey, DMALen: uint32(n)}
	}
	p.XRH = wire.XRH{Ctx: s.peer, TID: s.tid, Total: s.total, Initiator: from, Notify: s.notify,
		Seg: wire.MTUFromBytes(int(s.seg)), Tag: s.tag}
	hl := p.HeaderLen()
	m, err := q.tbl.RemoteCached(&q.ooo.srcCache, q.pd, q, s.srcKey, s.srcVA+off, n, mr.RemoteRead)
	if err != nil || hl+int(n)+wire.ICRCLen > len(buf) {
		s.busy = false
		q.oooProtection(s, from)
		return true
	}
	copy(buf[hl:], m)
	q.emit(out, buf, int(n))
	s.sent++
	if s.sent == s.npkts {
		s.busy, s.done = false, true
	}
	return true
}

// oooSendCompletion sends the completion of s's operation on this side's
// context from to the peer's context: at once when a transmit buffer is
// free, else from the work queue.
func (q *QP) oooSendCompletion(s *ctxState, from wire.Ctx, out Output) {
	w := oooWork{cpl: true, from: from, dest: s.peer, tid: s.tid, total: s.total, tag: s.tag, notify: s.notify}
	if !q.oooEmitCompletion(&w, out) && !q.ooo.queue(w) {
		q.stats.inc(CtrOOOWorkOverflow)
	}
}

// oooEmitCompletion sends one OOO_COMPLETION; false when no buffer is free.
func (q *QP) oooEmitCompletion(w *oooWork, out Output) bool {
	buf := out.TxBuffer()
	if buf == nil {
		return false
	}
	p := &q.e.pkt
	*p = q.e.hdr
	p.BTH.Opcode = wire.OOOCompletion
	p.XRH = wire.XRH{Ctx: w.dest, TID: w.tid, Total: w.total, Initiator: w.from, Notify: w.notify, Tag: w.tag}
	p.XCS = wire.XCS{Status: wire.XCSSuccess}
	q.emit(out, buf, 0)
	q.stats.inc(CtrOOOCompletionsSent)
	return true
}
