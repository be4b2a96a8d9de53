package daemon

import "github.com/xdproce/xdproce/roce/place"

// Placement messages are queued to their client's port quietly and the
// client is signalled once, when the serving goroutine that made them ends
// its batch: a requester whose 64 WRITEs the daemon placed in one batch
// wakes once for their 64 ACKs, not for the first while the daemon still
// copies the rest. A grant's Note is not signalled at all (the responder's
// engine needs it only before the next message of that queue pair, which
// comes through the same port after it, and wakes it) unless the port is
// more than half full.

// placeSend queues m to to's port; unless lazy (or to's port is crowded)
// to is signalled at the end of c's batch (kick). It reports whether m was
// queued. c's goroutine only.
func (c *client) placeSend(to *client, m *place.Msg, lazy bool) bool {
	var buf [place.HeaderLen]byte
	frame := buf[:place.Encode(buf[:], m)]
	to.txMu.Lock()
	queued, crowded, err := to.port.SendCopyQuiet(frame)
	to.txMu.Unlock()
	switch {
	case queued:
		to.toClient.Add(1)
	case err == nil:
		to.overflow.Add(1)
	}
	if (queued || crowded) && (!lazy || crowded) {
		c.kickLater(to)
	}
	return queued
}

// kickLater remembers to signal to at the end of c's batch.
func (c *client) kickLater(to *client) {
	for _, k := range c.kicks {
		if k == to {
			return
		}
	}
	c.kicks = append(c.kicks, to)
}

// kick signals the clients c's batch queued placement messages to.
func (c *client) kick() {
	for i, k := range c.kicks {
		k.port.Kick() // safe beside deliveries: one atomic flag and the eventfd
		c.kicks[i] = nil
	}
	c.kicks = c.kicks[:0]
}
