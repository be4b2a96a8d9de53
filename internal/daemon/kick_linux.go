package daemon

import "github.com/xdproce/xdproce/roce/place"

// Frames and placement messages are queued to their client's port quietly
// and the client is signalled once, when the goroutine that delivered them
// (a client's serving goroutine or the uplink's) ends its batch: a
// requester whose 64 WRITEs the daemon placed in one batch wakes once for
// their 64 ACKs, not for the first while the daemon still copies the rest;
// a client sent a batch of frames wakes once for all of them. A port more
// than half full is signalled at once. A grant's Note is not signalled at all (the responder's
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
	queued, crowded, err := to.port.SendCopyQuiet(frame, nil)
	to.txMu.Unlock()
	switch {
	case queued:
		to.toClient.Add(1)
	case err == nil:
		to.overflow.Add(1)
	}
	if (queued || crowded) && (!lazy || crowded) {
		c.kicks.add(to)
	}
	return queued
}

// kicks are the clients to signal at the end of a batch. Used by one
// goroutine.
type kicks []*client

// add remembers to signal to at the end of the batch.
func (k *kicks) add(to *client) {
	for _, c := range *k {
		if c == to {
			return
		}
	}
	*k = append(*k, to)
}

// kick signals the clients remembered (those that sleep waiting for
// frames) and forgets them.
func (k *kicks) kick() {
	for i, c := range *k {
		c.port.Kick() // safe beside deliveries: one atomic flag and the eventfd
		(*k)[i] = nil
	}
	*k = (*k)[:0]
}
