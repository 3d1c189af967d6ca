//go:build amd64 && !purego

package gemm

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

//go:generate go run gen_kernels.go
//go:generate go run gen_skinny.go

// sgemmKernelAVX512 is the 12×32 AVX-512 micro-kernel: 24 zmm accumulators,
// two zmm rows of B and one broadcast of A per row.
//
//go:noescape
func sgemmKernelAVX512(k int, a, b, c *float32, ldc int, beta float32)

// sgemmKernelAVX512Narrow is the 24×16 AVX-512 micro-kernel for products
// at most 16 columns wide: 24 zmm accumulators, one zmm row of B, and A
// broadcast from memory by each FMA.
//
//go:noescape
func sgemmKernelAVX512Narrow(k int, a, b, c *float32, ldc int, beta float32)

// sgemmKernelAVX2 is the 6×16 AVX2+FMA micro-kernel: 12 ymm accumulators,
// two ymm rows of B and one broadcast of A per row.
//
//go:noescape
func sgemmKernelAVX2(k int, a, b, c *float32, ldc int, beta float32)

// bf16KernelAVX512 is the 12×32 AVX512_BF16 pair kernel: the AVX-512
// kernel's registers and steps, each step a pair of k values multiplied by
// VDPBF16PS (see pairs.go).
//
//go:noescape
func bf16KernelAVX512(k int, a, b, c *float32, ldc int, beta float32)

var (
	// Blocking for cores with 48 KiB of L1d and 2 MiB of L2 (Sapphire
	// Rapids and later): the 12×256 A panel takes 12 KiB of L1, the
	// 256×384 B block 384 KiB of L2, and the 2400×256 A block 2.4 MiB of
	// L3. Measured on such a core, the products reach 93–97% of the
	// kernel's peak from 256³ up, and neighbouring block sizes (kc 192–384,
	// nc 320–672, mc 1200–2400) are within the noise of one another.
	avx512Kernel = microKernel{
		name: "avx512", mr: 12, nr: 32,
		kc: 256, nc: 384, mc: 2400,
		fn:     sgemmKernelAVX512,
		narrow: &avx512NarrowKernel,
		dot:    &avx512Dot,
		axpy:   &avx512Axpy,
	}
	// The narrow kernel's 24×256 A panel takes 24 KiB of L1.
	avx512NarrowKernel = microKernel{
		name: "avx512-narrow", mr: 24, nr: 16,
		kc: 256, nc: 384, mc: 2400,
		fn: sgemmKernelAVX512Narrow,
	}
	// Blocking for AVX2 cores with 32 KiB of L1d and 256 KiB or more of
	// L2: the 6×256 A panel takes 6 KiB of L1, the 256×256 B block 256 KiB.
	avx2Kernel = microKernel{
		name: "avx2", mr: 6, nr: 16,
		kc: 256, nc: 256, mc: 1200,
		fn:  sgemmKernelAVX2,
		dot: &avx2Dot,
	}
)

// The pair kernel's blocks hold as many 32-bit words as the AVX-512
// kernel's, each word two bf16 values: a 256-pair k slice is 512 values.
var bf16AVX512Kernel = microKernel{
	name: "avx512-bf16", mr: 12, nr: 32,
	kc: 256, nc: 384, mc: 2400,
	fn: bf16KernelAVX512, pairs: true,
}

// cpuPairKernel is the pair kernel this CPU runs, nil without AVX512_BF16.
var cpuPairKernel = func() *microKernel {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		return &bf16AVX512Kernel
	}
	return nil
}()

// cpuKernels lists the micro-kernels this CPU runs, fastest first. It is
// computed once from the CPU's features and never changes.
var cpuKernels = func() []*microKernel {
	var ks []*microKernel
	if cpu.X86.HasAVX512F {
		ks = append(ks, &avx512Kernel)
	}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, &avx2Kernel)
	}
	return append(ks, &genericKernel)
}()

// transposeAVX512 packs up to 16 source rows into a 16-lane group of a
// panel: for p < kc, dst[p·w+i] = alpha·src[i·ld+p] for i < rows and 0 for
// rows ≤ i < lanes, where 1 ≤ rows ≤ lanes ≤ 16 and lanes ≤ w.
//
//go:noescape
func transposeAVX512(dst, src *float32, ld, kc, rows, lanes, w int, alpha float32)

// packRowsAVX512 packs one panel whose k steps are contiguous in the
// source: for p < kc, dst[p·w+i] = alpha·src[p·ld+i] for i < n and 0 for
// n ≤ i < w, where n ≤ w ≤ 32.
//
//go:noescape
func packRowsAVX512(dst, src *float32, ld, kc, n, w int, alpha float32)

// packRows4AVX512 packs four full panels of w ≤ 16 lanes in one pass over
// the source rows: for q < 4, p < kc, i < w,
// dst[q·ps+p·w+i] = alpha·src[p·ld+q·w+i].
//
//go:noescape
func packRows4AVX512(dst, src *float32, ld, kc, w, ps int, alpha float32)

// interleaveStepAVX512 packs one k step of pair panels from two source
// rows of n values: for panel q of w ≤ 32 lines, ps words apart,
// dst[q·ps+i] = lo[q·w+i] | hi[q·w+i]<<16 for i < min(w, n−q·w); n ≥ 1.
//
//go:noescape
func interleaveStepAVX512(dst *uint32, lo, hi *uint16, n, w, ps int)

// pairsDownFast does pairsDown's step q from rows lo and hi with AVX-512
// when the CPU has it, and reports whether it did.
func pairsDownFast(dst []uint32, w int, lo, hi []uint16, kc, q, n int) bool {
	if !hasAVX512Pack || w > 32 || n < 1 {
		return false
	}
	_ = dst[(n-1)/w*w*kc+q*w+(n-1)%w] // the last word written
	_, _ = lo[n-1], hi[n-1]
	interleaveStepAVX512(&dst[q*w], &lo[0], &hi[0], n, w, w*kc)
	return true
}

// pairsAlongFast does pairsAlong's full pairs (the first ⌊kv/2⌋ steps)
// with the AVX-512 transpose when the CPU has it and the pairs are words
// (an even stride from a 4-byte boundary), and reports whether it did.
// alpha 1 makes the transpose a pure shuffle of the 32-bit patterns.
func pairsAlongFast(panel []uint32, w int, src []uint16, ld, n, kv int) bool {
	full := kv / 2
	if !hasAVX512Pack || w > 32 || n < 1 || full < 1 || ld%2 != 0 || uintptr(unsafe.Pointer(&src[0]))%4 != 0 {
		return false
	}
	_ = panel[(full-1)*w+w-1]  // every step is written
	_ = src[(n-1)*ld+2*full-1] // and every line read up to its last pair.
	for g := 0; 16*g < n; g++ {
		transposeAVX512((*float32)(unsafe.Pointer(&panel[16*g])), (*float32)(unsafe.Pointer(&src[16*g*ld])),
			ld/2, full, min(16, n-16*g), min(16, w-16*g), w, 1)
	}
	return true
}

// hasAVX512Pack reports whether the CPU runs the AVX-512 packing routines
// (which also use BMI2 for their masks).
var hasAVX512Pack = cpu.X86.HasAVX512F && cpu.X86.HasBMI2

// packColsFast does what packCols does, for w ≤ 32, with AVX-512 when the
// CPU has it, and reports whether it did.
func packColsFast(panel []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	if !hasAVX512Pack && hasAVX2Pack && n >= 1 && kc >= 1 {
		return packColsAVX2(panel, w, src, ld, kc, n, alpha)
	}
	if !hasAVX512Pack || w > 32 || n < 1 || kc < 1 {
		return false
	}
	_ = panel[(kc-1)*w+w-1] // every step is written
	_ = src[(n-1)*ld+kc-1]  // and every row read up to kc.
	for g := 0; 16*g < n; g++ {
		transposeAVX512(&panel[16*g], &src[16*g*ld], ld, kc, min(16, n-16*g), min(16, w-16*g), w, alpha)
	}
	return true
}

// packRowsFast does what packRows does, for w ≤ 32, with AVX-512 when the
// CPU has it, and reports whether it did.
func packRowsFast(dst []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	if !hasAVX512Pack && hasAVX2Pack && n >= 1 {
		return packRowsAVX2(dst, w, src, ld, kc, n, alpha)
	}
	if !hasAVX512Pack || w > 32 || n < 1 || kc < 1 {
		return false
	}
	_ = dst[ceilDiv(n, w)*w*kc-1] // every panel is written
	_ = src[(kc-1)*ld+n-1]        // and every row read up to n.
	j := 0
	if w <= 16 {
		// Four narrow panels at a time: whole cache lines of each row.
		for ; j+4*w <= n; j += 4 * w {
			packRows4AVX512(&dst[j*kc], &src[j], ld, kc, w, w*kc, alpha)
		}
	}
	for ; j < n; j += w {
		packRowsAVX512(&dst[j*kc], &src[j], ld, kc, min(w, n-j), w, alpha)
	}
	return true
}
