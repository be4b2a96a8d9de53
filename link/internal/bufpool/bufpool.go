// Package bufpool is the transmit-buffer pool of the in-process links
// (link/pipe, link/udp): fixed-size buffers carved from one array, so that a
// buffer handed back is recognised by its address. Only the goroutine owning
// the link uses a Pool; it allocates nothing after Init.
package bufpool

import "unsafe"

// Pool is a set of n buffers of size bytes each.
type Pool struct {
	back  []byte
	size  int
	base  uintptr
	free  []int32
	taken []bool
}

// Init allocates n buffers of size bytes.
func (p *Pool) Init(n, size int) {
	p.back = make([]byte, n*size)
	p.size = size
	p.base = uintptr(unsafe.Pointer(unsafe.SliceData(p.back)))
	p.free = make([]int32, n)
	p.taken = make([]bool, n)
	for i := range n {
		p.free[i] = int32(n - 1 - i)
	}
}

// Alloc stores up to len(bufs) free buffers (len == cap == size) in bufs and
// returns how many.
func (p *Pool) Alloc(bufs [][]byte) int {
	n := min(len(bufs), len(p.free))
	for i := range n {
		s := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		p.taken[s] = true
		off := int(s) * p.size
		bufs[i] = p.back[off : off+p.size : off+p.size]
	}
	return n
}

// Put returns b (a buffer from Alloc, possibly resliced shorter) to the pool
// and reports whether it was an outstanding buffer of this pool. Its bytes
// stay readable until the next Alloc.
func (p *Pool) Put(b []byte) bool {
	if cap(b) == 0 {
		return false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - p.base
	if off >= uintptr(len(p.back)) || off%uintptr(p.size) != 0 {
		return false
	}
	i := off / uintptr(p.size)
	if !p.taken[i] {
		return false
	}
	p.taken[i] = false
	p.free = append(p.free, int32(i))
	return true
}

// Free reports how many buffers are free.
func (p *Pool) Free() int { return len(p.free) }
