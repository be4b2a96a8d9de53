package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"sync"
	"testing"
)

// crc0Ref is crc0 of the two Identification bytes x (big-endian), bit by
// bit from idBasis.
func crc0Ref(x uint16) uint32 {
	var d uint32
	for i := 0; x != 0; x, i = x>>1, i+1 {
		if x&1 != 0 {
			d ^= idBasis[i]
		}
	}
	return d
}

// TestIDDelta: the cached columns give what the bit-serial multiplication
// gives, from a cold cache, a warm one and lengths that share a slot, and
// what hashing two frames that differ only in the Identification gives.
func TestIDDelta(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := uint64(rng.IntN(9000))
		x := uint16(rng.Uint32())
		want := multModP(xPow8N(n), crc0Ref(x))
		for k := range 2 { // the second from the cache
			if got := idDelta(n, x); got != want {
				t.Fatalf("idDelta(%d, %#x) = %#x (call %d), want %#x", n, x, got, k, want)
			}
		}
	}
	// Against CRC-32 itself: two messages differing in two bytes, n after.
	for _, n := range []int{0, 1, 12, 4096 + 30, 8972} {
		a := make([]byte, 2+n)
		for i := range a {
			a[i] = byte(i * 7)
		}
		b := append([]byte(nil), a...)
		b[0] ^= 0x12
		b[1] ^= 0x34
		want := crc32.ChecksumIEEE(a) ^ crc32.ChecksumIEEE(b)
		if got := idDelta(uint64(n), 0x1234); got != want {
			t.Errorf("n=%d: idDelta %#x, CRC-32 differs by %#x", n, got, want)
		}
	}
}

// TestIDDeltaConcurrent: goroutines asking for lengths that share slots
// never get another length's answer (run with -race too).
func TestIDDeltaConcurrent(t *testing.T) {
	var ns []uint64
	for n := uint64(100); len(ns) < 12; n++ {
		if slotFor(n) == slotFor(100) {
			ns = append(ns, n)
		}
	}
	want := make(map[uint64]uint32)
	for _, n := range ns {
		want[n] = multModP(xPow8N(n), crc0Ref(0xbeef))
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				n := ns[(i*7+g)%len(ns)]
				if got := idDelta(n, 0xbeef); got != want[n] {
					errs <- "wrong answer under contention"
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func BenchmarkIDDelta(b *testing.B) {
	idDelta(4126, 1)
	for i := range b.N {
		idDelta(4126, uint16(i))
	}
}
