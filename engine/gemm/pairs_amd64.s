//go:build !purego

#include "textflag.h"

// func interleaveStepAVX512(dst *uint32, lo, hi *uint16, n, w, ps int)
//
// One k step of pair panels from two source rows: for each panel q of w ≤ 32
// lines (the last may have fewer of the n), dst[q·ps+i] = lo[q·w+i] |
// hi[q·w+i]<<16 for i < min(w, n−q·w); the other words are left alone. n ≥ 1.
// Masked loads, so no value past n is read.
TEXT ·interleaveStepAVX512(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ w+32(FP), R8
	MOVQ ps+40(FP), R9
	SHLQ $2, R9
	MOVQ $-1, AX

panel:
	// BX = min(CX, w) lines; R10 = min(BX, 16) in the first half, R11 the rest.
	MOVQ    R8, BX
	CMPQ    CX, R8
	CMOVQLT CX, BX
	MOVQ    $16, R10
	CMPQ    BX, $16
	CMOVQLT BX, R10
	MOVQ    BX, R11
	SUBQ    R10, R11
	BZHIQ   R10, AX, R12
	KMOVW   R12, K1
	BZHIQ   R11, AX, R12
	KMOVW   R12, K2
	VPMOVZXWD.Z (SI), K1, Z0
	VPMOVZXWD.Z (DX), K1, Z1
	VPSLLD      $16, Z1, Z1
	VPORD       Z1, Z0, Z0
	VMOVDQU32   Z0, K1, (DI)
	VPMOVZXWD.Z 32(SI), K2, Z2
	VPMOVZXWD.Z 32(DX), K2, Z3
	VPSLLD      $16, Z3, Z3
	VPORD       Z3, Z2, Z2
	VMOVDQU32   Z2, K2, 64(DI)
	LEAQ (SI)(R8*2), SI
	LEAQ (DX)(R8*2), DX
	ADDQ R9, DI
	SUBQ R8, CX
	JG   panel
	VZEROUPPER
	RET
