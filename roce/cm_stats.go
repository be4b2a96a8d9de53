package roce

// CMStats counts what a device's RDMA CM agent (QP1) holds and did: all
// zero until the first ListenCM, DialCM, ListenSIDR or DialSIDR made it.
type CMStats struct {
	// Conns is how many connections the agent tracks: being set up,
	// connected, or being torn down (0 once every one ended).
	Conns int
	// MADs sent (answers and resends included), resent after a response
	// timeout (a lost message or a slow peer), received (malformed ones
	// included), dropped as undecodable, and dropped for want of a send
	// slot (the peer's retries recover them).
	Sent, Resent, Received, Malformed, SendDrops uint64
}

// CMStats returns the device's CM counters.
func (d *Device) CMStats() CMStats {
	a := d.cmLive.Load()
	if a == nil {
		return CMStats{}
	}
	a.mu.Lock()
	n := len(a.conns)
	a.mu.Unlock()
	return CMStats{Conns: n, Sent: a.sent.Load(), Resent: a.resent.Load(), Received: a.received.Load(),
		Malformed: a.malformed.Load(), SendDrops: a.sendDrops.Load()}
}
