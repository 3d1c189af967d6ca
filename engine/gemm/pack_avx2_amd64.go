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
