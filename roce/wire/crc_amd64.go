//go:build !purego

package wire

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// fold256 is in crc_amd64.s.
//
//go:noescape
func fold256(crc uint32, p []byte, out *[16]byte)

// foldAVX512 says fold256 can run: AVX-512 with VPCLMULQDQ (and the OS
// saving the ZMM registers, which x/sys/cpu checks).
var foldAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

// foldMin is the shortest input fold256 takes (its first 256-byte block).
// BenchmarkCRCBulk on the 2-vCPU Xeon, crcBulk against hash/crc32: 512
// bytes 22-26 ns against 30-50, 1072 (a 1 KiB frame) 31-45 against 48-62,
// 4148 (4 KiB) 91-105 against 140-165.
const foldMin = 256

// crcBulk is crc32.Update(crc, crc32.IEEETable, p). hash/crc32 folds one
// 64-byte accumulator with AVX-512 from 1 KiB on, so each step waits for
// the last multiplication (13 GB/s measured on the test VM's Xeon); fold256
// keeps four in flight. It folds p but its last len(p)%16 bytes into 16
// bytes whose CRC from a zero register continues into those.
func crcBulk(crc uint32, p []byte) uint32 {
	if !foldAVX512 || len(p) < foldMin {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	n := len(p) &^ 15
	var z [16]byte
	fold256(^crc, p[:n], &z)
	// crcUpdate, not crc32.Update: a stack array handed to hash/crc32
	// escapes (icrc.go); the tail is under 16 bytes.
	return crcUpdate(crcUpdate(0xFFFFFFFF, z[:]), p[n:])
}
