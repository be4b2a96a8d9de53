package wire

import "sync/atomic"

// Identification columns: for a frame that hashes n bytes after its IPv4
// Identification, column i is idBasis[i]·X^(8n) mod P, what flipping bit i
// of the field does to the CRC. Moving an ICRC (MoveIPv4ID, once a frame
// on a UDP_SEGMENT sender) is then the XOR of the columns of the bits that
// change, and recovering an Identification (once a frame on a link/udp
// receiver) starts its elimination from them, instead of a bit-serial
// multiplication each (a 64 KiB `bench write` sender spent ~3 % of its CPU
// there). Frames of a stream share a few lengths, so the columns of four
// lengths are kept, each slot a seqlock of atomics: readers never block,
// a reader that meets a slot being written computes its answer itself, and
// nothing is allocated.

// idColumns is the columns for one n.
type idColumns [16]uint32

// idSlot is one cached idColumns.
type idSlot struct {
	seq atomic.Uint32 // odd while being written
	n   atomic.Uint64 // n+1 of the columns held; 0: none
	col [16]atomic.Uint32
}

var idSlots [4]idSlot

// slotFor picks n's slot (a multiplicative hash: a stream's lengths differ
// by 16, RETH, or by the last packet's remainder).
func slotFor(n uint64) *idSlot { return &idSlots[uint32(n)*0x9E3779B1>>30] }

// idDelta is crc0(x)·X^(8n) mod P: what changing the Identification by x
// does to the CRC of a frame that hashes n bytes after it.
func idDelta(n uint64, x uint16) uint32 {
	s := slotFor(n)
	if q := s.seq.Load(); q&1 == 0 && s.n.Load() == n+1 {
		var d uint32
		for y, i := x, 0; y != 0; y, i = y>>1, i+1 {
			if y&1 != 0 {
				d ^= s.col[i].Load()
			}
		}
		if s.seq.Load() == q {
			return d
		}
	}
	var c idColumns
	columnsFor(n, &c)
	var d uint32
	for y, i := x, 0; y != 0; y, i = y>>1, i+1 {
		if y&1 != 0 {
			d ^= c[i]
		}
	}
	return d
}

// columnsFor sets c to n's columns, from the cache or computed (and then
// cached, unless another goroutine is writing that slot).
func columnsFor(n uint64, c *idColumns) {
	s := slotFor(n)
	if q := s.seq.Load(); q&1 == 0 && s.n.Load() == n+1 {
		for i := range c {
			c[i] = s.col[i].Load()
		}
		if s.seq.Load() == q {
			return
		}
	}
	shift := shiftAfterID(n)
	for i, b := range idBasis {
		c[i] = multModP(shift, b)
	}
	q := s.seq.Load()
	if q&1 != 0 || !s.seq.CompareAndSwap(q, q+1) {
		return
	}
	for i := range c {
		s.col[i].Store(c[i])
	}
	s.n.Store(n + 1)
	s.seq.Store(q + 2)
}
