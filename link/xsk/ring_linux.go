package xsk

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of the four shared rings of an AF_XDP socket. The kernel and we
// each own one index: for the fill and TX rings we produce and the kernel
// consumes; for the RX and completion rings the reverse. Indexes are free
// running uint32s; entry i lives at i & mask. Index loads and stores are
// atomic (acquire/release against the kernel's smp_load_acquire and
// smp_store_release).
type ring struct {
	producer *uint32
	consumer *uint32
	flags    *uint32
	descs    unsafe.Pointer
	mask     uint32
	size     uint32
	// cached copies of the index we do not own, and ours
	prod, cons uint32
	mem        []byte
}

func mapRing(fd int, off unix.XDPRingOffset, pgoff int64, n uint32, entry uintptr) (ring, error) {
	size := int(off.Desc) + int(n)*int(entry)
	mem, err := unix.Mmap(fd, pgoff, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return ring{}, err
	}
	base := unsafe.Pointer(&mem[0])
	r := ring{
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		descs:    unsafe.Add(base, off.Desc),
		mask:     n - 1,
		size:     n,
		mem:      mem,
	}
	r.prod = atomic.LoadUint32(r.producer)
	r.cons = atomic.LoadUint32(r.consumer)
	return r, nil
}

func (r *ring) unmap() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}

func (r *ring) needWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}

// Producer side (fill, TX).

// free returns how many entries may be produced, refreshing the consumer index
// only when the cached one says fewer than want are free.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.prod - r.cons)
	if n >= want {
		return n
	}
	r.cons = atomic.LoadUint32(r.consumer)
	return r.size - (r.prod - r.cons)
}

// submit publishes the entries written up to r.prod.
func (r *ring) submit() { atomic.StoreUint32(r.producer, r.prod) }

// pending reports whether the kernel has not consumed everything produced.
func (r *ring) pending() bool { return atomic.LoadUint32(r.consumer) != r.prod }

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.descs, uintptr(i&r.mask)*8))
}

func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.descs, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// Consumer side (RX, completion).

// avail returns how many entries may be consumed, refreshing the producer
// index when the cached one shows none.
func (r *ring) avail() uint32 {
	if n := r.prod - r.cons; n > 0 {
		return n
	}
	r.prod = atomic.LoadUint32(r.producer)
	return r.prod - r.cons
}

// refresh reloads the producer index.
func (r *ring) refresh() { r.prod = atomic.LoadUint32(r.producer) }

// release hands consumed entries up to r.cons back to the kernel.
func (r *ring) release() { atomic.StoreUint32(r.consumer, r.cons) }
