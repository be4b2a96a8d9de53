package am

import (
	"fmt"

	"github.com/xdproce/xdproce/roce"
)

// Work request IDs: the kind in the top byte, a slot number below.
const (
	idRecv = 1 << 56
	idSend = 2 << 56
	idRMA  = 3 << 56

	idKind = 0xff << 56
)

// Progress does everything the endpoint has to do, and nothing happens
// between its calls: it polls the completion queue, runs the handlers of the
// messages that arrived (the peer's requests: inline writes land in the
// window, reads are answered, large operations join the RMA queue; replies
// to this end's requests complete their Handles), and then runs the three
// progress steps: RMA progress (posts the RMA queue's RDMA READs and WRITEs,
// at most Config.MaxRMA in flight, and answers AM_DONE when they complete),
// write progress and read progress (send the queued Write and Read requests,
// at most Config.Depth outstanding, registering the buffers of large ones for
// their tag). It never blocks.
//
// An error is fatal: a work request completed with an error status (the queue
// pair is then in the error state), or a post failed. Every operation not yet
// complete fails with it, and later calls return it.
func (ep *Endpoint) Progress() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.err != nil {
		return fmt.Errorf("am: progress: %w", ep.err)
	}
	if err := ep.progress(); err != nil {
		ep.err = err
		ep.failAll()
		return fmt.Errorf("am: progress: %w", err)
	}
	return nil
}

func (ep *Endpoint) progress() error {
	for {
		n, err := ep.cq.Poll(ep.wcs[:])
		if err != nil {
			return err
		}
		for i := range n {
			if err := ep.complete(&ep.wcs[i]); err != nil {
				return err
			}
		}
		if n < len(ep.wcs) {
			break
		}
	}
	if err := ep.rmaProgress(); err != nil {
		return err
	}
	if err := ep.sendReplies(); err != nil {
		return err
	}
	if err := ep.issue(&ep.writeQ); err != nil {
		return err
	}
	return ep.issue(&ep.readQ)
}

// complete handles one work completion.
func (ep *Endpoint) complete(wc *roce.WC) error {
	slot := int(wc.ID &^ idKind)
	kind := wc.ID & idKind
	if wc.Status != roce.WCSuccess {
		what := map[uint64]string{idRecv: "receive", idSend: "send", idRMA: "rma"}[kind]
		return fmt.Errorf("%s completed with %v", what, wc.Status)
	}
	switch kind {
	case idSend:
		ep.sqUsed--
		ep.sfree = append(ep.sfree, slot)
	case idRecv:
		off := slot * ep.msgLen
		ep.handle(ep.rbuf.Bytes()[off : off+int(wc.ByteLen)])
		return ep.postRecv(slot)
	case idRMA:
		o := ep.rmaBusy[slot]
		ep.rmaBusy[slot] = nil
		ep.sqUsed--
		o.win.busy--
		ep.reply(&o.hdr, HDone, StatusOK, nil)
	default:
		return fmt.Errorf("completion of unknown work request %#x", wc.ID)
	}
	return nil
}

func (ep *Endpoint) postRecv(slot int) error {
	ep.sge[0] = roce.SGE{Addr: ep.rbuf.Addr() + uint64(slot*ep.msgLen), Length: uint32(ep.msgLen), LKey: ep.rbuf.LKey()}
	return ep.q.PostRecv(roce.RecvWR{ID: idRecv | uint64(slot), SGL: ep.sge[:]})
}

// handle runs the handler of one received message.
func (ep *Endpoint) handle(msg []byte) {
	h, ok := ParseHeader(msg)
	if !ok {
		ep.stats.Malformed++
		return
	}
	switch h.Handler {
	case HWrite, HWriteRTS, HRead:
		ep.stats.Handled++
		ep.target(&h, msg)
	case HReadReply, HDone, HNAK, HReply:
		ep.initiator(&h, msg)
	default:
		if h.Handler < HUser {
			ep.reply(&h, HNAK, StatusBadRequest, nil)
			return
		}
		ep.stats.Handled++
		ep.runUser(&h, msg)
	}
}

// target runs the built-in handlers of the peer's requests.
func (ep *Endpoint) target(h *Header, msg []byte) {
	w := ep.windows[h.Window]
	switch {
	case w == nil:
		ep.reply(h, HNAK, StatusUnknownWindow, nil)
		return
	case h.Off > uint64(w.mr.Len()) || uint64(h.Len) > uint64(w.mr.Len())-h.Off:
		ep.reply(h, HNAK, StatusOutOfRange, nil)
		return
	}
	if h.hasRMADesc() {
		d, ok := ParseRMADesc(msg)
		if !ok {
			ep.reply(h, HNAK, StatusBadRequest, nil)
			return
		}
		w.busy++
		ep.rmaQ = append(ep.rmaQ, &rmaOp{hdr: *h, desc: d, win: w})
		return
	}
	switch h.Handler {
	case HWrite:
		if len(msg)-HeaderLen != int(h.Len) {
			ep.reply(h, HNAK, StatusBadRequest, nil)
			return
		}
		copy(w.mr.Bytes()[h.Off:], msg[HeaderLen:])
		ep.reply(h, HDone, StatusOK, nil)
	case HRead:
		if int(h.Len) > ep.cfg.Inline {
			ep.reply(h, HNAK, StatusBadRequest, nil)
			return
		}
		w.busy++
		ep.reply(h, HReadReply, StatusOK, w)
	}
}

// reply queues a reply to the request h.
func (ep *Endpoint) reply(h *Header, to Handler, s Status, w *window) {
	r := reply{hdr: *h, win: w}
	r.hdr.Handler, r.hdr.Status, r.hdr.Flags = to, s, 0
	ep.replies = append(ep.replies, r)
}

// initiator completes this end's operation that the reply h answers.
func (ep *Endpoint) initiator(h *Header, msg []byte) {
	o := ep.pending[h.Tag]
	if o == nil {
		ep.stats.Malformed++ // a reply to no request of ours
		return
	}
	delete(ep.pending, h.Tag)
	ep.inflight--
	rma := o.hdr.hasRMADesc()
	var err error
	switch {
	case h.Handler == HNAK:
		ep.stats.NAKsReceived++
		err = statusErr(h.Status)
	case h.Handler == HDone && (o.hdr.Handler == HWrite || rma):
	case h.Handler == HReadReply && o.hdr.Handler == HRead && !rma && len(msg)-HeaderLen == len(o.data):
		copy(o.data, msg[HeaderLen:])
	case h.Handler == HReply && o.hdr.Handler >= HUser && len(msg)-HeaderLen == int(h.Len):
		if int(h.Len) > len(o.reply) {
			err = fmt.Errorf("%w: a reply of %d B for a %d B buffer", ErrBadRequest, h.Len, len(o.reply))
			break
		}
		o.h.n = copy(o.reply, msg[HeaderLen:])
	default:
		err = fmt.Errorf("%w reply %v", ErrBadRequest, h.Handler)
	}
	if err != nil {
		switch o.hdr.Handler {
		case HWrite, HWriteRTS:
			err = fmt.Errorf("am: write window %d [%#x, +%d): %w", o.hdr.Window, o.hdr.Off, o.hdr.Len, err)
		case HRead:
			err = fmt.Errorf("am: read window %d [%#x, +%d): %w", o.hdr.Window, o.hdr.Off, o.hdr.Len, err)
		default:
			err = fmt.Errorf("am: call handler %d: %w", o.hdr.Handler, err)
		}
	}
	ep.finish(o, err)
}

// send posts one message, header h, then the descriptor d (if any), then
// data. It reports false when no send slot or send queue entry is free.
func (ep *Endpoint) send(h *Header, d *RMADesc, data []byte) (bool, error) {
	if len(ep.sfree) == 0 || ep.sqUsed >= ep.sqDepth {
		return false, nil
	}
	slot := ep.sfree[len(ep.sfree)-1]
	b := ep.sbuf.Bytes()[slot*ep.msgLen : (slot+1)*ep.msgLen]
	h.Put(b)
	n := HeaderLen
	if d != nil {
		d.Put(b[n:])
		n += rmaDescLen
	}
	n += copy(b[n:], data)
	ep.sge[0] = roce.SGE{Addr: ep.sbuf.Addr() + uint64(slot*ep.msgLen), Length: uint32(n), LKey: ep.sbuf.LKey()}
	if err := ep.q.PostSend(roce.SendWR{ID: idSend | uint64(slot), Opcode: roce.WRSend, Flags: roce.Signaled, SGL: ep.sge[:]}); err != nil {
		return false, err
	}
	ep.sfree = ep.sfree[:len(ep.sfree)-1]
	ep.sqUsed++
	return true, nil
}

// sendReplies sends the queued replies while slots last.
func (ep *Endpoint) sendReplies() error {
	for len(ep.replies) > 0 {
		r := &ep.replies[0]
		data := r.data
		if r.win != nil {
			data = r.win.mr.Bytes()[r.hdr.Off : r.hdr.Off+uint64(r.hdr.Len)]
		}
		if ok, err := ep.send(&r.hdr, nil, data); !ok {
			return err
		}
		if r.win != nil {
			r.win.busy--
		}
		if r.hdr.Handler == HNAK {
			ep.stats.NAKsSent++
		}
		ep.replies = ep.replies[1:]
	}
	ep.replies = nil
	return nil
}

// rmaProgress posts the RMA queue's operations while RMA slots and send
// queue entries last.
func (ep *Endpoint) rmaProgress() error {
	for slot := range ep.rmaBusy {
		if len(ep.rmaQ) == 0 || ep.sqUsed >= ep.sqDepth {
			return nil
		}
		if ep.rmaBusy[slot] != nil {
			continue
		}
		o := ep.rmaQ[0]
		wr := roce.SendWR{ID: idRMA | uint64(slot), Opcode: roce.WRRDMARead, Flags: roce.Signaled,
			RemoteAddr: o.desc.Addr, RKey: o.desc.RKey}
		if o.hdr.Handler == HRead {
			wr.Opcode = roce.WRRDMAWrite
		}
		m := o.win.mr
		ep.sge[0] = roce.SGE{Addr: m.Addr() + o.hdr.Off, Length: o.hdr.Len, LKey: m.LKey()}
		wr.SGL = ep.sge[:]
		if err := ep.q.PostSend(wr); err != nil {
			return err
		}
		if wr.Opcode == roce.WRRDMARead {
			ep.stats.RMAReads++
		} else {
			ep.stats.RMAWrites++
		}
		ep.rmaQ = ep.rmaQ[1:]
		ep.rmaBusy[slot] = o
		ep.sqUsed++
	}
	return nil
}

// issue sends the requests of a write or read queue while fewer than
// Config.Depth are outstanding and slots last. A large operation's buffer is
// registered for its tag first (remote read for a write, remote write for a
// read); a registration that fails fails that operation only.
func (ep *Endpoint) issue(q *[]*op) error {
	for len(*q) > 0 && ep.inflight < ep.cfg.Depth {
		o := (*q)[0]
		var d *RMADesc
		if o.hdr.hasRMADesc() {
			if o.mr == nil {
				access := roce.RemoteRead
				if o.hdr.Handler == HRead {
					access = roce.LocalWrite | roce.RemoteWrite
				}
				m, err := ep.register(o.data, access)
				if err != nil {
					ep.finish(o, fmt.Errorf("am: register the buffer of tag %d: %w", o.hdr.Tag, err))
					*q = (*q)[1:]
					continue
				}
				o.mr = m
				ep.stats.TagRegistered++
			}
			d = &RMADesc{Addr: o.mr.Addr(), RKey: o.mr.RKey()}
		}
		var data []byte
		if o.hdr.Handler == HWrite || o.hdr.Handler >= HUser {
			data = o.data
		}
		if ok, err := ep.send(&o.hdr, d, data); !ok {
			return err
		}
		*q = (*q)[1:]
		ep.pending[o.hdr.Tag] = o
		ep.inflight++
		ep.stats.RequestsSent++
	}
	if len(*q) == 0 {
		*q = nil
	}
	return nil
}
