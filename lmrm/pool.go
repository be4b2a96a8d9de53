package lmrm

import "fmt"

// granted checks the provider's answer to the LMRM_ALLOC in flight and
// builds the pool's metadata and staging region.
func (r *Requester) granted(m *Msg) error {
	ask := r.asked
	if ask == nil {
		return fmt.Errorf("%w: %v without an allocation request", ErrProtocol, m.Kind)
	}
	r.asked = nil
	if m.Status != AckOK {
		return fmt.Errorf("provider refused %d B in slots of %d B (status %d)", ask.Bytes, ask.MinSlot, m.Status)
	}
	size := uint64(m.SlotSize) * uint64(m.Count)
	switch {
	case int(m.Pool) != len(r.pools):
		return fmt.Errorf("%w: %v names pool %d, want %d", ErrProtocol, m.Kind, m.Pool, len(r.pools))
	case m.Count == 0 || m.Count > MaxSlots:
		return fmt.Errorf("%w: %v grants %d slots (1..%d)", ErrProtocol, m.Kind, m.Count, MaxSlots)
	case m.SlotSize < ask.MinSlot:
		return fmt.Errorf("%w: %v slot of %d B, asked for at least %d", ErrProtocol, m.Kind, m.SlotSize, ask.MinSlot)
	case size < ask.Bytes || size > 2*ask.Bytes+uint64(m.SlotSize):
		return fmt.Errorf("%w: %v range of %d B for %d B asked", ErrProtocol, m.Kind, size, ask.Bytes)
	case m.Addr+size < m.Addr:
		return fmt.Errorf("%w: %v range %#x+%d wraps", ErrProtocol, m.Kind, m.Addr, size)
	case m.RKey == 0:
		return fmt.Errorf("%w: %v with rkey 0", ErrProtocol, m.Kind)
	}
	for _, o := range r.pools {
		end := o.addr + uint64(o.slotSize)*uint64(len(o.state))
		if !o.revoked && o.rkey == m.RKey && m.Addr < end && o.addr < m.Addr+size {
			return fmt.Errorf("%w: %v range %#x+%d overlaps pool %d's slots", ErrProtocol, m.Kind, m.Addr, size, o.id)
		}
	}
	staging, err := r.c.register(make([]byte, size), 0)
	if err != nil {
		return fmt.Errorf("register staging for pool %d: %w", m.Pool, err)
	}
	p := &pool{id: m.Pool, addr: m.Addr, rkey: m.RKey, slotSize: m.SlotSize, staging: staging,
		state: make([]uint8, m.Count), free: make([]uint32, m.Count), n: int(m.Count)}
	for i := range p.free {
		p.free[i] = uint32(i)
	}
	r.pools = append(r.pools, p)
	return nil
}

// released returns the slots an LMRM_RELEASE lists to their pool's free
// ring; each must be in flight.
func (r *Requester) released(m *Msg) error {
	if int(m.Pool) >= len(r.pools) {
		return fmt.Errorf("%w: %v of unknown pool %d", ErrProtocol, m.Kind, m.Pool)
	}
	p := r.pools[m.Pool]
	for _, s := range m.Slots {
		if s >= uint32(len(p.state)) || p.state[s] != slotInFlight {
			return fmt.Errorf("%w: %v of pool %d names slot %d, which is not in flight", ErrProtocol, m.Kind, m.Pool, s)
		}
		p.state[s] = slotFree
		p.inFlight--
		p.free[(p.head+p.n)%len(p.free)] = s
		p.n++
	}
	r.stats.Releases++
	return nil
}

// Stats returns the requester's slot counts and counters.
func (r *Requester) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.stats
	st.Pools = len(r.pools)
	st.Writing = r.writes
	for _, p := range r.pools {
		if !p.revoked {
			st.Free += p.n
			st.Reserved += p.reserved
			st.InFlight += p.inFlight
		}
	}
	return st
}

// Close fails later calls with ErrClosed and deregisters the requester's
// regions. Destroy the queue pair first, so that no work request uses them.
func (r *Requester) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c.err == nil {
		r.c.err = ErrClosed
	}
	errs := []error{r.c.close()}
	for _, p := range r.pools {
		if p.staging != nil {
			errs = append(errs, p.staging.Deregister())
			p.staging = nil
		}
	}
	return joinErr("close", errs)
}

func joinErr(what string, errs []error) error {
	for _, e := range errs {
		if e != nil {
			return fmt.Errorf("lmrm: %s: %w", what, e)
		}
	}
	return nil
}
