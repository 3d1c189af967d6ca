package gemm

import (
	"math"
	"sync"
	"time"
)

// kernelBench is one goroutine's operands for timing a micro-kernel alone:
// an mr×kc panel of A that stays in L1 and a kc×384 block of B that stays
// in L2, as in the blocked algorithm's inner loops, with C in L1.
type kernelBench struct {
	kn     *microKernel
	a, b   []float32
	c      []float32
	ncols  int
	kc     int
	panels int
}

func newKernelBench(kn *microKernel) *kernelBench {
	const kc, ncols = 256, 384
	kb := &kernelBench{kn: kn, kc: kc, ncols: ncols, panels: ncols / kn.nr,
		a: alignedFloats(kn.mr * kc), b: alignedFloats(kc * ncols), c: alignedFloats(kn.mr * ncols)}
	// Small values: a long run of accumulations stays finite and normal.
	// A pair kernel's words hold two bf16 values, each 1e-3's upper half.
	v := float32(1e-3)
	if kn.pairs {
		h := math.Float32bits(v) >> 16
		v = math.Float32frombits(h | h<<16)
	}
	for i := range kb.a {
		kb.a[i] = v
	}
	for i := range kb.b {
		kb.b[i] = v
	}
	return kb
}

// sweep runs the kernel once across the B block and returns the
// floating-point operations it did.
func (kb *kernelBench) sweep() float64 {
	kn := kb.kn
	for q := range kb.panels {
		kn.fn(kb.kc, &kb.a[0], &kb.b[q*kn.nr*kb.kc], &kb.c[q*kn.nr], kb.ncols, 1)
	}
	flops := 2 * float64(kn.mr*kn.nr*kb.kc*kb.panels)
	if kn.pairs {
		flops *= 2
	}
	return flops
}

// KernelPeak measures the micro-kernel of g, the Go path, alone on each of
// its threads at once for about d, on operands that stay in L1 and L2: the
// rate no product can beat on this CPU, in GFLOP/s (measured on a Zen 4
// core: 105.5, against 105.4 for a C loop of independent AVX-512 FMAs).
// With bf16 it measures the kernel of GemmBF16 instead: the pair kernel
// where the CPU has one (on 2 Zen 4 cores: about twice the float32 one),
// else the float32 kernel that multiplies the widened values. ok is false
// when g is not the Go path.
func KernelPeak(g Impl, d time.Duration, bf16 bool) (gflops float64, ok bool) {
	gg, ok := g.(*goGEMM)
	if !ok {
		return 0, false
	}
	kn := gg.kern
	if bf16 && gg.pairs != nil {
		kn = gg.pairs
	}
	flops := make([]float64, gg.threads)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range gg.threads {
		wg.Go(func() {
			kb := newKernelBench(kn)
			var f float64 // local: the goroutines' slots share cache lines
			for time.Since(start) < d {
				for range 16 {
					f += kb.sweep()
				}
			}
			flops[w] = f
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	var total float64
	for _, f := range flops {
		total += f
	}
	return total / secs / 1e9, true
}
