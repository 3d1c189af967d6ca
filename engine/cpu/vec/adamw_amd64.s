//go:build !purego

#include "textflag.h"

// func adamwAVX2(p, grad, m, v *float32, n int, c *AdamWStep)
//
// The fields of AdamWStep, float32 each: Decay 0, B1 4, A1 8, B2 12, A2 16,
// StepSize 20, BC2Sqrt 24, Eps 28. Separate multiplies and adds, in
// the order of vec.AdamW, so the bits equal those of the Go loop.
TEXT ·adamwAVX2(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ c+40(FP), AX
	VBROADCASTSS 0(AX), Y15  // Decay
	VBROADCASTSS 4(AX), Y14  // B1
	VBROADCASTSS 8(AX), Y13  // A1
	VBROADCASTSS 12(AX), Y12 // B2
	VBROADCASTSS 16(AX), Y11 // A2
	VBROADCASTSS 20(AX), Y10 // StepSize
	VBROADCASTSS 24(AX), Y9  // BC2Sqrt
	VBROADCASTSS 28(AX), Y8  // Eps

loop:
	VMOVUPS (SI), Y0         // g
	VMULPS  (DI), Y15, Y1    // p·Decay
	VMULPS  (DX), Y14, Y2    // m·B1
	VMULPS  Y0, Y13, Y3      // A1·g
	VADDPS  Y3, Y2, Y2       // m
	VMULPS  (R8), Y12, Y4    // v·B2
	VMULPS  Y0, Y11, Y5      // A2·g
	VMULPS  Y0, Y5, Y5       // (A2·g)·g
	VADDPS  Y5, Y4, Y4       // v
	VSQRTPS Y4, Y6
	VDIVPS  Y9, Y6, Y6       // √v / BC2Sqrt
	VADDPS  Y8, Y6, Y6       // + Eps
	VMULPS  Y2, Y10, Y7      // StepSize·m
	VDIVPS  Y6, Y7, Y7
	VADDPS  Y7, Y1, Y1
	VMOVUPS Y1, (DI)
	VMOVUPS Y2, (DX)
	VMOVUPS Y4, (R8)
	ADDQ    $32, SI
	ADDQ    $32, DI
	ADDQ    $32, DX
	ADDQ    $32, R8
	SUBQ    $8, CX
	JNZ     loop
	VZEROUPPER
	RET
