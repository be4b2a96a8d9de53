// Package bufpool is the transmit-buffer pool of link/pipe, link/udp and
// link/shm: fixed-size buffers carved from one array (or a given one: shared
// memory), so that a buffer handed back is recognised by its address. Only
// the goroutine owning the link uses a Pool; it allocates nothing after Init.
package bufpool

import "unsafe"

// Pool is a set of n buffers of size bytes each, one every stride bytes.
type Pool struct {
	back   []byte
	size   int
	stride int
	base   uintptr
	free   []int32
	taken  []bool
}

// Init allocates n buffers of size bytes.
func (p *Pool) Init(n, size int) { p.InitOn(make([]byte, n*size), n, size, size) }

// InitOn carves n buffers of size bytes, one every stride bytes (stride ≥
// size, n×stride ≤ len(back)), out of back, which is used in place.
func (p *Pool) InitOn(back []byte, n, stride, size int) {
	p.back = back[:n*stride]
	p.size = size
	p.stride = stride
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
		off := int(s) * p.stride
		bufs[i] = p.back[off : off+p.size : off+p.size]
	}
	return n
}

// Put returns b (a buffer from Alloc, possibly resliced shorter) to the pool
// and reports whether it was an outstanding buffer of this pool. Its bytes
// stay readable until the next Alloc.
func (p *Pool) Put(b []byte) bool {
	i := p.Take(b)
	if i < 0 {
		return false
	}
	p.Release(i)
	return true
}

// Take takes b (a buffer from Alloc, possibly resliced shorter) back from
// its holder without making it free, and returns its index, or -1 if b is
// not an outstanding buffer of this pool. Release frees it later.
func (p *Pool) Take(b []byte) int32 {
	if cap(b) == 0 {
		return -1
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(b))) - p.base
	if off >= uintptr(len(p.back)) || off%uintptr(p.stride) != 0 {
		return -1
	}
	i := off / uintptr(p.stride)
	if !p.taken[i] {
		return -1
	}
	p.taken[i] = false
	return int32(i)
}

// Release frees buffer i, taken back with Take.
func (p *Pool) Release(i int32) { p.free = append(p.free, i) }

// Offset returns where buffer i starts in the array.
func (p *Pool) Offset(i int32) int { return int(i) * p.stride }

// Free reports how many buffers are free.
func (p *Pool) Free() int { return len(p.free) }
