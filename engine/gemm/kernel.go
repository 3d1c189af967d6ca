package gemm

import "unsafe"

// kernelFunc is a register-blocked micro-kernel. It computes one mr×nr tile
//
//	C = A·B + beta·C
//
// from a packed A panel (k steps of mr values, alpha already applied) and a
// packed B panel (k steps of nr values). C is row-major with row stride ldc.
// With beta = 0 the kernel does not read C, so old NaNs do not leak. The
// accumulation order over k is fixed.
type kernelFunc func(k int, a, b, c *float32, ldc int, beta float32)

// microKernel is a micro-kernel with the cache blocking that suits it.
type microKernel struct {
	name   string
	mr, nr int // tile shape: rows of A per panel, columns of B per panel
	// kc is the depth of a packed block: an mr×kc A panel stays in L1
	// while it sweeps the packed B block.
	kc int
	// nc is the width of a packed B block, kc×nc, which stays in L2 while
	// the A panels of an mc block sweep it.
	nc int
	// mc is the height of a packed A block, mc×kc, which streams from L3.
	mc int
	fn kernelFunc
	// pairs marks a pair kernel (pairs.go): each k step of its panels is
	// a pair of bf16 values, two multiply-adds.
	pairs bool
	// narrow, if set, is a kernel with nr at most half this one's for
	// products no wider than its nr, which would waste at least half of
	// each of this kernel's tiles.
	narrow *microKernel
	// dot and axpy, if set, are the skinny path's kernels for transB and
	// not transB: see skinny.
	dot  *dotKernels
	axpy *axpyKernels
}

// genericKernel is the portable micro-kernel: a 4×4 tile in plain Go.
var genericKernel = microKernel{
	name: "generic", mr: 4, nr: 4,
	kc: 256, nc: 512, mc: 512,
	fn:  kernelGeneric4x4,
	dot: goDot,
}

// kernelGeneric4x4 is the pure-Go 4×4 micro-kernel.
func kernelGeneric4x4(k int, ap, bp, cp *float32, ldc int, beta float32) {
	const mr, nr = 4, 4
	a := unsafe.Slice(ap, k*mr)
	b := unsafe.Slice(bp, k*nr)
	var c00, c01, c02, c03 float32
	var c10, c11, c12, c13 float32
	var c20, c21, c22, c23 float32
	var c30, c31, c32, c33 float32
	for len(a) >= mr && len(b) >= nr {
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a, b = a[mr:], b[nr:]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
	}
	c := unsafe.Slice(cp, 3*ldc+nr)
	rows := [mr][nr]float32{
		{c00, c01, c02, c03},
		{c10, c11, c12, c13},
		{c20, c21, c22, c23},
		{c30, c31, c32, c33},
	}
	for i := range rows {
		row := c[i*ldc : i*ldc+nr : i*ldc+nr]
		switch beta {
		case 0:
			copy(row, rows[i][:])
		case 1:
			for j, v := range rows[i] {
				row[j] += v
			}
		default:
			for j, v := range rows[i] {
				row[j] = beta*row[j] + v
			}
		}
	}
}
