package qp

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// atomicRMW runs the responder's FETCH_ADD (cas false: add swapAdd) or
// CMP_SWAP (swap in swapAdd when the value equals compare) on the 8 bytes
// b, in host order as ibverbs keeps them, and returns the value before.
// On 8-byte aligned memory it is one atomic instruction of the CPU, so it
// is atomic with respect to every other atomic instruction on the same
// memory, whoever runs it: another process (or the xdproce daemon) that
// maps the same daemon-shared region and uses sync/atomic on it. Memory
// of a region registered at an IOVA of another alignment is updated by a
// plain read and write, atomic only with respect to this engine.
func atomicRMW(b []byte, cas bool, compare, swapAdd uint64) uint64 {
	if uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		orig := binary.NativeEndian.Uint64(b)
		v := orig + swapAdd
		if cas {
			v = orig
			if orig == compare {
				v = swapAdd
			}
		}
		binary.NativeEndian.PutUint64(b, v)
		return orig
	}
	p := (*uint64)(unsafe.Pointer(&b[0]))
	if !cas {
		return atomic.AddUint64(p, swapAdd) - swapAdd
	}
	for {
		orig := atomic.LoadUint64(p)
		if orig != compare || atomic.CompareAndSwapUint64(p, orig, swapAdd) {
			return orig
		}
	}
}
