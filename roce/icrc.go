package roce

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"

	"github.com/xdproce/xdproce/roce/wire"
)

// icrcRepair decides whether an ICRC mismatch on a frame whose IPv4 header was
// rebuilt by the link (Identification set to 0) is explained by the unknown
// Identification alone.
//
// CRC-32 is affine over GF(2): for messages of equal length,
// crc(m ⊕ d) ⊕ crc(m) = crc0(d), the CRC with zero initial value and no final
// inversion. A different Identification x changes the hashed bytes by d(x) =
// x at the Identification's offset and zeros after it, so the mismatch must
// equal crc0(x ‖ 0^N) = crc0(x) · X^(8N) mod P, a linear function of x's 16
// bits. The 16 images of the unit vectors span at most 16 dimensions of the
// 32-bit space; the mismatch is explained iff it lies in that span, which a
// 16-row elimination decides. A random corruption lands in the span with
// probability about 2^-16.
type icrcRepair struct{}

// idBasis[i] is crc0 of the two Identification bytes with only bit i set
// (bit 0 = least significant bit of the big-endian 16-bit field).
var idBasis = func() (b [16]uint32) {
	zero := crc32.ChecksumIEEE([]byte{0, 0})
	for i := range b {
		var m [2]byte
		binary.BigEndian.PutUint16(m[:], 1<<i)
		b[i] = crc32.ChecksumIEEE(m[:]) ^ zero
	}
	return b
}()

// x2n[k] is X^(2^k) mod P in the reflected representation.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // X^1
	for k := range t {
		t[k] = p
		p = multModP(p, p)
	}
	return t
}()

const crcPoly = 0xedb88320 // IEEE 802.3, reflected

// multModP returns a·b mod P (reflected polynomials, bit 31 = X^0).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// xPow8N returns X^(8n) mod P.
func xPow8N(n uint64) uint32 {
	p := uint32(1) << 31 // X^0
	k := 3
	for n != 0 {
		if n&1 != 0 {
			p = multModP(x2n[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}

// explains reports whether frame (decoded into p, which found a bad ICRC) has
// an ICRC that is right for some other IPv4 Identification. It allocates
// nothing.
func (icrcRepair) explains(frame []byte, p *wire.Packet) bool {
	if p.IPv6 || p.IPID != 0 {
		return false
	}
	ip := 14
	if p.HasVLAN {
		ip += 4
	}
	if len(frame) < ip+20 {
		return false
	}
	end := ip + int(binary.BigEndian.Uint16(frame[ip+2:]))
	hashedEnd := end - 4 // the ICRC itself is not hashed
	n := hashedEnd - (ip + 6)
	if end > len(frame) || n < 0 {
		return false
	}
	want, err := wire.ComputeICRC(frame[:end])
	if err != nil {
		return false
	}
	delta := want ^ p.ICRC
	if delta == 0 {
		return true
	}
	shift := xPow8N(uint64(n))
	// Insert the 16 images into an elimination basis keyed by top bit.
	var rows [32]uint32
	for _, b := range idBasis {
		v := multModP(shift, b)
		for v != 0 {
			hb := 31 - bits.LeadingZeros32(v)
			if rows[hb] == 0 {
				rows[hb] = v
				break
			}
			v ^= rows[hb]
		}
	}
	for delta != 0 {
		hb := 31 - bits.LeadingZeros32(delta)
		if rows[hb] == 0 {
			return false
		}
		delta ^= rows[hb]
	}
	return true
}
