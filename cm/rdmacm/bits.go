package rdmacm

import "encoding/binary"

// CM fields are packed big-endian with the most significant bit first, as
// IBA Vol 1 chapter 12 draws them (Byte[Bit] notation): a 24-bit QPN fills
// the top three bytes of its word, a 5-bit timeout the top five bits of its
// byte. These helpers read and write such fields.

func be16(b []byte) uint16     { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32     { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64     { return binary.BigEndian.Uint64(b) }
func put16(b []byte, v uint16) { binary.BigEndian.PutUint16(b, v) }
func put32(b []byte, v uint32) { binary.BigEndian.PutUint32(b, v) }
func put64(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// u24 reads the 24-bit field in b[0:3].
func u24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

// put24 writes v's low 24 bits into b[0:3].
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// field reads width bits of b starting at bit (0 = most significant).
func field(b byte, bit, width uint) uint8 { return b >> (8 - bit - width) & (1<<width - 1) }

// setField ORs v into width bits of *b starting at bit; v is range-checked
// by the caller.
func setField(b *byte, bit, width uint, v uint8) { *b |= (v & (1<<width - 1)) << (8 - bit - width) }

// flagBit reads the single bit at bit (0 = most significant).
func flagBit(b byte, bit uint) bool { return field(b, bit, 1) == 1 }

func setFlag(b *byte, bit uint, v bool) {
	if v {
		setField(b, bit, 1, 1)
	}
}

// Widths of the bit fields, for the encoders' range checks.
const (
	max24 = 1<<24 - 1
	max20 = 1<<20 - 1
	max7  = 1<<7 - 1
	max6  = 1<<6 - 1
	max5  = 1<<5 - 1
	max4  = 1<<4 - 1
	max3  = 1<<3 - 1
	max2  = 1<<2 - 1
)
