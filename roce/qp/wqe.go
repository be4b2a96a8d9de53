package qp

import (
	"fmt"

	"github.com/xdproce/xdproce/roce/mr"
)

// A sendWQE is a send work request as the engines keep it: the WR copied at
// post, plus the requester/completer state of it.
type sendWQE struct {
	// Set at post.
	id         uint64
	opcode     WROpcode
	flags      SendFlags
	imm        uint32
	remoteAddr uint64
	rkey       uint32
	compareAdd uint64
	swap       uint64
	invRKey    uint32
	av         *AddressVector // UD: a slot of its own, allocated for UD QPs only
	remoteQPN  uint32         // UD
	remoteQKey uint32         // UD
	sgl        []mr.SGE       // aliases sglBuf
	inline     []byte         // aliases inlineBuf when Inline
	length     uint64
	ooo        *oooWR // OOO operations: a slot of its own, allocated for OOO QPs only
	bind       BindWR // WRBindMW

	sglBuf    []mr.SGE
	inlineBuf []byte

	// Engine state.
	started  bool // its first packet went out (firstPSN, lastPSN valid)
	done     bool // completed (status valid); waits to be retired in order
	status   WCStatus
	firstPSN uint32 // PSN of its first packet
	lastPSN  uint32 // PSN of its last packet (READ: of the last response)
	readPSN  uint32 // READ: the next response PSN expected
	// READ under selective repeat (sr_read.go): a request for a range of
	// its responses is out until the response at rrEnd-1 arrives (rrOut),
	// and one is wanted for its first missing range (rrWant).
	rrEnd         uint32
	rrOut, rrWant bool
}

// fill copies wr into w (called with q.mu held, after checkSend).
func (w *sendWQE) fill(q *QP, wr *SendWR) error {
	w.id, w.opcode, w.flags, w.imm = wr.ID, wr.Opcode, wr.Flags, wr.Imm
	w.remoteAddr, w.rkey, w.compareAdd, w.swap, w.invRKey = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap, wr.InvRKey
	w.remoteQPN, w.remoteQKey = wr.RemoteQPN, wr.RemoteQKey
	w.bind = wr.Bind
	if w.ooo != nil {
		*w.ooo = oooWR{ctx: wr.Ctx, remoteCtx: wr.RemoteCtx, tid: wr.TID, notify: wr.Notify, tag: wr.Tag,
			paths: wr.Paths, sinkRKey: wr.SinkRKey, sink: wr.Sink, condQ: wr.CondQueue, cond: wr.Cond,
			opTotal: wr.OpTotal, opOff: wr.OpOffset}
	}
	if w.av != nil && wr.AH != nil {
		*w.av = *wr.AH
	}
	w.sgl = w.sglBuf[:copy(w.sglBuf, wr.SGL)]
	w.length = 0
	for _, s := range wr.SGL {
		w.length += uint64(s.Length)
	}
	w.inline = nil
	if wr.Flags&Inline != 0 {
		b := w.inlineBuf[:0]
		for _, s := range wr.SGL {
			m, err := q.tbl.Local(q.pd, s.LKey, s.Addr, uint64(s.Length), 0)
			if err != nil {
				return fmt.Errorf("qp: post send: inline SGE %#x+%d: %w", s.Addr, s.Length, err)
			}
			b = append(b, m...)
		}
		w.inline = b
	}
	w.started, w.done, w.status = false, false, WCSuccess
	return nil
}

// A recvWQE is a receive work request. It keeps its SGL's length, not a
// second slice header: a queue pair may hold thousands of them.
type recvWQE struct {
	id     uint64
	length uint64
	sglBuf []mr.SGE // MaxSGE of them (nil until the slot first gets an SGL); the SGL is sglBuf[:n]
	n      int32
}

// set copies a work request's id and SGL into r.
func (r *recvWQE) set(id uint64, sgl []mr.SGE) {
	r.id, r.n, r.length = id, int32(copy(r.sglBuf, sgl)), 0
	for _, s := range sgl {
		r.length += uint64(s.Length)
	}
}

// sgl returns the SGL.
func (r *recvWQE) sgl() []mr.SGE { return r.sglBuf[:r.n] }

// sglCopy copies between b and the bytes of sgl starting at byte off: into
// the SGL memory when write, out of it otherwise. It returns WCSuccess,
// WCLocLenErr when the SGL is too short or WCLocProtErr when a lookup fails.
func (q *QP) sglCopy(sgl []mr.SGE, off uint64, b []byte, write bool) WCStatus {
	need := mr.Access(0)
	if write {
		need = mr.LocalWrite
	}
	for i := range sgl {
		if len(b) == 0 {
			break
		}
		s := &sgl[i]
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		n := l - off
		if n > uint64(len(b)) {
			n = uint64(len(b))
		}
		m, err := q.tbl.LocalCached(&q.lkeyCache, q.pd, s.LKey, s.Addr+off, n, need)
		if err != nil {
			return WCLocProtErr
		}
		if write {
			copy(m, b[:n])
		} else {
			copy(b[:n], m)
		}
		b = b[n:]
		off = 0
	}
	if len(b) != 0 {
		return WCLocLenErr
	}
	return WCSuccess
}

// checkSGL verifies every SGE of sgl (need: access wanted).
func (q *QP) checkSGL(sgl []mr.SGE, need mr.Access) bool {
	for i := range sgl {
		s := &sgl[i]
		if s.Length == 0 {
			continue
		}
		if _, err := q.tbl.Local(q.pd, s.LKey, s.Addr, uint64(s.Length), need); err != nil {
			return false
		}
	}
	return true
}
