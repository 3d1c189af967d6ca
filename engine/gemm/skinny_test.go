package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// skinnyFamilies returns the kernels whose skinny path is tested: every
// kernel of this CPU (and build) that has one.
func skinnyFamilies() []*microKernel {
	var ks []*microKernel
	for _, k := range cpuKernels {
		if k.dot != nil || k.axpy != nil {
			ks = append(ks, k)
		}
	}
	return ks
}

// hasSkinny reports whether kn's skinny path takes products with transB.
func hasSkinny(kn *microKernel, transB bool) bool {
	if transB {
		return kn.dot != nil
	}
	return kn.axpy != nil
}

// runSkinny computes p with the skinny path of g directly, failing the
// test if the path declines it.
func (p *problem) runSkinny(t *testing.T, g *goGEMM) []float32 {
	t.Helper()
	c := append([]float32(nil), p.c...)
	if !g.skinny(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc) {
		t.Fatalf("%s: %v: skinny path declined", g.kern.name, p)
	}
	return c
}

func TestSkinny(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	fams := skinnyFamilies()
	if testing.Short() {
		fams = fams[:1]
	}
	var gs []*goGEMM
	for i, kn := range fams {
		threads := []int{1, 2, 3}
		if i > 0 {
			threads = []int{1, 3}
		}
		for _, th := range threads {
			gs = append(gs, newGo(th, kn))
		}
	}
	ms := []int{1, 2, 3, 5, 8, 13, 16}
	ns := []int{1, 7, 33, 1000}
	ks := []int{1, 17, 384, 1031}
	count := 0
	for _, m := range ms {
		for _, n := range ns {
			for _, k := range ks {
				for ti := 0; ti < 4; ti++ {
					transA, transB := ti&1 != 0, ti&2 != 0
					sc := allScalars
					switch {
					case m*n*k > 1<<20:
						// One of the nine, a different one each time.
						sc = []scalars{allScalars[count%9]}
					case m*n*k > 1<<15:
						// Two of them.
						sc = []scalars{allScalars[count%9], allScalars[(count+4)%9]}
					}
					for _, s := range sc {
						count++
						p := newProblem(rng, transA, transB, m, n, k, s.alpha, s.beta, count%3*2)
						want, bound := p.want()
						for _, g := range gs {
							if !hasSkinny(g.kern, transB) {
								continue
							}
							name := fmt.Sprintf("skinny/%s/%d", g.kern.name, g.threads)
							p.check(t, name, p.runSkinny(t, g), want, bound)
						}
					}
					if t.Failed() {
						return
					}
				}
			}
		}
	}
}

// TestSkinnyDeterministic checks that the skinny path gives the same bits
// for any thread count, and that each element's arithmetic does not depend
// on the block shape: a product of m rows equals m products of one row
// each, bit for bit.
func TestSkinnyDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, kn := range skinnyFamilies() {
		for _, transB := range []bool{true, false} {
			if !hasSkinny(kn, transB) {
				continue
			}
			for _, sz := range [][3]int{{13, 1000, 1031}, {16, 517, 384}, {8, 2000, 384}, {5, 31, 77}, {1, 777, 100}} {
				m, n, k := sz[0], sz[1], sz[2]
				p := newProblem(rng, false, transB, m, n, k, 0.5, 0.25, 1)
				first := p.runSkinny(t, newGo(1, kn))
				for _, th := range []int{2, 3, 4, 7} {
					g := newGo(th, kn)
					for rep := 0; rep < 2; rep++ {
						if err := numtest.Equal(p.runSkinny(t, g), first); err != nil {
							t.Fatalf("%s: %v: %d threads, call %d: result differs from 1 thread: %v", kn.name, p, th, rep, err)
						}
					}
				}
				// Row by row.
				g := newGo(2, kn)
				for i := 0; i < m; i++ {
					q := *p
					q.m = 1
					q.a = p.a[i*p.lda:]
					q.c = p.c[i*p.ldc : i*p.ldc+n]
					if err := numtest.Equal(q.runSkinny(t, g), first[i*p.ldc:i*p.ldc+n]); err != nil {
						t.Fatalf("%s: %v: row %d alone differs from the whole product: %v", kn.name, p, i, err)
					}
				}
			}
		}
	}
}

// BenchmarkSkinny times the decoding shapes of a small Llama (batch 8,
// hidden 384, MLP 1024, vocabulary 32000) on the skinny path and, for
// comparison, the blocked path, reporting GFLOPS and the rate at which B
// is streamed.
func BenchmarkSkinny(b *testing.B) {
	for _, s := range []struct {
		transB  bool
		m, n, k int
	}{
		{true, 8, 32000, 384}, // the LM head
		{true, 8, 1024, 384},  // gate, up
		{true, 8, 384, 1024},  // down
		{true, 8, 384, 384},   // q, k, v, o
		{false, 8, 1024, 384},
		{false, 8, 384, 1024},
	} {
		for _, path := range []string{"skinny", "blocked"} {
			name := fmt.Sprintf("%s/transB=%v/%dx%dx%d", path, s.transB, s.m, s.n, s.k)
			b.Run(name, func(b *testing.B) {
				g := newGo(0, cpuKernels[0])
				g.noSkinny = path == "blocked"
				if !g.noSkinny && !hasSkinny(g.kern, s.transB) {
					b.Skip("no skinny kernel")
				}
				benchSgemm(b, g, false, s.transB, s.m, s.n, s.k)
				b.ReportMetric(4*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}

// BenchmarkSkinnyCrossover times m×n×k products for m around skinnyMaxM
// on both paths: the skinny path should win up to skinnyMaxM.
func BenchmarkSkinnyCrossover(b *testing.B) {
	for _, transB := range []bool{true, false} {
		for _, nk := range [][2]int{{1024, 384}, {384, 1024}, {4096, 4096}} {
			for _, m := range []int{1, 4, 8, 12, 16, 20, 24, 32} {
				for _, path := range []string{"skinny", "blocked"} {
					name := fmt.Sprintf("transB=%v/%dx%d/m=%d/%s", transB, nk[0], nk[1], m, path)
					b.Run(name, func(b *testing.B) {
						g := newGo(0, cpuKernels[0])
						g.noSkinny = path == "blocked"
						g.skinnyAny = !g.noSkinny
						if !g.noSkinny && !hasSkinny(g.kern, transB) {
							b.Skip("no skinny kernel")
						}
						benchSgemm(b, g, false, transB, m, nk[0], nk[1])
					})
				}
			}
		}
	}
}
