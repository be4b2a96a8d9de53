package wire

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestCRCBulk compares crcBulk with hash/crc32 over lengths around every
// boundary of the fold (256-byte blocks, foldMin), at odd alignments and
// with random registers; on a CPU without AVX-512 VPCLMULQDQ both are
// hash/crc32 and the test says so.
func TestCRCBulk(t *testing.T) {
	if !foldAVX512 {
		t.Log("no AVX-512 VPCLMULQDQ here: crcBulk is crc32.Update")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 20000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lens := []int{0, 1, 15, 16, 63, 64, foldMin - 1, foldMin, foldMin + 1, 271, 272, 319, 320, 511, 512, 767, 768, 769, 1023, 1024, 1025,
		4096 + 12 + 8, 4096 + 60, 8192, 9000, 16384 + 255, 19000}
	for range 300 {
		lens = append(lens, rng.IntN(12000))
	}
	for _, n := range lens {
		for _, off := range []int{0, 1, 7, 13, 64} {
			p := buf[off : off+n]
			for _, c := range []uint32{0, 0xFFFFFFFF, rng.Uint32()} {
				want := crc32.Update(c, crc32.IEEETable, p)
				if got := crcBulk(c, p); got != want {
					t.Fatalf("len %d offset %d crc %#x: crcBulk %#x, hash/crc32 %#x", n, off, c, got, want)
				}
			}
		}
	}
}

// TestCRCBulkAllocs: the 16-byte fold result stays on the stack.
func TestCRCBulkAllocs(t *testing.T) {
	p := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { crcBulk(0, p) }); n != 0 {
		t.Fatalf("crcBulk allocates %v times a call", n)
	}
}

// BenchmarkCRCBulk against hash/crc32 at a RoCE frame's payload sizes.
func BenchmarkCRCBulk(b *testing.B) {
	for _, n := range []int{256, 512, 1072, 4148} {
		p := make([]byte, n)
		b.Run(strconv.Itoa(n)+"/crcBulk", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crcBulk(0, p)
			}
		})
		b.Run(strconv.Itoa(n)+"/crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, crc32.IEEETable, p)
			}
		})
	}
}
