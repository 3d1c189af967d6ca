package gemm

// Packing copies a block of an operand into the order the micro-kernel
// reads it: a sequence of panels, each k steps of a fixed number of values
// (mr for A, nr for B), zero-padded at the edge of the matrix. Two cases
// arise for either operand: the values of one k step are contiguous in the
// source (a strided copy of short rows) or they lie in different source
// rows (a transpose). Both go through fixed-size array pointers so that
// the compiler checks bounds once per group rather than per element.

// packA copies the mc×kc block of op(A) whose top-left element is at row i0,
// column p0 into dst, scaled by alpha, as ⌈mc/mr⌉ panels: panel q holds rows
// q·mr … q·mr+mr−1 of the block, k step by k step (mr values a step), so
// the micro-kernel reads it with unit stride. Rows past mc are zero.
//
// op(A) is A when transA is false (A is m×k with row stride lda) and Aᵀ
// when it is true (A is k×m).
func packA(dst []float32, mr int, transA bool, a []float32, lda, i0, p0, mc, kc int, alpha float32) {
	if transA {
		// Row p of the stored A holds column p of op(A): the mr values
		// of one k step are contiguous.
		packRows(dst, mr, a[p0*lda+i0:], lda, kc, mc, alpha)
		return
	}
	eachPanel(dst, mr, kc, mc, func(panel []float32, ir, rows int) {
		// Row i of op(A) is contiguous in A.
		packCols(panel, mr, a[(i0+ir)*lda+p0:], lda, kc, rows, alpha)
	})
}

// eachPanel calls f for each of the ⌈n/w⌉ panels of dst, kc steps of w
// values each, with the panel, its first line and its number of lines
// (w but for the last), the panel cleared first when it has fewer than w,
// so that its padding is zero.
func eachPanel(dst []float32, w, kc, n int, f func(panel []float32, r, lines int)) {
	for r := 0; r < n; r += w {
		lines := min(w, n-r)
		panel := dst[r*kc : r*kc+w*kc]
		if lines < w {
			clear(panel)
		}
		f(panel, r, lines)
	}
}

// packB copies the kc×nc block of op(B) whose top-left element is at row p0,
// column j0 into dst as ⌈nc/nr⌉ panels: panel q holds columns q·nr …
// q·nr+nr−1 of the block, k step by k step (nr values a step). Columns past
// nc are zero.
//
// op(B) is B when transB is false (B is k×n with row stride ldb) and Bᵀ
// when it is true (B is n×k).
func packB(dst []float32, nr int, transB bool, b []float32, ldb, p0, j0, kc, nc int) {
	if !transB {
		packRows(dst, nr, b[p0*ldb+j0:], ldb, kc, nc, 1)
		return
	}
	eachPanel(dst, nr, kc, nc, func(panel []float32, jr, cols int) {
		packCols(panel, nr, b[(j0+jr)*ldb+p0:], ldb, kc, cols, 1)
	})
}

// packRows packs kc source rows of stride ld, n values each, into
// ⌈n/w⌉ panels of kc steps of w values: step p of panel q gets
// src[p·ld+q·w : p·ld+q·w+w]·alpha, zero-padded past n.
func packRows(dst []float32, w int, src []float32, ld, kc, n int, alpha float32) {
	if !packRowsFast(dst, w, src, ld, kc, n, alpha) {
		packRowsGo(dst, w, src, ld, kc, n, alpha)
	}
}

// packRowsGo is packRows in portable Go.
func packRowsGo(dst []float32, w int, src []float32, ld, kc, n int, alpha float32) {
	full := n / w * w
	if rem := n - full; rem > 0 {
		clear(dst[full*kc : full*kc+w*kc])
	}
	for p := 0; p < kc; p++ {
		s := src[p*ld : p*ld+n]
		j := 0
		if alpha == 1 {
			switch w {
			case 32:
				for ; j < full; j += 32 {
					*(*[32]float32)(dst[j*kc+p*32:]) = *(*[32]float32)(s[j:])
				}
			case 16:
				for ; j < full; j += 16 {
					*(*[16]float32)(dst[j*kc+p*16:]) = *(*[16]float32)(s[j:])
				}
			case 12:
				for ; j < full; j += 12 {
					*(*[12]float32)(dst[j*kc+p*12:]) = *(*[12]float32)(s[j:])
				}
			}
		}
		for ; j < n; j += w {
			d := dst[j*kc+p*w : j*kc+p*w+min(w, n-j)]
			for i := range d {
				d[i] = alpha * s[j+i]
			}
		}
	}
}

// packCols fills panel (kc steps of w values) from n ≤ w source rows of
// stride ld, transposing: step p gets src[i·ld+p]·alpha for i < n. Its last
// w−n values must be zero: the caller clears the panel when n < w.
func packCols(panel []float32, w int, src []float32, ld, kc, n int, alpha float32) {
	if !packColsFast(panel, w, src, ld, kc, n, alpha) {
		packColsGo(panel, w, src, ld, kc, n, alpha)
	}
}

// packColsGo is packCols in portable Go.
func packColsGo(panel []float32, w int, src []float32, ld, kc, n int, alpha float32) {
	// Transpose blocks of 8 k steps × 4 rows: four source rows are read
	// with unit stride while the writes go to 8 consecutive steps.
	const bk = 8
	p := 0
	for ; p+bk <= kc; p += bk {
		d := panel[p*w : (p+bk)*w]
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 := (*[bk]float32)(src[i*ld+p:])
			s1 := (*[bk]float32)(src[(i+1)*ld+p:])
			s2 := (*[bk]float32)(src[(i+2)*ld+p:])
			s3 := (*[bk]float32)(src[(i+3)*ld+p:])
			for q := 0; q < bk; q++ {
				o := (*[4]float32)(d[q*w+i:])
				o[0], o[1], o[2], o[3] = alpha*s0[q], alpha*s1[q], alpha*s2[q], alpha*s3[q]
			}
		}
		for ; i < n; i++ {
			s := (*[bk]float32)(src[i*ld+p:])
			for q := 0; q < bk; q++ {
				d[q*w+i] = alpha * s[q]
			}
		}
	}
	for ; p < kc; p++ {
		d := panel[p*w : p*w+n]
		for i := range d {
			d[i] = alpha * src[i*ld+p]
		}
	}
}
