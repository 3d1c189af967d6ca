package gemm

import "github.com/memtrain/memtrain/internal/team"

// When sgemm splits C into a row of rectangles or a column of them, every
// goroutine needs the whole of one operand: all of op(B) when they split
// the rows, all of op(A) when they split the columns. Packed by each, that
// operand is packed t times. rowsShared and colsShared pack it once, in
// blocks shared by the t goroutines: each packs its share of a block's
// panels into a buffer all of them read, waits at a barrier for the
// others' shares, and runs its own rectangle against the whole block. Two
// buffers alternate, so one barrier a block suffices: a goroutine that
// packs block s+2 into block s's buffer has passed barrier s+1, which none
// passes before it is done with block s.
//
// The blocks, the k slices and the kernels are those of region, so the
// result is bit-identical to it and to any thread count.

// rowsShared computes C on t goroutines that split its rows on kn's tile
// grid, sharing the packing of op(B).
func (g *goGEMM) rowsShared(kn *microKernel, t int, transA, transB bool, m, n, k int, alpha float32, a operandA, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) {
	mr, nr := kn.mr, kn.nr
	mt := ceilDiv(m, mr)
	hmax := ceilDiv(mt, t) * mr
	kcMax := evenBlock(k, kn.kc, 1)
	mcMax := evenBlock(hmax, kn.mc, mr)
	ncMax := evenBlock(n, kn.nc, nr)
	size := ncMax * kcMax
	sh := g.workspace(0, 2*size, 0)
	defer g.pool.Put(sh)
	bar := team.NewBarrier(t)
	g.parallel(t, func(w int) {
		i0, i1 := min(w*mt/t*mr, m), min((w+1)*mt/t*mr, m)
		ws := g.workspace(mcMax*kcMax, 0, mr*nr)
		defer g.pool.Put(ws)
		step := 0
		// Every goroutine takes the same steps, as many as the tallest
		// rectangle needs, so that all meet at every barrier.
		for ic := i0; ic < i0+hmax; ic += mcMax {
			mc := max(0, min(mcMax, i1-ic))
			for pc := 0; pc < k; pc += kcMax {
				kc := min(kcMax, k-pc)
				if mc > 0 {
					a.pack(ws.a, mr, transA, lda, ic, pc, mc, kc, alpha)
				}
				bet := sliceBeta(beta, pc)
				for jc := 0; jc < n; jc += ncMax {
					nc := min(ncMax, n-jc)
					buf := sh.b[step%2*size : step%2*size+size]
					step++
					if j0, j1 := share(w, t, nc, nr); j1 > j0 {
						b.pack(buf[j0*kc:], nr, transB, ldb, pc, jc+j0, kc, j1-j0)
					}
					bar.Wait()
					if mc > 0 {
						macro(kn, ws.tile, ws.a, buf, ic, mc, jc, nc, kc, c, ldc, bet)
					}
				}
			}
		}
	})
}

// colsShared computes C on t goroutines that split its columns on kn's
// tile grid, sharing the packing of op(A).
func (g *goGEMM) colsShared(kn *microKernel, t int, transA, transB bool, m, n, k int, alpha float32, a operandA, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) {
	mr, nr := kn.mr, kn.nr
	nt := ceilDiv(n, nr)
	kcMax := evenBlock(k, kn.kc, 1)
	mcMax := evenBlock(m, kn.mc, mr)
	ncMax := evenBlock(ceilDiv(nt, t)*nr, kn.nc, nr)
	size := mcMax * kcMax
	sh := g.workspace(0, 2*size, 0)
	defer g.pool.Put(sh)
	bar := team.NewBarrier(t)
	g.parallel(t, func(w int) {
		j0, j1 := min(w*nt/t*nr, n), min((w+1)*nt/t*nr, n)
		ws := g.workspace(0, ncMax*kcMax, mr*nr)
		defer g.pool.Put(ws)
		step := 0
		for ic := 0; ic < m; ic += mcMax {
			mc := min(mcMax, m-ic)
			for pc := 0; pc < k; pc += kcMax {
				kc := min(kcMax, k-pc)
				buf := sh.b[step%2*size : step%2*size+size]
				step++
				if r0, r1 := share(w, t, mc, mr); r1 > r0 {
					a.pack(buf[r0*kc:], mr, transA, lda, ic+r0, pc, r1-r0, kc, alpha)
				}
				bar.Wait()
				sweepB(kn, ws, buf, transB, b, ldb, pc, kc, ic, mc, j0, j1, ncMax, sliceBeta(beta, pc), c, ldc)
			}
		}
	})
}

// share returns goroutine w's part [lo, hi) of n values cut into panels of
// width p, whole panels each, among t goroutines.
func share(w, t, n, p int) (lo, hi int) {
	np := ceilDiv(n, p)
	return min(w*np/t*p, n), min((w+1)*np/t*p, n)
}
