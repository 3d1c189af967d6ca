package gemm

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
)

// BenchmarkSgemm times n³ products with the Go path, gonum's reference
// and OpenBLAS when it loads, reporting GFLOPS. The Go path and OpenBLAS
// run on GOMAXPROCS threads: use -cpu 1,2 to compare thread counts.
//
// OpenBLAS's idle threads keep polling for a while after each call and
// slow whatever runs next on the same cores; for clean numbers time the
// implementations in separate runs, e.g. -bench 'Sgemm/go'. OpenBLAS picks
// its kernels from $OPENBLAS_CORETYPE when set.
func BenchmarkSgemm(b *testing.B) {
	impls := []func(testing.TB) Impl{
		func(testing.TB) Impl { return New(0) },
		func(testing.TB) Impl { return Reference{} },
		func(tb testing.TB) Impl { return openBLASOrSkip(tb, 0) },
	}
	names := []string{"go", "gonum", "openblas"}
	for i, newImpl := range impls {
		b.Run(names[i], func(b *testing.B) {
			g := newImpl(b)
			for _, n := range []int{256, 512, 1024, 2048} {
				b.Run(fmt.Sprint(n), func(b *testing.B) {
					benchSgemm(b, g, false, false, n, n, n)
				})
			}
		})
	}
}

// BenchmarkSgemmShapes times the Go path on the shapes of a small Llama's
// training step (4096 tokens, hidden 1024, MLP 2816) in the transposes the
// forward and backward passes use, and on the head of peer-tiny's step
// (2048 tokens, hidden 256, vocabulary 32000), three quarters of that
// step's GEMM time.
func BenchmarkSgemmShapes(b *testing.B) {
	g := New(0)
	for _, s := range []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"forward/x·Wᵀ", false, true, 4096, 2816, 1024},
		{"backward/dy·W", false, false, 4096, 1024, 2816},
		{"backward/dyᵀ·x", true, false, 2816, 1024, 4096},
		{"attention/q·kᵀ", false, true, 512, 512, 64},
		{"head/x·Wᵀ", false, true, 2048, 32000, 256},
		{"head/dy·W", false, false, 2048, 256, 32000},
		{"head/dyᵀ·x", true, false, 32000, 256, 2048},
	} {
		b.Run(s.name, func(b *testing.B) {
			benchSgemm(b, g, s.transA, s.transB, s.m, s.n, s.k)
		})
	}
}

// BenchmarkGemmBF16B compares, in one run, a 1024³ product by a float32 B
// with the same product by a bf16 B (widened while packed), on the Go path
// with GOMAXPROCS threads, for a weight W as the model uses it: forward
// x·Wᵀ (transB) and the input gradient dy·W. Each iteration runs both, one
// after the other, so that a shared machine's load falls on both alike;
// it reports both rates and their ratio.
func BenchmarkGemmBF16B(b *testing.B) {
	const n = 1024
	g := New(0)
	rng := rand.New(rand.NewPCG(1, 1))
	a, _ := randMatrix(rng, n*n, 1, 0, 1)
	w32, _ := randMatrix(rng, n*n, 1, 0, 1)
	w := make([]uint16, len(w32))
	for i, v := range w32 {
		w[i] = checkpoints.Float32ToBF16(v)
		w32[i] = checkpoints.BF16ToFloat32(w[i])
	}
	c := make([]float32, n*n)
	for _, transB := range []bool{true, false} {
		name := "forward/x·Wᵀ"
		if !transB {
			name = "backward/dy·W"
		}
		b.Run(name, func(b *testing.B) {
			g.Sgemm(false, transB, n, n, n, 1, a, n, w32, n, 0, c, n)
			SgemmBF16B(g, false, transB, n, n, n, 1, a, n, w, n, 0, c, n)
			var f32, bf16 time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				g.Sgemm(false, transB, n, n, n, 1, a, n, w32, n, 0, c, n)
				mid := time.Now()
				SgemmBF16B(g, false, transB, n, n, n, 1, a, n, w, n, 0, c, n)
				f32, bf16 = f32+mid.Sub(start), bf16+time.Since(mid)
			}
			flops := 2 * float64(n) * n * n * float64(b.N)
			b.ReportMetric(flops/f32.Seconds()/1e9, "f32-GFLOPS")
			b.ReportMetric(flops/bf16.Seconds()/1e9, "bf16-GFLOPS")
			b.ReportMetric(f32.Seconds()/bf16.Seconds(), "bf16/f32-speed")
		})
	}
}

// BenchmarkGemmBF16 compares, in one run, GemmBF16 (both operands bf16:
// the pair kernel where this CPU has AVX512_BF16) with Sgemm on the same
// values in float32, on the Go path with GOMAXPROCS threads, for the
// shapes of peer-tiny's training step (2048 tokens, hidden 256, MLP 688,
// vocabulary 32000) and 1024³. Each iteration runs both, one after the
// other, so that a shared machine's load falls on both alike; it reports
// both rates and their ratio.
func BenchmarkGemmBF16(b *testing.B) {
	g := New(0)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, s := range []struct {
		name           string
		transA, transB bool
		m, n, k        int
	}{
		{"1024³", false, false, 1024, 1024, 1024},
		{"mlp/x·Wᵀ", false, true, 2048, 688, 256},
		{"mlp/dy·W", false, false, 2048, 256, 688},
		{"mlp/dyᵀ·x", true, false, 688, 256, 2048},
		{"head/x·Wᵀ", false, true, 2048, 32000, 256},
		{"head/dy·W", false, false, 2048, 256, 32000},
		{"head/dyᵀ·x", true, false, 32000, 256, 2048},
	} {
		b.Run(s.name, func(b *testing.B) {
			m, n, k := s.m, s.n, s.k
			a32, _ := randMatrix(rng, m*k, 1, 0, 1)
			b32, _ := randMatrix(rng, k*n, 1, 0, 1)
			a16, b16 := toBF16(a32), toBF16(b32)
			a32, b32 = widened(a16), widened(b16)
			c := make([]float32, m*n)
			lda, ldb := k, n
			if s.transA {
				lda = m
			}
			if s.transB {
				ldb = k
			}
			var f32, bf16 time.Duration
			for i := -1; i < b.N; i++ { // one untimed round first
				start := time.Now()
				g.Sgemm(s.transA, s.transB, m, n, k, 1, a32, lda, b32, ldb, 0, c, n)
				mid := time.Now()
				GemmBF16(g, s.transA, s.transB, m, n, k, 1, a16, lda, b16, ldb, 0, c, n)
				if i >= 0 {
					f32, bf16 = f32+mid.Sub(start), bf16+time.Since(mid)
				}
			}
			flops := 2 * float64(m) * float64(n) * float64(k) * float64(b.N)
			b.ReportMetric(flops/f32.Seconds()/1e9, "f32-GFLOPS")
			b.ReportMetric(flops/bf16.Seconds()/1e9, "bf16-GFLOPS")
			b.ReportMetric(f32.Seconds()/bf16.Seconds(), "bf16/f32-speed")
		})
	}
}

func benchSgemm(b *testing.B, g Impl, transA, transB bool, m, n, k int) {
	rng := rand.New(rand.NewPCG(1, 1))
	a, _ := randMatrix(rng, m*k, 1, 0, 1)
	bm, _ := randMatrix(rng, k*n, 1, 0, 1)
	c := make([]float32, m*n)
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	g.Sgemm(transA, transB, m, n, k, 1, a, lda, bm, ldb, 0, c, n)
	b.ResetTimer()
	for range b.N {
		g.Sgemm(transA, transB, m, n, k, 1, a, lda, bm, ldb, 0, c, n)
	}
	b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}

// BenchmarkKernel measures each micro-kernel alone on panels that stay in
// L1 (A) and L2 (B): the ceiling of the blocked algorithm.
func BenchmarkKernel(b *testing.B) {
	var kernels []*microKernel
	for _, kn := range cpuKernels {
		kernels = append(kernels, kn)
		if kn.narrow != nil {
			kernels = append(kernels, kn.narrow)
		}
	}
	for _, kn := range kernels {
		b.Run(kn.name, func(b *testing.B) {
			kb := newKernelBench(kn)
			var flops float64
			for range b.N {
				flops += kb.sweep()
			}
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}

// BenchmarkKernelParallel runs the kernel benchmark on every thread at
// once: the rate KernelPeak measures.
func BenchmarkKernelParallel(b *testing.B) {
	var mu sync.Mutex
	var flops float64
	b.RunParallel(func(pb *testing.PB) {
		kb := newKernelBench(cpuKernels[0])
		var f float64
		for pb.Next() {
			f += kb.sweep()
		}
		mu.Lock()
		flops += f
		mu.Unlock()
	})
	b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOPS")
}

// BenchmarkPack measures packing a 2048×2048 operand the way the blocked
// algorithm does, block by block.
func BenchmarkPack(b *testing.B) {
	const n = 2048
	src := make([]float32, n*n)
	for i := range src {
		src[i] = float32(i)
	}
	kn := cpuKernels[0]
	for _, trans := range []bool{false, true} {
		b.Run(fmt.Sprintf("A/trans=%v", trans), func(b *testing.B) {
			dst := alignedFloats(ceilDiv(n, kn.mr) * kn.mr * kn.kc)
			for range b.N {
				for pc := 0; pc < n; pc += kn.kc {
					kc := min(kn.kc, n-pc)
					packA(dst, kn.mr, trans, src, n, 0, pc, n, kc, 1)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(n*n), "ns/elem")
		})
		b.Run(fmt.Sprintf("B/trans=%v", trans), func(b *testing.B) {
			dst := alignedFloats(ceilDiv(kn.nc, kn.nr) * kn.nr * kn.kc)
			for range b.N {
				for pc := 0; pc < n; pc += kn.kc {
					kc := min(kn.kc, n-pc)
					for jc := 0; jc < n; jc += kn.nc {
						packB(dst, kn.nr, trans, src, n, pc, jc, kc, min(kn.nc, n-jc))
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(n*n), "ns/elem")
		})
	}
}
