package enlarge

// setAckHook makes c pass every ENLARGE_ACK it writes through f first (f may
// damage it). Call it before the peer's ENLARGE_REQ can arrive.
func (c *Channel) setAckHook(f func(ack []byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ackHook = f
}
