//go:build amd64 && !purego

#include "textflag.h"

// Constants, each repeated over 32 bytes so that AVX2 code can take them
// as memory operands and AVX-512 code can broadcast them.
// 0: 89
DATA expc<>+0(SB)/8, $0x42b2000042b20000
DATA expc<>+8(SB)/8, $0x42b2000042b20000
DATA expc<>+16(SB)/8, $0x42b2000042b20000
DATA expc<>+24(SB)/8, $0x42b2000042b20000
// 32: log2e
DATA expc<>+32(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+40(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+48(SB)/8, $0x3fb8aa3b3fb8aa3b
DATA expc<>+56(SB)/8, $0x3fb8aa3b3fb8aa3b
// 64: magic 1.5·2²³
DATA expc<>+64(SB)/8, $0x4b4000004b400000
DATA expc<>+72(SB)/8, $0x4b4000004b400000
DATA expc<>+80(SB)/8, $0x4b4000004b400000
DATA expc<>+88(SB)/8, $0x4b4000004b400000
// 96: −ln2 high
DATA expc<>+96(SB)/8, $0xbf317218bf317218
DATA expc<>+104(SB)/8, $0xbf317218bf317218
DATA expc<>+112(SB)/8, $0xbf317218bf317218
DATA expc<>+120(SB)/8, $0xbf317218bf317218
// 128: −ln2 low
DATA expc<>+128(SB)/8, $0x3102e3083102e308
DATA expc<>+136(SB)/8, $0x3102e3083102e308
DATA expc<>+144(SB)/8, $0x3102e3083102e308
DATA expc<>+152(SB)/8, $0x3102e3083102e308
// 160: c6
DATA expc<>+160(SB)/8, $0x3ab61a883ab61a88
DATA expc<>+168(SB)/8, $0x3ab61a883ab61a88
DATA expc<>+176(SB)/8, $0x3ab61a883ab61a88
DATA expc<>+184(SB)/8, $0x3ab61a883ab61a88
// 192: c5
DATA expc<>+192(SB)/8, $0x3c0923843c092384
DATA expc<>+200(SB)/8, $0x3c0923843c092384
DATA expc<>+208(SB)/8, $0x3c0923843c092384
DATA expc<>+216(SB)/8, $0x3c0923843c092384
// 224: c4
DATA expc<>+224(SB)/8, $0x3d2aab1c3d2aab1c
DATA expc<>+232(SB)/8, $0x3d2aab1c3d2aab1c
DATA expc<>+240(SB)/8, $0x3d2aab1c3d2aab1c
DATA expc<>+248(SB)/8, $0x3d2aab1c3d2aab1c
// 256: c3
DATA expc<>+256(SB)/8, $0x3e2aaa3f3e2aaa3f
DATA expc<>+264(SB)/8, $0x3e2aaa3f3e2aaa3f
DATA expc<>+272(SB)/8, $0x3e2aaa3f3e2aaa3f
DATA expc<>+280(SB)/8, $0x3e2aaa3f3e2aaa3f
// 288: c2
DATA expc<>+288(SB)/8, $0x3effffff3effffff
DATA expc<>+296(SB)/8, $0x3effffff3effffff
DATA expc<>+304(SB)/8, $0x3effffff3effffff
DATA expc<>+312(SB)/8, $0x3effffff3effffff
// 320: 1
DATA expc<>+320(SB)/8, $0x3f8000003f800000
DATA expc<>+328(SB)/8, $0x3f8000003f800000
DATA expc<>+336(SB)/8, $0x3f8000003f800000
DATA expc<>+344(SB)/8, $0x3f8000003f800000
// 352: ExpFlush
DATA expc<>+352(SB)/8, $0xc2aeac4fc2aeac4f
DATA expc<>+360(SB)/8, $0xc2aeac4fc2aeac4f
DATA expc<>+368(SB)/8, $0xc2aeac4fc2aeac4f
DATA expc<>+376(SB)/8, $0xc2aeac4fc2aeac4f
// 384: sign bit
DATA expc<>+384(SB)/8, $0x8000000080000000
DATA expc<>+392(SB)/8, $0x8000000080000000
DATA expc<>+400(SB)/8, $0x8000000080000000
DATA expc<>+408(SB)/8, $0x8000000080000000
// 416: −Inf
DATA expc<>+416(SB)/8, $0xff800000ff800000
DATA expc<>+424(SB)/8, $0xff800000ff800000
DATA expc<>+432(SB)/8, $0xff800000ff800000
DATA expc<>+440(SB)/8, $0xff800000ff800000
GLOBL expc<>(SB), RODATA|NOPTR, $448

// tailmask<>+4·(8−r) holds r all-ones int32s followed by zeros.
DATA tailmask<>+0(SB)/8, $0xffffffffffffffff
DATA tailmask<>+8(SB)/8, $0xffffffffffffffff
DATA tailmask<>+16(SB)/8, $0xffffffffffffffff
DATA tailmask<>+24(SB)/8, $0xffffffffffffffff
DATA tailmask<>+32(SB)/8, $0
DATA tailmask<>+40(SB)/8, $0
DATA tailmask<>+48(SB)/8, $0
DATA tailmask<>+56(SB)/8, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

#define C_89 expc<>+0(SB)
#define C_LOG2E expc<>+32(SB)
#define C_MAGIC expc<>+64(SB)
#define C_NLN2HI expc<>+96(SB)
#define C_NLN2LO expc<>+128(SB)
#define C_C6 expc<>+160(SB)
#define C_C5 expc<>+192(SB)
#define C_C4 expc<>+224(SB)
#define C_C3 expc<>+256(SB)
#define C_C2 expc<>+288(SB)
#define C_ONE expc<>+320(SB)
#define C_FLUSH expc<>+352(SB)
#define C_SIGN expc<>+384(SB)
#define C_NEGINF expc<>+416(SB)

// The exponential, e^x = 2ⁿ·p(r), n = round(x·log₂e), r = x − n·ln2:
//
//	keep = !(x < ExpFlush)               (true for NaN)
//	xc = min(89, x)                      (NaN stays NaN; e^89 overflows)
//	t  = xc·log₂e + 1.5·2²³              (FMA: n = round-to-even(xc·log₂e) in the low bits)
//	n  = t − 1.5·2²³
//	r  = xc − n·ln2hi − n·ln2lo          (two FMAs; the first is exact)
//	p  = ((((((c6·r + c5)·r + c4)·r + c3)·r + c2)·r + 1)·r + 1
//	y  = keep ? p·2ⁿ : 0                 (one rounding: p·2ⁿ, overflow to +Inf)
//
// AVX-512 scales with VSCALEFPS; AVX2 multiplies by 2^⌊n/2⌋ (exact) and
// then by 2^(n−⌊n/2⌋) (the one rounding), which gives the same bits.

// ===== AVX-512 =====

// CONSTS512 broadcasts the exponential's constants into Z16–Z27.
#define CONSTS512 \
	VBROADCASTSS C_89, Z16; \
	VBROADCASTSS C_LOG2E, Z17; \
	VBROADCASTSS C_MAGIC, Z18; \
	VBROADCASTSS C_NLN2HI, Z19; \
	VBROADCASTSS C_NLN2LO, Z20; \
	VBROADCASTSS C_C6, Z21; \
	VBROADCASTSS C_C5, Z22; \
	VBROADCASTSS C_C4, Z23; \
	VBROADCASTSS C_C3, Z24; \
	VBROADCASTSS C_C2, Z25; \
	VBROADCASTSS C_ONE, Z26; \
	VBROADCASTSS C_FLUSH, Z27

// EXP512 sets y = e^x for the 16 floats of x (kept), using t1, t2 and K1.
#define EXP512(x, y, t1, t2) \
	VCMPPS $5, Z27, x, K1; \
	VMINPS x, Z16, t1; \
	VMOVAPS Z18, t2; \
	VFMADD231PS Z17, t1, t2; \
	VSUBPS Z18, t2, t2; \
	VFMADD231PS Z19, t2, t1; \
	VFMADD231PS Z20, t2, t1; \
	VMOVAPS Z21, y; \
	VFMADD213PS Z22, t1, y; \
	VFMADD213PS Z23, t1, y; \
	VFMADD213PS Z24, t1, y; \
	VFMADD213PS Z25, t1, y; \
	VFMADD213PS Z26, t1, y; \
	VFMADD213PS Z26, t1, y; \
	VSCALEFPS.Z t2, y, K1, y

// func expAVX512(dst, src *float32, n int)
TEXT ·expAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	CONSTS512

loop:
	VMOVUPS (SI), Z0
	EXP512(Z0, Z1, Z2, Z3)
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func expSumAVX512(dst, src *float32, n int, shift float32, acc *[16]float64)
TEXT ·expSumAVX512(SB), NOSPLIT, $0-40
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVQ   n+16(FP), CX
	MOVSS  shift+24(FP), X0
	VBROADCASTSS X0, Z28
	MOVQ   acc+32(FP), DX
	VMOVUPD (DX), Z29
	VMOVUPD 64(DX), Z30
	CONSTS512

loop:
	VMOVUPS (SI), Z0
	VSUBPS  Z28, Z0, Z0
	EXP512(Z0, Z1, Z2, Z3)
	VMOVUPS Z1, (DI)
	VCVTPS2PD Y1, Z2
	VEXTRACTF64X4 $1, Z1, Y3
	VCVTPS2PD Y3, Z3
	VADDPD  Z2, Z29, Z29
	VADDPD  Z3, Z30, Z30
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VMOVUPD Z29, (DX)
	VMOVUPD Z30, 64(DX)
	VZEROUPPER
	RET

// func swigluAVX512(out, gate, up *float32, n int)
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	CONSTS512
	VBROADCASTSS C_SIGN, Z28

loop:
	VMOVUPS (SI), Z0
	VPXORD  Z28, Z0, Z4
	EXP512(Z4, Z1, Z2, Z3)
	VADDPS  Z26, Z1, Z1
	VDIVPS  Z1, Z26, Z1
	VMULPS  Z1, Z0, Z1
	VMULPS  (DX), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func swigluBackwardAVX512(dg, du, do, gate, up *float32, n int)
TEXT ·swigluBackwardAVX512(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R8
	MOVQ do+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX
	CONSTS512
	VBROADCASTSS C_SIGN, Z28
	VPXORD Z31, Z31, Z31

loop:
	VMOVUPS (SI), Z0
	VPXORD  Z28, Z0, Z4
	EXP512(Z4, Z1, Z2, Z3)
	VADDPS  Z26, Z1, Z2
	VDIVPS  Z2, Z26, Z2
	VMULPS  Z2, Z1, Z3
	VSUBPS  Z2, Z26, Z4
	VCMPPS  $13, Z31, Z0, K2
	VMOVAPS Z3, K2, Z4
	VFMADD213PS Z26, Z0, Z4
	VMULPS  Z2, Z0, Z5
	VMOVUPS (R9), Z6
	VMULPS  Z5, Z6, Z7
	VMULPS  (DX), Z6, Z8
	VMULPS  Z2, Z8, Z8
	VMULPS  Z4, Z8, Z8
	VMOVUPS Z8, (DI)
	VMOVUPS Z7, (R8)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, R9
	ADDQ    $64, DI
	ADDQ    $64, R8
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func dotAVX512(a, b *float32, n int) float32
TEXT ·dotAVX512(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VPXORD Z0, Z0, Z0
	CMPQ   CX, $16
	JLT    tail

loop:
	VMOVUPS (SI), Z1
	VMULPS  (DI), Z1, Z1
	VADDPS  Z1, Z0, Z0
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	CMPQ    CX, $16
	JGE     loop

tail:
	TESTQ CX, CX
	JZ    reduce
	MOVL  $1, AX
	SHLL  CX, AX
	DECL  AX
	KMOVW AX, K1
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DI), K1, Z2
	VMULPS Z2, Z1, Z1
	VADDPS Z1, Z0, Z0

reduce:
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func axpyAVX512(alpha float32, x, y *float32, n int)
TEXT ·axpyAVX512(SB), NOSPLIT, $0-32
	MOVSS alpha+0(FP), X0
	VBROADCASTSS X0, Z0
	MOVQ  x+8(FP), SI
	MOVQ  y+16(FP), DI
	MOVQ  n+24(FP), CX

loop:
	VMULPS  (SI), Z0, Z1
	VADDPS  (DI), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func scaleAVX512(alpha float32, x *float32, n int)
TEXT ·scaleAVX512(SB), NOSPLIT, $0-24
	MOVSS alpha+0(FP), X0
	VBROADCASTSS X0, Z0
	MOVQ  x+8(FP), DI
	MOVQ  n+16(FP), CX

loop:
	VMULPS  (DI), Z0, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func subMulAVX512(d *float32, s float32, p *float32, n int)
TEXT ·subMulAVX512(SB), NOSPLIT, $0-32
	MOVQ  d+0(FP), DI
	MOVSS s+8(FP), X0
	VBROADCASTSS X0, Z0
	MOVQ  p+16(FP), SI
	MOVQ  n+24(FP), CX

loop:
	VMOVUPS (DI), Z1
	VSUBPS  Z0, Z1, Z1
	VMULPS  (SI), Z1, Z1
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func maxAVX512(x *float32, n int) float32
TEXT ·maxAVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS C_NEGINF, Z0
	VMOVAPS Z0, Z1
	VMOVAPS Z0, Z2
	VMOVAPS Z0, Z3
	XORL  AX, AX
	KMOVW AX, K2
	CMPQ  CX, $64
	JLT   loop16

loop64:
	VMOVUPS (SI), Z4
	VMOVUPS 64(SI), Z5
	VMOVUPS 128(SI), Z6
	VMOVUPS 192(SI), Z7
	VCMPPS  $3, Z5, Z4, K1
	KORW    K1, K2, K2
	VCMPPS  $3, Z7, Z6, K1
	KORW    K1, K2, K2
	VMAXPS  Z0, Z4, Z0
	VMAXPS  Z1, Z5, Z1
	VMAXPS  Z2, Z6, Z2
	VMAXPS  Z3, Z7, Z3
	ADDQ    $256, SI
	SUBQ    $64, CX
	CMPQ    CX, $64
	JGE     loop64

loop16:
	TESTQ   CX, CX
	JZ      reduce
	VMOVUPS (SI), Z4
	VCMPPS  $3, Z4, Z4, K1
	KORW    K1, K2, K2
	VMAXPS  Z0, Z4, Z0
	ADDQ    $64, SI
	SUBQ    $16, CX
	JMP     loop16

reduce:
	KORTESTW K2, K2
	JNZ      nan
	VMAXPS   Z1, Z0, Z0
	VMAXPS   Z3, Z2, Z2
	VMAXPS   Z2, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS   Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS   X1, X0, X0
	VMOVHLPS X0, X0, X1
	VMAXPS   X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS   X1, X0, X0
	VZEROUPPER
	MOVSS    X0, ret+16(FP)
	RET

nan:
	VZEROUPPER
	MOVL $0x7fc00000, AX
	MOVL AX, ret+16(FP)
	RET

// ===== AVX2 =====
//
// Y15 holds 89 (a register because VMINPS takes memory only as its second
// source); the other constants are memory operands.

// EXP256 sets y = e^x for the 8 floats of x (kept), using t1, t2, t3
// and m.
#define EXP256(x, y, t1, t2, t3, m) \
	VCMPPS $5, C_FLUSH, x, m; \
	VMINPS x, Y15, t1; \
	VMOVUPS C_MAGIC, t2; \
	VFMADD231PS C_LOG2E, t1, t2; \
	VSUBPS C_MAGIC, t2, t3; \
	VPSUBD C_MAGIC, t2, t2; \
	VFMADD231PS C_NLN2HI, t3, t1; \
	VFMADD231PS C_NLN2LO, t3, t1; \
	VMOVUPS C_C6, y; \
	VFMADD213PS C_C5, t1, y; \
	VFMADD213PS C_C4, t1, y; \
	VFMADD213PS C_C3, t1, y; \
	VFMADD213PS C_C2, t1, y; \
	VFMADD213PS C_ONE, t1, y; \
	VFMADD213PS C_ONE, t1, y; \
	VPSRAD $1, t2, t3; \
	VPSUBD t3, t2, t2; \
	VPSLLD $23, t3, t3; \
	VPSLLD $23, t2, t2; \
	VPADDD C_ONE, t3, t3; \
	VPADDD C_ONE, t2, t2; \
	VMULPS t3, y, y; \
	VMULPS t2, y, y; \
	VANDPS m, y, y

// func expAVX2(dst, src *float32, n int)
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS C_89, Y15

loop:
	VMOVUPS (SI), Y0
	EXP256(Y0, Y1, Y2, Y3, Y4, Y5)
	VMOVUPS Y1, (DI)
	VMOVUPS 32(SI), Y6
	EXP256(Y6, Y7, Y8, Y9, Y10, Y11)
	VMOVUPS Y7, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func expSumAVX2(dst, src *float32, n int, shift float32, acc *[16]float64)
TEXT ·expSumAVX2(SB), NOSPLIT, $0-40
	MOVQ   dst+0(FP), DI
	MOVQ   src+8(FP), SI
	MOVQ   n+16(FP), CX
	MOVSS  shift+24(FP), X0
	VBROADCASTSS X0, Y14
	MOVQ   acc+32(FP), DX
	VMOVUPD (DX), Y10
	VMOVUPD 32(DX), Y11
	VMOVUPD 64(DX), Y12
	VMOVUPD 96(DX), Y13
	VBROADCASTSS C_89, Y15

loop:
	VMOVUPS (SI), Y0
	VSUBPS  Y14, Y0, Y0
	EXP256(Y0, Y1, Y2, Y3, Y4, Y5)
	VMOVUPS Y1, (DI)
	VCVTPS2PD X1, Y2
	VEXTRACTF128 $1, Y1, X3
	VCVTPS2PD X3, Y3
	VADDPD  Y2, Y10, Y10
	VADDPD  Y3, Y11, Y11
	VMOVUPS 32(SI), Y0
	VSUBPS  Y14, Y0, Y0
	EXP256(Y0, Y1, Y2, Y3, Y4, Y5)
	VMOVUPS Y1, 32(DI)
	VCVTPS2PD X1, Y2
	VEXTRACTF128 $1, Y1, X3
	VCVTPS2PD X3, Y3
	VADDPD  Y2, Y12, Y12
	VADDPD  Y3, Y13, Y13
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VMOVUPD Y10, (DX)
	VMOVUPD Y11, 32(DX)
	VMOVUPD Y12, 64(DX)
	VMOVUPD Y13, 96(DX)
	VZEROUPPER
	RET

// func swigluAVX2(out, gate, up *float32, n int)
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ out+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS C_89, Y15
	VBROADCASTSS C_ONE, Y14

loop:
	VMOVUPS (SI), Y0
	VXORPS  C_SIGN, Y0, Y6
	EXP256(Y6, Y1, Y2, Y3, Y4, Y5)
	VADDPS  Y14, Y1, Y1
	VDIVPS  Y1, Y14, Y1
	VMULPS  Y1, Y0, Y1
	VMULPS  (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JNZ     loop
	VZEROUPPER
	RET

// func swigluBackwardAVX2(dg, du, do, gate, up *float32, n int)
TEXT ·swigluBackwardAVX2(SB), NOSPLIT, $0-48
	MOVQ dg+0(FP), DI
	MOVQ du+8(FP), R8
	MOVQ do+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX
	VBROADCASTSS C_89, Y15
	VBROADCASTSS C_ONE, Y14
	VXORPS Y13, Y13, Y13

loop:
	VMOVUPS (SI), Y0
	VXORPS  C_SIGN, Y0, Y6
	EXP256(Y6, Y1, Y2, Y3, Y4, Y5)
	VADDPS  Y14, Y1, Y2
	VDIVPS  Y2, Y14, Y2
	VMULPS  Y2, Y1, Y3
	VSUBPS  Y2, Y14, Y4
	VCMPPS  $13, Y13, Y0, Y5
	VBLENDVPS Y5, Y3, Y4, Y4
	VFMADD213PS Y14, Y0, Y4
	VMULPS  Y2, Y0, Y5
	VMOVUPS (R9), Y6
	VMULPS  Y5, Y6, Y7
	VMULPS  (DX), Y6, Y8
	VMULPS  Y2, Y8, Y8
	VMULPS  Y4, Y8, Y8
	VMOVUPS Y8, (DI)
	VMOVUPS Y7, (R8)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, R9
	ADDQ    $32, DI
	ADDQ    $32, R8
	SUBQ    $8, CX
	JNZ     loop
	VZEROUPPER
	RET

// func dotAVX2(a, b *float32, n int) float32
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ   a+0(FP), SI
	MOVQ   b+8(FP), DI
	MOVQ   n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	CMPQ   CX, $16
	JLT    tail

loop:
	VMOVUPS (SI), Y2
	VMULPS  (DI), Y2, Y2
	VADDPS  Y2, Y0, Y0
	VMOVUPS 32(SI), Y3
	VMULPS  32(DI), Y3, Y3
	VADDPS  Y3, Y1, Y1
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	CMPQ    CX, $16
	JGE     loop

tail:
	TESTQ CX, CX
	JZ    reduce
	LEAQ  tailmask<>(SB), AX
	CMPQ  CX, $8
	JLT   low
	VMOVUPS (SI), Y2
	VMULPS  (DI), Y2, Y2
	VADDPS  Y2, Y0, Y0
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JZ      reduce
	MOVQ    $8, BX
	SUBQ    CX, BX
	VMOVDQU (AX)(BX*4), Y4
	VMASKMOVPS (SI), Y4, Y2
	VMASKMOVPS (DI), Y4, Y3
	VMULPS  Y3, Y2, Y2
	VADDPS  Y2, Y1, Y1
	JMP     reduce

low:
	MOVQ    $8, BX
	SUBQ    CX, BX
	VMOVDQU (AX)(BX*4), Y4
	VMASKMOVPS (SI), Y4, Y2
	VMASKMOVPS (DI), Y4, Y3
	VMULPS  Y3, Y2, Y2
	VADDPS  Y2, Y0, Y0

reduce:
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VMOVSHDUP X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func axpyAVX2(alpha float32, x, y *float32, n int)
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVSS alpha+0(FP), X0
	VBROADCASTSS X0, Y0
	MOVQ  x+8(FP), SI
	MOVQ  y+16(FP), DI
	MOVQ  n+24(FP), CX

loop:
	VMULPS  (SI), Y0, Y1
	VADDPS  (DI), Y1, Y1
	VMOVUPS Y1, (DI)
	VMULPS  32(SI), Y0, Y2
	VADDPS  32(DI), Y2, Y2
	VMOVUPS Y2, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func scaleAVX2(alpha float32, x *float32, n int)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVSS alpha+0(FP), X0
	VBROADCASTSS X0, Y0
	MOVQ  x+8(FP), DI
	MOVQ  n+16(FP), CX

loop:
	VMULPS  (DI), Y0, Y1
	VMOVUPS Y1, (DI)
	VMULPS  32(DI), Y0, Y2
	VMOVUPS Y2, 32(DI)
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func subMulAVX2(d *float32, s float32, p *float32, n int)
TEXT ·subMulAVX2(SB), NOSPLIT, $0-32
	MOVQ  d+0(FP), DI
	MOVSS s+8(FP), X0
	VBROADCASTSS X0, Y0
	MOVQ  p+16(FP), SI
	MOVQ  n+24(FP), CX

loop:
	VMOVUPS (DI), Y1
	VSUBPS  Y0, Y1, Y1
	VMULPS  (SI), Y1, Y1
	VMOVUPS Y1, (DI)
	VMOVUPS 32(DI), Y2
	VSUBPS  Y0, Y2, Y2
	VMULPS  32(SI), Y2, Y2
	VMOVUPS Y2, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JNZ     loop
	VZEROUPPER
	RET

// func maxAVX2(x *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS C_NEGINF, Y0
	VMOVAPS Y0, Y1
	VXORPS  Y6, Y6, Y6

loop:
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y3
	VCMPPS  $3, Y3, Y2, Y4
	VORPS   Y4, Y6, Y6
	VMAXPS  Y0, Y2, Y0
	VMAXPS  Y1, Y3, Y1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     loop
	VMOVMSKPS Y6, AX
	TESTL   AX, AX
	JNZ     nan
	VMAXPS  Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS  X1, X0, X0
	VMOVHLPS X0, X0, X1
	VMAXPS  X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS  X1, X0, X0
	VZEROUPPER
	MOVSS   X0, ret+16(FP)
	RET

nan:
	VZEROUPPER
	MOVL $0x7fc00000, AX
	MOVL AX, ret+16(FP)
	RET

// func widenBF16AVX512(dst *float32, src *uint16, n int)
// n a positive multiple of 16: each dst[i] = src[i] << 16.
TEXT ·widenBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

widen:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       widen
	VZEROUPPER
	RET

// func roundBF16AVX512(dst *uint16, src *float32, n int)
// n a positive multiple of 16: each dst[i] = (x + 0x7fff + (x>>16 & 1)) >> 16
// for x the bits of src[i], or (x >> 16) | 0x40 where src[i] is a NaN.
TEXT ·roundBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $1, AX
	VPBROADCASTD AX, Z10
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z11
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z12
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z13
	MOVL $0x40, AX
	VPBROADCASTD AX, Z14

round:
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z1
	VPANDD    Z10, Z1, Z2  // the kept half's last bit
	VPADDD    Z11, Z0, Z3
	VPADDD    Z2, Z3, Z3
	VPSRLD    $16, Z3, Z3  // rounded
	VPANDD    Z12, Z0, Z4
	VPCMPGTD  Z13, Z4, K1  // NaN: |x| above the infinity's bits
	VPORD     Z14, Z1, K1, Z3
	VPMOVDW   Z3, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       round
	VZEROUPPER
	RET
