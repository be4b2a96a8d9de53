package roce

import "net/netip"

// CMInput hands mad to the device's CM agent as if it came from QP1 at src
// (the fuzz target), creating the agent when needed.
func (d *Device) CMInput(src netip.Addr, mad []byte) error {
	a, err := d.cm()
	if err != nil {
		return err
	}
	a.input(src, 1, mad)
	return nil
}

// CMConns is how many connections the device's CM agent tracks.
func (d *Device) CMConns() int {
	a, err := d.cm()
	if err != nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.conns)
}

// CMSIDR counts the device's SIDR state: requests received and not yet
// answered, answers kept for retries, requests sent and waiting.
func (d *Device) CMSIDR() (pending, kept, dialing int) {
	a, err := d.cm()
	if err != nil {
		return 0, 0, 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.sidrIn {
		if e.rep == nil {
			pending++
		} else {
			kept++
		}
	}
	return pending, kept, len(a.sidrOut)
}

// pending takes a request already waiting in the backlog, without
// waiting (the fuzz target's check, at no timer's cost).
func (b *backlog[R]) pending() (R, bool) {
	select {
	case r := <-b.reqs:
		return r, true
	default:
		var zero R
		return zero, false
	}
}

// Pending returns a connection request already waiting for Accept.
func (l *CMListener) Pending() (*CMRequest, bool) { return l.q.pending() }

// Pending returns a SIDR request already waiting for Accept.
func (l *SIDRListener) Pending() (*SIDRRequest, bool) { return l.q.pending() }
