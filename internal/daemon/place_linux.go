package daemon

import (
	"sync"

	"github.com/xdproce/xdproce/roce/place"
	"github.com/xdproce/xdproce/roce/wire"
)

// Direct placement (docs/placement.md): the daemon is seed 004's virtual
// RDMA component. A client's engine sends a placement request (package
// place) instead of a RoCE message's frames; the daemon checks that its
// segments lie in the client's own shared regions, that the request's
// source QPN is the client's and that the destination queue pair is
// registered as connected to it (conn_linux.go), keeps it, and hands the responder's engine
// (the client owning the destination QPN) an indication. That engine runs
// the responder's checks (PSN, state, QP pairing, access, rkey, receive
// WQE) and answers with the segments of its own regions the message lands
// in (or comes from, for a READ); the daemon checks those against the
// responder's regions and the request's length, copies memfd to memfd,
// then tells the responder (Done: its receive completion) and the
// requester (the responder's ACK). No frame is encoded, no ICRC computed.
// A responder without shared memory answers Fallback and the requester
// sends frames; a destination QPN no client owns gets Fallback from the
// daemon. Each side can name only its own memory: a hostile client can
// place into or read from another client only what that client's
// responder exposed by rkey or receive WQE.

// pendSlots is the number of placement requests waiting for their
// responder's answer, daemon-wide; a request older than that many is
// forgotten (its requester times out and resends).
const pendSlots = 4096

// pending is a placement request waiting for its responder's answer.
type pending struct {
	tag            uint32
	used           bool
	from, to       *client
	srcQPN, dstQPN uint32
	psn            uint32
	op             place.Op
	length         uint32
	nsegs          int
	segs           [place.MaxSegs]place.Seg
}

// placeTable is the daemon's pending requests.
type placeTable struct {
	mu   sync.Mutex
	next uint32
	p    []pending // pendSlots, made with the first request
}

// placeCounters count direct placement daemon-wide.
type placeCounters struct {
	placed, placedBytes, fallbacks, answered, bad, failed, granted uint64
}

// fromClientPlace handles a placement message from c.
func (d *Daemon) fromClientPlace(c *client, frame []byte) {
	m := &c.pm
	if place.Decode(frame, m) != nil {
		d.placeBad(c)
		return
	}
	switch m.Kind {
	case place.KindReq:
		d.placeRequest(c, m)
	case place.KindAns:
		d.placeAnswer(c, m)
	case place.KindRevoke:
		if d.revoke(c, m.DstQPN) != nil {
			d.placeBad(c)
		}
	default:
		d.placeBad(c)
	}
}

func (d *Daemon) placeBad(c *client) {
	c.dropMalformed.Add(1)
	d.plMu.Lock()
	d.pl.bad++
	d.plMu.Unlock()
}

// placeRequest checks a requester's message and indicates it to the
// responder.
func (d *Daemon) placeRequest(c *client, m *place.Msg) {
	if m.SrcQPN < c.first || m.SrcQPN > c.last || m.Op < place.OpWrite || m.Op > place.OpRead ||
		m.NPkts == 0 || m.NPkts > 1<<23 || m.Len > 1<<31 || place.Total(m.Segs()) != uint64(m.Len) {
		d.placeBad(c)
		return
	}
	d.memMu.RLock()
	ok := true
	for _, s := range m.Segs() {
		if c.slice(s.Region, s.Off, s.Len) == nil {
			ok = false
		}
	}
	d.memMu.RUnlock()
	if !ok {
		d.placeBad(c)
		return
	}
	to := d.owner(m.DstQPN)
	if to == nil || m.DstQPN == qp1 || m.DstQPN == mcastQPN {
		// Not a local client's: frames go where the wire path takes them.
		c.placeSend(c, &place.Msg{Kind: place.KindAck, Status: place.Fallback, SrcQPN: m.SrcQPN,
			DstQPN: m.DstQPN, PSN: m.PSN}, false)
		d.plMu.Lock()
		d.pl.fallbacks++
		d.plMu.Unlock()
		return
	}
	if !placeConnOK(c, to, m.SrcQPN, m.DstQPN) {
		c.dropConn.Add(1) // conn_linux.go
		d.st.dropConn.Add(1)
		return
	}
	if (m.Op == place.OpWrite || m.Op == place.OpRead) && d.placeGranted(c, to, m) {
		return // grant_linux.go
	}
	t := &d.pt
	t.mu.Lock()
	if t.p == nil {
		t.p = make([]pending, pendSlots)
	}
	t.next++
	tag := t.next
	e := &t.p[tag%pendSlots]
	*e = pending{tag: tag, used: true, from: c, to: to, srcQPN: m.SrcQPN, dstQPN: m.DstQPN, psn: m.PSN,
		op: m.Op, length: m.Len, nsegs: m.NSegs}
	copy(e.segs[:], m.Segs())
	t.mu.Unlock()
	to.indicated(m.DstQPN, tag)
	ind := *m
	ind.Kind, ind.Tag, ind.NSegs = place.KindInd, tag, 0
	c.placeSend(to, &ind, false)
}

// placeAnswer carries out a responder's answer.
func (d *Daemon) placeAnswer(c *client, m *place.Msg) {
	t := &d.pt
	t.mu.Lock()
	var e pending
	if t.p != nil {
		x := &t.p[m.Tag%pendSlots]
		if x.used && x.tag == m.Tag && x.to == c && x.dstQPN == m.DstQPN && x.srcQPN == m.SrcQPN {
			e = *x
			x.used, x.from, x.to = false, nil, nil
		}
	}
	t.mu.Unlock()
	if !e.used {
		d.placeBad(c) // not a request of ours for this client, or answered already
		return
	}
	ack := place.Msg{Kind: place.KindAck, Status: place.AETH, SrcQPN: e.srcQPN, DstQPN: e.dstQPN,
		Syndrome: m.Syndrome, PSN: m.PSN, MSN: m.MSN}
	switch m.Status {
	case place.Answer:
		d.plMu.Lock()
		d.pl.answered++
		d.plMu.Unlock()
		c.placeSend(e.from, &ack, false)
		return
	case place.Fallback:
		ack.Status, ack.PSN = place.Fallback, e.psn
		d.plMu.Lock()
		d.pl.fallbacks++
		d.plMu.Unlock()
		c.placeSend(e.from, &ack, false)
		return
	case place.Place:
	default:
		d.placeBad(c)
		return
	}
	ok := place.Total(m.Segs()) == uint64(e.length) && d.placeCopy(e.from, c, e.segs[:e.nsegs], m.Segs(), e.op.Reads())
	if ok && m.Flags&place.FlagGrant != 0 && (wire.AETH{Syndrome: m.Syndrome}).Type() == wire.SyndromeACK {
		d.granted(c, m, &e)
	}
	d.plMu.Lock()
	if ok {
		d.pl.placed++
		d.pl.placedBytes += uint64(e.length)
	} else {
		d.pl.failed++
	}
	d.plMu.Unlock()
	if m.Flags&place.FlagDone != 0 {
		done := place.Msg{Kind: place.KindDone, SrcQPN: e.srcQPN, DstQPN: e.dstQPN}
		if !ok {
			done.Status = place.Failed
		}
		c.placeSend(c, &done, false)
	}
	if !ok {
		ack.Syndrome, ack.PSN = wire.NAKRemoteOp, e.psn
	}
	c.placeSend(e.from, &ack, false)
}

// placeCopy copies between the requester's segments rs (in a's regions)
// and the responder's ws (in b's): to ws, or from them when read. It
// reports false, copying nothing, when a segment is not (or no longer) in
// its client's regions.
func (d *Daemon) placeCopy(a, b *client, rs, ws []place.Seg, read bool) bool {
	d.memMu.RLock()
	defer d.memMu.RUnlock()
	if !inRegions(a, b, rs, ws) {
		return false
	}
	d.copySegs(a, b, rs, ws, read)
	return true
}

// inRegions reports whether every segment of rs lies in a's regions and
// every one of ws in b's, with memMu held (read).
func inRegions(a, b *client, rs, ws []place.Seg) bool {
	for _, s := range rs {
		if a.slice(s.Region, s.Off, s.Len) == nil {
			return false
		}
	}
	for _, s := range ws {
		if b.slice(s.Region, s.Off, s.Len) == nil {
			return false
		}
	}
	return true
}

// copySegs copies between rs (in a's regions) and ws (in b's), all checked
// to lie in them, with memMu held (read).
func (d *Daemon) copySegs(a, b *client, rs, ws []place.Seg, read bool) {
	var i, j int
	var ri, wj uint64 // bytes done of rs[i], ws[j]
	for i < len(rs) && j < len(ws) {
		x := a.slice(rs[i].Region, rs[i].Off+ri, rs[i].Len-uint32(ri))
		y := b.slice(ws[j].Region, ws[j].Off+wj, ws[j].Len-uint32(wj))
		if x == nil || y == nil {
			return // not checked: never loop on it
		}
		var n int
		if read {
			n = copy(x, y)
		} else {
			n = copy(y, x)
		}
		ri += uint64(n)
		wj += uint64(n)
		if ri == uint64(rs[i].Len) {
			i, ri = i+1, 0
		}
		if wj == uint64(ws[j].Len) {
			j, wj = j+1, 0
		}
	}
}
