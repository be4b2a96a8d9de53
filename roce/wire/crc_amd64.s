//go:build !purego

#include "textflag.h"

// Folding constants for the bit-reflected CRC-32 (IEEE 802.3):
// bitreflect32(x^n mod P) << 1 for n = d+32 (a lane's low quadword) and
// d-32 (its high one), d the folding distance in bits (Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ"). A wrong constant
// fails TestCRCBulk, which compares with hash/crc32.
//
// FOLD4 names 64 bytes holding the pair (lo, hi) in each of four lanes.
#define FOLD4(name, lo, hi) \
	DATA name<>+0(SB)/8, $lo \
	DATA name<>+8(SB)/8, $hi \
	DATA name<>+16(SB)/8, $lo \
	DATA name<>+24(SB)/8, $hi \
	DATA name<>+32(SB)/8, $lo \
	DATA name<>+40(SB)/8, $hi \
	DATA name<>+48(SB)/8, $lo \
	DATA name<>+56(SB)/8, $hi \
	GLOBL name<>(SB), RODATA, $64

// d = 2048: each of four accumulators over the next 256 bytes.
FOLD4(fold2048, 0x11542778a, 0x1322d1430)

// The first three accumulators onto the fourth: d = 1536, 1024, 512 (512
// also folds one accumulator over the next 64 bytes).
FOLD4(fold1536, 0x1821d8bc0, 0x12e958ac4)
FOLD4(fold1024, 0x1e88ef372, 0x14a7fe880)
FOLD4(fold512, 0x154442bd4, 0x1c6e41596)

// A ZMM register's first three 128-bit lanes onto its fourth: d = 384, 256
// and 128 bits; the fourth lane's pair is zero.
DATA foldLanes<>+0(SB)/8, $0x03db1ecdc
DATA foldLanes<>+8(SB)/8, $0x174359406
DATA foldLanes<>+16(SB)/8, $0x0f1da05aa
DATA foldLanes<>+24(SB)/8, $0x15a546366
DATA foldLanes<>+32(SB)/8, $0x1751997d0
DATA foldLanes<>+40(SB)/8, $0x0ccaa009e
DATA foldLanes<>+48(SB)/8, $0
DATA foldLanes<>+56(SB)/8, $0
GLOBL foldLanes<>(SB), RODATA, $64

// Folding a 128-bit accumulator over the next 16 bytes: distance 128 bits.
DATA fold128<>+0(SB)/8, $0x1751997d0
DATA fold128<>+8(SB)/8, $0x0ccaa009e
GLOBL fold128<>(SB), RODATA, $16

// func fold256(crc uint32, p []byte, out *[16]byte)
//
// Folds p (len at least 256 and a multiple of 16) with the CRC register crc
// (already inverted, as in the table algorithm) XORed into its first four
// bytes, and writes 16 bytes whose CRC from a zero register equals that
// register after p. Four independent 512-bit accumulators over 256-byte
// blocks, so that the carry-less multiplications of one do not wait for
// another's; then one over the 64-byte blocks left, then 128 bits over the
// 16-byte ones.
TEXT ·fold256(SB), NOSPLIT, $0-40
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ out+32(FP), DI

	VPXORQ    Z10, Z10, Z10
	VMOVD     AX, X10 // the register into the low 32 bits, the rest zero
	VMOVDQU64 0(SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VPXORQ    Z10, Z1, Z1
	VMOVDQU64 fold2048<>+0(SB), Z0
	ADDQ      $256, SI
	SUBQ      $256, CX

loop256:
	CMPQ       CX, $256
	JB         merge
	VMOVDQU64  0(SI), Z11
	VMOVDQU64  64(SI), Z12
	VMOVDQU64  128(SI), Z13
	VMOVDQU64  192(SI), Z14
	VPCLMULQDQ $0x11, Z0, Z1, Z5
	VPCLMULQDQ $0x00, Z0, Z1, Z1
	VPCLMULQDQ $0x11, Z0, Z2, Z6
	VPCLMULQDQ $0x00, Z0, Z2, Z2
	VPCLMULQDQ $0x11, Z0, Z3, Z7
	VPCLMULQDQ $0x00, Z0, Z3, Z3
	VPCLMULQDQ $0x11, Z0, Z4, Z8
	VPCLMULQDQ $0x00, Z0, Z4, Z4
	VPTERNLOGD $0x96, Z11, Z5, Z1 // Z1 ^= Z5 ^ Z11
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	VPTERNLOGD $0x96, Z14, Z8, Z4
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop256

merge:
	// Fold the first three accumulators onto the fourth, at once.
	VMOVDQU64  fold1536<>+0(SB), Z0
	VPCLMULQDQ $0x11, Z0, Z1, Z5
	VPCLMULQDQ $0x00, Z0, Z1, Z1
	VMOVDQU64  fold1024<>+0(SB), Z0
	VPCLMULQDQ $0x11, Z0, Z2, Z6
	VPCLMULQDQ $0x00, Z0, Z2, Z2
	VMOVDQU64  fold512<>+0(SB), Z9
	VPCLMULQDQ $0x11, Z9, Z3, Z7
	VPCLMULQDQ $0x00, Z9, Z3, Z3
	VPTERNLOGD $0x96, Z4, Z5, Z1 // Z1 ^= Z5 ^ Z4
	VPTERNLOGD $0x96, Z2, Z6, Z7 // Z7 ^= Z6 ^ Z2
	VPTERNLOGD $0x96, Z3, Z7, Z1 // Z1 ^= Z7 ^ Z3

loop64:
	CMPQ       CX, $64
	JB         lanes
	VMOVDQU64  0(SI), Z11
	VPCLMULQDQ $0x11, Z9, Z1, Z5
	VPCLMULQDQ $0x00, Z9, Z1, Z1
	VPTERNLOGD $0x96, Z11, Z5, Z1
	ADDQ       $64, SI
	SUBQ       $64, CX
	JMP        loop64

lanes:
	// Fold the first three lanes onto the fourth (the constants' fourth
	// lane is zero, so Z5 and Z6 hold zero there).
	VMOVDQU64     foldLanes<>+0(SB), Z0
	VPCLMULQDQ    $0x11, Z0, Z1, Z5
	VPCLMULQDQ    $0x00, Z0, Z1, Z6
	VPXORQ        Z5, Z6, Z5
	VEXTRACTI64X4 $1, Z5, Y6 // lanes 2 and 3
	VPXORQ        Y6, Y5, Y5
	VEXTRACTI128  $1, Y5, X6
	VPXOR         X6, X5, X5
	VEXTRACTI32X4 $3, Z1, X6 // the fourth lane itself
	VPXOR         X6, X5, X5
	VMOVDQU       fold128<>+0(SB), X0

loop16:
	CMPQ       CX, $16
	JB         done
	VMOVDQU    0(SI), X11
	VPCLMULQDQ $0x11, X0, X5, X6
	VPCLMULQDQ $0x00, X0, X5, X5
	VPXOR      X6, X5, X5
	VPXOR      X11, X5, X5
	ADDQ       $16, SI
	SUBQ       $16, CX
	JMP        loop16

done:
	VMOVDQU X5, 0(DI)
	VZEROUPPER
	RET
