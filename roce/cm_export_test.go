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
