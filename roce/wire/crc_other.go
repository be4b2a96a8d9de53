//go:build !amd64 || purego

package wire

import "hash/crc32"

// crcBulk is crc32.Update(crc, crc32.IEEETable, p) (crc_amd64.go folds four
// accumulators at once where AVX-512 has VPCLMULQDQ).
func crcBulk(crc uint32, p []byte) uint32 {
	return crc32.Update(crc, crc32.IEEETable, p)
}
