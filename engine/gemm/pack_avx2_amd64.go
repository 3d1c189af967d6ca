//go:build amd64 && !purego

package gemm

import "golang.org/x/sys/cpu"

// transposeAVX2 packs rows (6 or 8) full source rows into that many lanes of
// a panel of w values a step, 8 k steps at a time: for p < 8·blocks and
// i < rows, dst[p·w+i] = alpha·src[i·ld+p]. It writes nothing else.
//
//go:noescape
func transposeAVX2(dst, src *float32, ld, blocks, w, rows int, alpha float32)

// packRows6AVX2 packs one full 6-wide panel whose k steps are contiguous in
// the source: for p < kc, i < 6, dst[p·6+i] = alpha·src[p·ld+i].
//
//go:noescape
func packRows6AVX2(dst, src *float32, ld, kc int, alpha float32)

// packRows6x4AVX2 packs four full 6-wide panels, ps values apart, in one
// pass over the source rows (whole cache lines of each): for q < 4, p < kc,
// i < 6, dst[q·ps+p·6+i] = alpha·src[p·ld+q·6+i].
//
//go:noescape
func packRows6x4AVX2(dst, src *float32, ld, kc, ps int, alpha float32)

// hasAVX2Pack reports whether the CPU runs the AVX2 packing routines: the
// AVX2 kernel's panels (A 6 wide, B 16 wide) on cores without AVX-512,
// where packing in Go cost about a fifth of a training step's GEMM time.
var hasAVX2Pack = cpu.X86.HasAVX2

// packColsAVX2 is packCols for full panels of the AVX2 kernel (w = n = 6,
// or w = n a multiple of 8), and reports whether it did the work.
func packColsAVX2(panel []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	rows := 8
	switch {
	case w == 6 && n == 6:
		rows = 6
	case w%8 == 0 && n == w:
	default:
		return false
	}
	blocks := kc / 8
	if blocks > 0 {
		_ = panel[(8*blocks-1)*w+w-1] // every step of the blocks is written
		_ = src[(n-1)*ld+8*blocks-1]  // and every row read up to them.
		for g := 0; g < n; g += rows {
			transposeAVX2(&panel[g], &src[g*ld], ld, blocks, w, rows, alpha)
		}
	}
	for p := 8 * blocks; p < kc; p++ {
		d := panel[p*w : p*w+n]
		for i := range d {
			d[i] = alpha * src[i*ld+p]
		}
	}
	return true
}

// packRowsAVX2 is packRows for the AVX2 kernel's 6-wide A panels, and
// reports whether it did the work.
func packRowsAVX2(dst []float32, w int, src []float32, ld, kc, n int, alpha float32) bool {
	if w != 6 || kc < 1 {
		return false
	}
	j := 0
	for ; j+24 <= n; j += 24 {
		_ = dst[j*kc+24*kc-1]
		_ = src[(kc-1)*ld+j+23]
		packRows6x4AVX2(&dst[j*kc], &src[j], ld, kc, 6*kc, alpha)
	}
	for ; j+6 <= n; j += 6 {
		_ = dst[j*kc+6*kc-1]   // the panel is written
		_ = src[(kc-1)*ld+j+5] // and its columns read in every row.
		packRows6AVX2(&dst[j*kc], &src[j], ld, kc, alpha)
	}
	if j < n {
		packRowsGo(dst[j*kc:], w, src[j:], ld, kc, n-j, alpha)
	}
	return true
}

// widenRowsBF16AVX2 packs panels full panels of w bf16 values a step (w a
// multiple of 16), ps values apart, in one pass over the source rows: for
// q < panels, p < kc, i < w, dst[q·ps+p·w+i] = src[p·ld+q·w+i] widened
// (VPMOVZXWD, then a 16-bit shift left).
//
//go:noescape
func widenRowsBF16AVX2(dst *float32, src *uint16, ld, kc, w, panels, ps int)

// transposeBF16AVX2 packs 8 full bf16 source rows into 8 lanes of a panel
// of w values a step, 8 k steps at a time: for p < 8·blocks and i < 8,
// dst[p·w+i] = src[i·ld+p] widened. It writes nothing else.
//
//go:noescape
func transposeBF16AVX2(dst *float32, src *uint16, ld, blocks, w int)

// packRowsBF16Fast does what packRowsBF16 does with AVX2, for panels a
// multiple of 16 wide (the AVX2 kernel's 16, the AVX-512 kernels' 32 and
// 16), and reports whether it did.
func packRowsBF16Fast(dst []float32, w int, src []uint16, ld, kc, n int) bool {
	if !hasAVX2Pack || w%16 != 0 || kc < 1 || n < 1 {
		return false
	}
	full := n / w
	if full > 0 {
		_ = dst[full*w*kc-1]        // every full panel is written
		_ = src[(kc-1)*ld+full*w-1] // and every row read up to them.
		widenRowsBF16AVX2(&dst[0], &src[0], ld, kc, w, full, w*kc)
	}
	if j := full * w; j < n {
		packRowsBF16Go(dst[j*kc:], w, src[j:], ld, kc, n-j)
	}
	return true
}

// packColsBF16Fast does what packColsBF16 does with AVX2, for full panels
// (n = w) a multiple of 8 wide, and reports whether it did.
func packColsBF16Fast(panel []float32, w int, src []uint16, ld, kc, n int) bool {
	if !hasAVX2Pack || w%8 != 0 || n != w || kc < 1 {
		return false
	}
	blocks := kc / 8
	if blocks > 0 {
		_ = panel[(8*blocks-1)*w+w-1] // every step of the blocks is written
		_ = src[(n-1)*ld+8*blocks-1]  // and every row read up to them.
		for g := 0; g < n; g += 8 {
			transposeBF16AVX2(&panel[g], &src[g*ld], ld, blocks, w)
		}
	}
	for p := 8 * blocks; p < kc; p++ {
		d := panel[p*w : p*w+n]
		for i := range d {
			d[i] = bf16ToFloat32(src[i*ld+p])
		}
	}
	return true
}
