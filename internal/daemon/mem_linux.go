package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Daemon-shared memory regions (direct placement, place_linux.go): a
// client shares a sealed memfd with the daemon (proto.OpRegMem); the daemon
// maps it and copies placed messages into and out of it. A region is
// looked up by the client that shared it and the number the daemon gave
// it, never by address: a client can name only its own regions. The
// memfd must be sealed against shrinking, so a mapped page never goes
// away under a copy (SIGBUS); the mapping is undone, under the write
// lock, when the client deregisters the region or goes, so no copy runs
// into an unmapped region.

// maxRegions bounds a client's shared regions.
const maxRegions = 4096

// regions are one client's shared memory regions (guarded by Daemon.memMu).
type regions struct {
	m     map[uint32][]byte
	next  uint32
	bytes int64
	keys  map[uint32]rkeyEntry // registered rkeys (grant_linux.go)
}

// addRegion maps the memfd fd (which it closes) for c and returns the
// region's number.
func (d *Daemon) addRegion(c *client, fd int) (uint32, error) {
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return 0, fmt.Errorf("not a sealable memfd: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return 0, errors.New("memfd not sealed against shrinking")
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("fstat: %w", err)
	}
	limit := d.cfg.MaxShared
	if limit == 0 {
		limit = DefaultMaxShare
	}
	if st.Size <= 0 || st.Size > limit {
		return 0, fmt.Errorf("region of %d bytes not in 1..%d", st.Size, limit)
	}
	d.memMu.Lock()
	defer d.memMu.Unlock()
	r := &c.mem
	switch {
	case c.gone:
		return 0, errors.New("client gone")
	case len(r.m) >= maxRegions:
		return 0, fmt.Errorf("client holds its limit of %d regions", maxRegions)
	case r.bytes+st.Size > limit:
		return 0, fmt.Errorf("client shares %d bytes; %d more passes the limit of %d", r.bytes, st.Size, limit)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return 0, fmt.Errorf("mmap %d bytes: %w", st.Size, err)
	}
	if r.m == nil {
		r.m = map[uint32][]byte{}
	}
	r.next++
	for r.m[r.next] != nil || r.next == 0 {
		r.next++
	}
	r.m[r.next] = mem
	r.bytes += st.Size
	return r.next, nil
}

// dropRegion unmaps c's region id; copies into it have ended when it
// returns.
func (d *Daemon) dropRegion(c *client, id uint32) error {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	mem, ok := c.mem.m[id]
	if !ok {
		return fmt.Errorf("no region %d", id)
	}
	delete(c.mem.m, id)
	c.dropKeys(id)
	c.mem.bytes -= int64(len(mem))
	return unix.Munmap(mem)
}

// dropRegions unmaps all of c's regions (c is going).
func (d *Daemon) dropRegions(c *client) {
	d.memMu.Lock()
	defer d.memMu.Unlock()
	c.gone = true
	for id, mem := range c.mem.m {
		unix.Munmap(mem)
		delete(c.mem.m, id)
	}
	clear(c.mem.keys)
	c.mem.bytes = 0
}

// slice returns the bytes of seg in c's regions, nil when it is not all in
// one of them. Called with memMu held (read).
func (c *client) slice(region uint32, off uint64, n uint32) []byte {
	mem, ok := c.mem.m[region]
	if !ok || off > uint64(len(mem)) || uint64(n) > uint64(len(mem))-off {
		return nil
	}
	return mem[off : off+uint64(n) : off+uint64(n)]
}
