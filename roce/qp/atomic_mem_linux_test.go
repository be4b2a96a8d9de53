package qp

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestAtomicRMWShared: the responder's FETCH_ADD and CMP_SWAP on one
// mapping of a memfd, racing sync/atomic adds on a second mapping of the
// same memory (as another process, or the xdproce daemon, maps a
// daemon-shared region), lose no update: the sum is exact, and every
// value a FETCH_ADD returned is distinct. A misaligned address still
// computes (plain read and write).
func TestAtomicRMWShared(t *testing.T) {
	fd, err := unix.MemfdCreate("atomic-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, 4096); err != nil {
		t.Fatal(err)
	}
	m1, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m1)
	m2, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m2)
	const n = 200000
	seen := make([]uint64, 0, n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := (*uint64)(unsafe.Pointer(&m2[64]))
		for range n {
			atomic.AddUint64(p, 1<<32)
		}
	}()
	for range n {
		seen = append(seen, atomicRMW(m1[64:72], false, 0, 1))
	}
	wg.Wait()
	if got := binary.NativeEndian.Uint64(m1[64:]); got != n<<32|n {
		t.Fatalf("counter %#x, want %#x", got, uint64(n<<32|n))
	}
	for i, v := range seen {
		if v&0xFFFFFFFF != uint64(i) {
			t.Fatalf("FETCH_ADD %d returned %#x", i, v)
		}
	}
	// CMP_SWAP: swaps only on a match; returns the value before.
	binary.NativeEndian.PutUint64(m2[128:], 7)
	if orig := atomicRMW(m1[128:136], true, 8, 9); orig != 7 || binary.NativeEndian.Uint64(m2[128:]) != 7 {
		t.Errorf("CMP_SWAP without a match: %d, memory %d", orig, binary.NativeEndian.Uint64(m2[128:]))
	}
	if orig := atomicRMW(m1[128:136], true, 7, 9); orig != 7 || binary.NativeEndian.Uint64(m2[128:]) != 9 {
		t.Errorf("CMP_SWAP: %d, memory %d", orig, binary.NativeEndian.Uint64(m2[128:]))
	}
	binary.NativeEndian.PutUint64(m1[201:], 5)
	if orig := atomicRMW(m1[201:209], false, 0, 3); orig != 5 || binary.NativeEndian.Uint64(m1[201:]) != 8 {
		t.Errorf("misaligned FETCH_ADD: %d, memory %d", orig, binary.NativeEndian.Uint64(m1[201:]))
	}
}
