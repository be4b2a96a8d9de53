package lmrm

// PoolKeys returns pool i's remote address and rkey.
func (r *Requester) PoolKeys(i int) (addr uint64, rkey uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pools[i].addr, r.pools[i].rkey
}
