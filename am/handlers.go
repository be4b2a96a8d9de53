package am

import "fmt"

// A HandlerFunc is a user handler: it runs on the target, inside the
// target's Progress, with the payload of a Call (valid only during the
// call), and returns the reply's payload (at most Config.Inline bytes; the
// endpoint copies it).
type HandlerFunc func(payload []byte) (reply []byte)

// Register makes fn the handler of id (HUser and above) on this end: the
// peer's Calls of id run it. Registering nil removes it.
func (ep *Endpoint) Register(id Handler, fn HandlerFunc) error {
	if id < HUser {
		return fmt.Errorf("am: register handler %d: ids below %d are the built-in handlers'", id, HUser)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if fn == nil {
		delete(ep.handlers, id)
	} else {
		ep.handlers[id] = fn
	}
	return nil
}

// Call queues an active message to the peer's handler id with payload (at
// most Config.Inline bytes); the handler's reply is copied into reply, and
// Handle.Len says its length. It goes through the write queue (write
// progress). Err: ErrUnknownHandler when the peer has no such handler,
// ErrBadRequest when the reply is longer than reply.
func (ep *Endpoint) Call(id Handler, payload, reply []byte) (*Handle, error) {
	if id < HUser {
		return nil, fmt.Errorf("am: call handler %d: ids below %d are the built-in handlers'", id, HUser)
	}
	if len(payload) > ep.cfg.Inline {
		return nil, fmt.Errorf("am: call handler %d: %d B payload, more than Inline (%d)", id, len(payload), ep.cfg.Inline)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.err != nil {
		return nil, fmt.Errorf("am: call handler %d: %w", id, ep.closedErr())
	}
	o := ep.newOp(Header{Handler: id, Len: uint32(len(payload))}, payload)
	o.reply = reply
	ep.writeQ = append(ep.writeQ, o)
	return o.h, nil
}

// Len is the length of a Call's reply once Done.
func (h *Handle) Len() int {
	h.ep.mu.Lock()
	defer h.ep.mu.Unlock()
	return h.n
}

// runUser runs the user handler a Call names.
func (ep *Endpoint) runUser(h *Header, msg []byte) {
	fn := ep.handlers[h.Handler]
	switch {
	case fn == nil:
		ep.reply(h, HNAK, StatusUnknownHandler, nil)
	case len(msg)-HeaderLen != int(h.Len):
		ep.reply(h, HNAK, StatusBadRequest, nil)
	default:
		out := fn(msg[HeaderLen:])
		if len(out) > ep.cfg.Inline {
			ep.reply(h, HNAK, StatusBadRequest, nil)
			return
		}
		ep.reply(h, HReply, StatusOK, nil)
		r := &ep.replies[len(ep.replies)-1]
		r.hdr.Len, r.data = uint32(len(out)), append([]byte(nil), out...)
	}
}
