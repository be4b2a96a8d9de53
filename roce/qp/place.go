package qp

import (
	"sync/atomic"

	"github.com/xdproce/xdproce/roce/mr"
	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// Direct placement (docs/placement.md): an RC queue pair whose peer is
// another client of the same xdproce daemon moves a whole SEND, WRITE or
// READ as one placement request (package place) instead of frames, when
// every byte of its local SGL lies in daemon-shared memory (Placer.Region).
// The daemon validates the request, hands it to the responder's engine,
// which runs the responder's checks (PSN, state, access, rkey, receive WQE)
// and names its memory; the daemon copies and returns the responder's
// ACK or NAK, which the completer takes as it would from the wire. The
// message keeps the PSNs its frames would have had, so the window, the
// timers, go-back-N and the completions are the wire path's. A responder
// whose memory is not shared answers Fallback: the requester resends the
// message, and every later one, as frames.
//
// A queue pair never has placed messages and frames in flight at once in
// the same direction (the requester waits for the window to empty before it
// switches), so the responder's completions keep their order.

// Placer is what the device offers a queue pair for direct placement.
type Placer interface {
	// Region returns the daemon-shared region holding all of b and b's
	// offset in it; ok is false when b is ordinary memory.
	Region(b []byte) (id uint32, off uint64, ok bool)
	// PDNumber is the number the daemon knows pd by (its rkeys name it).
	PDNumber(pd *mr.PD) uint32
}

// PlaceStats counts a queue pair's direct placements.
type PlaceStats struct {
	Requests  uint64 // placement requests sent (resends included)
	Answers   uint64 // placement indications answered as responder
	Fallbacks uint64 // responders that refused: the queue pair went back to frames
	Dropped   uint64 // placement messages dropped (state, sequence, no buffer)
	Granted   uint64 // messages the daemon placed on this responder's grant (place_grant.go)
}

type placeState struct {
	placer     atomic.Pointer[placeScratch]
	off        bool // a responder refused: frames only from now on
	lastPlaced bool // the last message started went by placement
	// Receive completions of placed messages waiting for the daemon's
	// Done, in order (a ring; nil until first used).
	recv       []WC
	rHead, rN  int
	st         PlaceStats
	statsShare [5]atomic.Uint64 // st published for PlaceStats
	granted    atomic.Bool      // an answer granted the daemon this queue pair (TakeGranted)
}

// placeScratch is a placing queue pair's placer and the engine's scratch
// for its messages, made by SetPlacer (a queue pair that never places
// carries none of it).
type placeScratch struct {
	pl  Placer
	pd  uint32 // pl.PDNumber(q.pd)
	msg place.Msg
	pkt wire.Packet
}

// reset forgets the placement state of a queue pair going to Reset (its
// receive WQEs are discarded without completions; it may connect anew).
func (p *placeState) reset() {
	p.off, p.lastPlaced = false, false
	clear(p.recv)
	p.rHead, p.rN = 0, 0
}

// SetPlacer lets the queue pair place messages through p (nil: never).
// Call it before the queue pair reaches RTR.
func (q *QP) SetPlacer(p Placer) {
	if p == nil {
		q.plc.placer.Store(nil)
		return
	}
	q.plc.placer.Store(&placeScratch{pl: p, pd: p.PDNumber(q.pd)})
}

// PlaceStats returns the queue pair's placement counters.
func (q *QP) PlaceStats() PlaceStats {
	s := &q.plc.statsShare
	return PlaceStats{Requests: s[0].Load(), Answers: s[1].Load(), Fallbacks: s[2].Load(), Dropped: s[3].Load(),
		Granted: s[4].Load()}
}

func (q *QP) placeCount(i int, c *uint64) {
	*c++
	q.plc.statsShare[i].Store(*c)
}

// placeOp is the placement operation of a send WQE, 0 for none.
func placeOp(o WROpcode) place.Op {
	switch o {
	case WRRDMAWrite:
		return place.OpWrite
	case WRRDMAWriteImm:
		return place.OpWriteImm
	case WRSend:
		return place.OpSend
	case WRSendImm:
		return place.OpSendImm
	case WRRDMARead:
		return place.OpRead
	}
	return 0
}

// segments resolves sgl (length bytes) into shared-region segments of m;
// false when some byte is not in a shared region or the SGL does not
// resolve (the frame path then reports the error as it does).
func (q *QP) segments(pl Placer, sgl []mr.SGE, length uint64, need mr.Access, m *place.Msg) bool {
	m.NSegs = 0
	for i := range sgl {
		s := &sgl[i]
		if length == 0 {
			break
		}
		n := min(uint64(s.Length), length)
		if n == 0 {
			continue
		}
		b, err := q.tbl.LocalCached(&q.lkeyCache, q.pd, s.LKey, s.Addr, n, need)
		if err != nil || m.NSegs == place.MaxSegs {
			return false
		}
		id, off, ok := pl.Region(b)
		if !ok {
			return false
		}
		m.SegsBuf[m.NSegs] = place.Seg{Region: id, Len: uint32(n), Off: off}
		m.NSegs++
		length -= n
	}
	return length == 0
}

// reqPlace sends the WQE at the requester as one placement request when it
// can. handled false: send it as frames. It also keeps placed messages and
// frames from being in flight together (reqWait until the window empties).
func (q *QP) reqPlace(out Output) (st reqState, handled bool) {
	r, w, p := &q.req, q.req.w, &q.plc
	x := p.placer.Load()
	if x == nil || q.typ != RC {
		return 0, false
	}
	pl, m := x.pl, &x.msg
	op := placeOp(w.opcode)
	ok := !p.off && !q.win.sr.on && op != 0 && w.inline == nil && r.off == 0 && r.psn == w.firstPSN
	if ok {
		need := mr.Access(0)
		if op.Reads() {
			need = mr.LocalWrite
		}
		ok = q.segments(pl, w.sgl, w.length, need, m)
	}
	if ok != p.lastPlaced && q.win.outstanding() {
		return reqWait, true // the other kind is in flight: wait for it to be answered
	}
	p.lastPlaced = ok
	if !ok {
		return 0, false
	}
	buf := out.TxBuffer()
	if buf == nil {
		return reqStarved, true
	}
	m.Kind, m.Op, m.Flags, m.Syndrome, m.Status, m.Tag = place.KindReq, op, 0, 0, 0, 0
	if w.flags&Solicited != 0 && op != place.OpWrite && op != place.OpRead {
		m.Flags = place.FlagSolicited
	}
	m.SrcQPN, m.DstQPN, m.PSN, m.MSN = q.qpn, q.e.attr.DestQPN, w.firstPSN, 0
	m.NPkts = uint32(wire.PSNDiff(w.lastPSN, w.firstPSN)) + 1
	m.Len, m.VA, m.RKey, m.Imm = uint32(w.length), w.remoteAddr, w.rkey, w.imm
	n := place.Encode(buf, m)
	if n == 0 {
		return 0, false
	}
	out.TxCommit(buf[:n])
	q.placeCount(0, &p.st.Requests)
	psn := r.psn
	r.psn = wire.PSNAdd(w.lastPSN, 1)
	r.idx++
	r.off = 0
	r.sinceAckReq = 0
	r.size = n
	// No AckReq for the window: the daemon's copy, not a path, answers,
	// so round trips vary with the size of what is queued before; a lost
	// answer (a full port) is left to the local ACK timer.
	if q.win.sent(psn, r.psn, false, n, q.e.now) {
		q.stats.inc(CtrRetransmits)
	}
	return reqGetWQE, true
}

// PlaceAck takes the daemon's answer to one of this queue pair's placement
// requests (place.KindAck): the responder's ACK or NAK goes to the
// completer as the same AETH from the wire would; Fallback sends the
// refused message and every later one as frames. Engine goroutine only.
func (q *QP) PlaceAck(m *place.Msg, now int64, out Output) {
	p := &q.plc
	q.e.now = now
	if q.ctlGen.Load() != q.e.ctlSeen {
		q.applyCtl()
	}
	x := p.placer.Load()
	if x == nil || q.typ != RC || q.e.state != RTS || !q.win.wasSent(m.PSN) {
		q.placeCount(3, &p.st.Dropped)
		return
	}
	switch m.Status {
	case place.Fallback:
		if wire.PSNBefore(m.PSN, q.win.unacked()) {
			q.placeCount(3, &p.st.Dropped)
			return
		}
		if !p.off {
			p.off = true
			q.placeCount(2, &p.st.Fallbacks)
		}
		// The responder answers in order: everything before the refused
		// message is answered, everything from it on is resent as frames.
		p.lastPlaced = false
		q.rewind(m.PSN)
		return
	case place.AETH:
	default:
		q.placeCount(3, &p.st.Dropped)
		return
	}
	if (wire.AETH{Syndrome: m.Syndrome}).Type() == wire.SyndromeACK {
		// A READ answered by placement: its data is in place.
		if _, w := q.sendWQEAt(m.PSN); w != nil && w.opcode == WRRDMARead && w.lastPSN == m.PSN && !w.done {
			w.readPSN = wire.PSNAdd(m.PSN, 1)
			w.done = true
		}
	}
	k := &x.pkt
	// The daemon answered for the peer it checked: the ACK comes from the
	// peer's address as the wire's would (Receive's address check).
	*k = wire.Packet{SrcIP: q.e.attr.AV.DstIP, DstIP: q.e.attr.AV.SrcIP}
	k.BTH.Opcode, k.BTH.PSN, k.BTH.DestQPN = wire.RCAck, m.PSN, q.qpn
	k.AETH = wire.AETH{Syndrome: m.Syndrome, MSN: m.MSN}
	q.Receive(k, now, out)
}
