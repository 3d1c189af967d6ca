// Package vec is the float32 vector math under the CPU backend's kernels:
// the exponential and what is built on it (softmax numerators with their
// sum, SwiGLU and its gradient), dot products, axpy, scaling and maxima,
// and the conversions between float32 and bfloat16 (bf16.go).
//
// On amd64 the loops run in AVX-512 or AVX2+FMA assembly, chosen once at
// start-up from the CPU's features; elsewhere, or built with the purego
// tag, plain Go computes the same functions. The environment variable
// MEMTRAIN_VEC=avx2 or MEMTRAIN_VEC=go selects a lesser implementation
// (to compare them, or to rule the assembly out); Impl reports the one in
// use.
//
// # Determinism
//
// Every function is a fixed sequence of float32 operations per element or,
// for reductions, a fixed summation order that depends only on the length
// of the input, never on its alignment, on where a slice starts within a
// larger array, or on how a caller splits its work. An elementwise function
// gives each element the same bits whether that element falls in the
// vector body or in the tail of a call, so a kernel that splits a tensor
// into chunks at any boundary gets the same result.
//
// Dot, Axpy, Scale, SubMul and Max are bit-identical on all three paths
// (AVX-512, AVX2, Go): they use no fused multiply-add and the Go code
// reproduces the lanes of the assembly. Exp and the functions built on it
// are bit-identical between AVX-512 and AVX2 (the same polynomial and FMA
// sequence, and the same single rounding when scaling by 2ⁿ); the Go path
// rounds the float64 math.Exp instead and may differ from them by an ulp.
//
// # Exp
//
// e^x is computed as 2ⁿ·e^r with n = round(x·log₂e) and r = x − n·ln2,
// the product n·ln2 subtracted in two FMA steps (ln2 split into float32
// high and low parts; the first step is exact). e^r on |r| ≤ ln2/2 is a
// degree-6 polynomial with 1 + r fixed and the other coefficients fitted
// (Remez) for relative error 4.3e-9, evaluated by Horner's rule with FMAs.
// Over all 2³² float32 inputs the result is within 0.92 ulp of e^x (the
// tests measure it against math.Exp; see TestExpAccuracy).
//
// Special values: NaN gives NaN, +Inf and every x ≥ 88.72284 (where e^x
// rounds past the largest float32) give +Inf, and −Inf gives +0.
//
// Underflow is flushed: Exp gives +0 for every x < ExpFlush ≈ −87.33654,
// where e^x < 2⁻¹²⁶, the smallest normal float32, and it never returns a
// subnormal. The absolute error is then below 1.2e-38, far below anything
// a softmax or a sigmoid can see; in exchange the exponential never pays
// a microcode assist (on x86 every instruction that yields a subnormal
// does), which a softmax over a peaked distribution would otherwise pay on
// thousands of elements of a row.
package vec

import (
	"math"
)

// ExpFlush is the least x for which Exp returns a nonzero result: the
// float32 just above −126·ln2. Below it e^x < 2⁻¹²⁶ and Exp gives +0.
var ExpFlush = math.Float32frombits(0xc2aeac4f) // −87.33654022216797

// Implementation levels. level is the one in use; the tests switch it to
// check every path the machine can run.
const (
	levelGo = iota
	levelAVX2
	levelAVX512
)

var levelNames = [...]string{levelGo: "go", levelAVX2: "avx2", levelAVX512: "avx512"}

// Impl names the implementation in use: "avx512", "avx2" or "go".
func Impl() string { return levelNames[level] }

// block is the number of elements the exponential kernels take at once;
// their assembly handles multiples of it, and the tails go through a
// padded block so that every element meets the same instructions.
const block = 16

// Exp sets dst[i] = e^src[i] for every i < len(src). dst must be at least
// as long as src; it may be src itself (not a partial overlap).
func Exp(dst, src []float32) {
	n := len(src)
	if n == 0 {
		return
	}
	dst = dst[:n]
	if level == levelGo {
		for i, x := range src {
			dst[i] = exp1(x)
		}
		return
	}
	body := n &^ (block - 1)
	if body > 0 {
		expBlocks(&dst[0], &src[0], body)
	}
	if body < n {
		var buf [block]float32
		copy(buf[:], src[body:])
		expBlocks(&buf[0], &buf[0], block)
		copy(dst[body:], buf[:])
	}
}

// ExpSum sets dst[i] = e^(src[i] − shift), the difference rounded to
// float32 first, and returns Σ dst[i] accumulated in float64: element i
// is added into lane i mod 16, in order, and the 16 lanes are then summed
// pairwise, lane k with lane k+8, then k+4, k+2 and k+1. dst may be src
// itself.
//
// With shift the maximum of src this is the numerator of a softmax and
// its denominator, neither of which can overflow.
func ExpSum(dst, src []float32, shift float32) float64 {
	n := len(src)
	var acc [block]float64
	if n == 0 {
		return 0
	}
	dst = dst[:n]
	if level == levelGo {
		for i, x := range src {
			e := exp1(x - shift)
			dst[i] = e
			acc[i%block] += float64(e)
		}
		return sumLanes(&acc)
	}
	body := n &^ (block - 1)
	if body > 0 {
		expSumBlocks(&dst[0], &src[0], body, shift, &acc)
	}
	if body < n {
		// The tail's differences are taken here (a float32 subtraction,
		// as the assembly does) and only its real elements are summed.
		var buf [block]float32
		for i, x := range src[body:] {
			buf[i] = x - shift
		}
		expBlocks(&buf[0], &buf[0], block)
		for i := range n - body {
			dst[body+i] = buf[i]
			acc[i] += float64(buf[i])
		}
	}
	return sumLanes(&acc)
}

// sumLanes adds the 16 lanes of ExpSum pairwise: k + k+8, k + k+4,
// k + k+2, k + k+1.
func sumLanes(acc *[block]float64) float64 {
	for w := block / 2; w >= 1; w /= 2 {
		for k := range w {
			acc[k] += acc[k+w]
		}
	}
	return acc[0]
}

// exp1 is the Go path's e^x: math.Exp rounded to float32, flushed to zero
// below ExpFlush as the assembly is.
func exp1(x float32) float32 {
	if x < ExpFlush {
		return 0
	}
	return float32(math.Exp(float64(x)))
}

// SwiGLU sets out[i] = silu(gate[i])·up[i], silu(x) = x·σ(x) with
// σ(x) = 1/(1 + e^−x), for every i < len(gate). out may be gate or up
// itself.
//
// The assembly computes e = Exp(−g), s = 1/(1+e) (a division, correctly
// rounded) and out = (g·s)·u in float32; a gate below −88.7 makes e
// infinite and s exactly 0, one above 87.3 makes e zero and s exactly 1.
// The Go path computes each element in float64 and rounds once.
func SwiGLU(out, gate, up []float32) {
	n := len(gate)
	if n == 0 {
		return
	}
	out, up = out[:n], up[:n]
	if level == levelGo {
		for i, g := range gate {
			out[i] = float32(float64(g) * sigmoid64(g) * float64(up[i]))
		}
		return
	}
	body := n &^ (block - 1)
	if body > 0 {
		swigluBlocks(&out[0], &gate[0], &up[0], body)
	}
	if body < n {
		var o, g, u [block]float32
		copy(g[:], gate[body:])
		copy(u[:], up[body:])
		swigluBlocks(&o[0], &g[0], &u[0], block)
		copy(out[body:], o[:])
	}
}

// SwiGLUBackward sets, for every i < len(gate),
//
//	dUp[i]   = dOut[i]·silu(gate[i])
//	dGate[i] = dOut[i]·up[i]·σ(gate[i])·(1 + gate[i]·(1 − σ(gate[i])))
//
// the last factor being silu's derivative over σ. dGate may be gate, and
// dUp up or dOut, itself: each element is read before it is written.
//
// The assembly computes, in float32, e = Exp(−g), s = 1/(1+e), and
// 1 − s as e·s for g ≥ 0 (where 1 − s would cancel) and as 1 − s for
// g < 0 (where e may be infinite); then silu = g·s, dUp = d·silu and
// dGate = ((d·u)·s)·(1 + g·(1−s)), the last factor by one FMA. The Go
// path computes each element in float64 and rounds once.
func SwiGLUBackward(dGate, dUp, dOut, gate, up []float32) {
	n := len(gate)
	if n == 0 {
		return
	}
	dGate, dUp, dOut, up = dGate[:n], dUp[:n], dOut[:n], up[:n]
	if level == levelGo {
		for i, g := range gate {
			x, y, d := float64(g), float64(up[i]), float64(dOut[i])
			s := sigmoid64(g)
			dGate[i] = float32(d * y * s * (1 + x*(1-s)))
			dUp[i] = float32(d * x * s)
		}
		return
	}
	body := n &^ (block - 1)
	if body > 0 {
		swigluBackwardBlocks(&dGate[0], &dUp[0], &dOut[0], &gate[0], &up[0], body)
	}
	if body < n {
		var dg, du, d, g, u [block]float32
		copy(d[:], dOut[body:])
		copy(g[:], gate[body:])
		copy(u[:], up[body:])
		swigluBackwardBlocks(&dg[0], &du[0], &d[0], &g[0], &u[0], block)
		copy(dGate[body:], dg[:])
		copy(dUp[body:], du[:])
	}
}

// sigmoid64 is 1/(1+e^−x) in float64, which neither overflows nor loses
// precision for float32 inputs.
func sigmoid64(x float32) float64 { return 1 / (1 + math.Exp(-float64(x))) }

// Dot returns Σ a[i]·b[i] over i < len(a); b must be at least as long.
// Each product is rounded to float32 (no fused multiply-add) and added
// into lane i mod 16, in order; the 16 lanes are then summed pairwise,
// lane k with lane k+8, then k+4, k+2 and k+1. Every path gives the
// same bits.
func Dot(a, b []float32) float32 {
	n := len(a)
	if n == 0 {
		return 0
	}
	b = b[:n]
	if level != levelGo {
		return dotKernel(&a[0], &b[0], n)
	}
	var acc [16]float32
	i := 0
	for ; i+16 <= n; i += 16 {
		x, y := a[i:i+16:i+16], b[i:i+16:i+16]
		for k := range acc {
			acc[k] += float32(x[k] * y[k])
		}
	}
	for k, x := range a[i:] {
		acc[k] += float32(x * b[i+k])
	}
	for w := 8; w >= 1; w /= 2 {
		for k := range w {
			acc[k] += acc[k+w]
		}
	}
	return acc[0]
}

// Axpy sets y[i] += alpha·x[i] for every i < len(x), the product rounded
// to float32 before the addition (no fused multiply-add, so every path
// gives the same bits).
func Axpy(alpha float32, x, y []float32) {
	n := len(x)
	y = y[:n]
	body := 0
	if level != levelGo && n >= block {
		body = n &^ (block - 1)
		axpyKernel(alpha, &x[0], &y[0], body)
	}
	for i := body; i < n; i++ {
		y[i] += float32(alpha * x[i])
	}
}

// Scale sets x[i] *= alpha for every i.
func Scale(alpha float32, x []float32) {
	n := len(x)
	body := 0
	if level != levelGo && n >= block {
		body = n &^ (block - 1)
		scaleKernel(alpha, &x[0], body)
	}
	for i := body; i < n; i++ {
		x[i] *= alpha
	}
}

// SubMul sets d[i] = (d[i] − s)·p[i] for every i < len(d), each operation
// rounded to float32: the softmax gradient dS = P⊙(dP − rowsum(dP⊙P)).
func SubMul(d []float32, s float32, p []float32) {
	n := len(d)
	p = p[:n]
	body := 0
	if level != levelGo && n >= block {
		body = n &^ (block - 1)
		subMulKernel(&d[0], s, &p[0], body)
	}
	for i := body; i < n; i++ {
		d[i] = (d[i] - s) * p[i]
	}
}

// Max returns the largest element of x, NaN if x holds a NaN, and −Inf if
// x is empty. Between +0 and −0 it may return either.
func Max(x []float32) float32 {
	n := len(x)
	m := float32(math.Inf(-1))
	body := 0
	if level != levelGo && n >= block {
		body = n &^ (block - 1)
		m = maxKernel(&x[0], body)
		if m != m {
			return m
		}
	}
	for _, v := range x[body:] {
		if v != v {
			return v
		}
		if v > m {
			m = v
		}
	}
	return m
}
