package gemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/memtrain/memtrain/internal/stats"
	"github.com/memtrain/memtrain/internal/units"
)

// MaxShapeElements bounds the three matrices of a Shape that ParseShapes
// accepts (4 bytes an element): 2³¹ elements is 8 GiB.
const MaxShapeElements = 1 << 31

// A Shape is the size of a product C[M,N] = A[M,K]·B[K,N].
type Shape struct{ M, N, K int }

// ParseShapes reads a comma-separated list of shapes, each N for an
// N×N×N product or MxNxK, with positive sizes whose matrices together
// hold at most MaxShapeElements elements.
func ParseShapes(s string) ([]Shape, error) {
	items, err := units.SplitList(s)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errors.New("no shapes (want N or MxNxK, comma-separated)")
	}
	var shapes []Shape
	for _, item := range items {
		parts := strings.Split(strings.ToLower(item), "x")
		if len(parts) != 1 && len(parts) != 3 {
			return nil, fmt.Errorf("%q: want N or MxNxK", item)
		}
		var dims [3]int
		for i, p := range parts {
			v, err := strconv.Atoi(p)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("%q: want N or MxNxK with positive integers", item)
			}
			dims[i] = v
		}
		if len(parts) == 1 {
			dims[1], dims[2] = dims[0], dims[0]
		}
		m, n, k := float64(dims[0]), float64(dims[1]), float64(dims[2])
		if m*k+k*n+m*n > MaxShapeElements {
			return nil, fmt.Errorf("%q: the matrices would take more than %d GiB", item, MaxShapeElements*4>>30)
		}
		shapes = append(shapes, Shape{dims[0], dims[1], dims[2]})
	}
	return shapes, nil
}

// Flops is the floating-point operations of a product of shape s, 2·M·N·K.
func (s Shape) Flops() float64 { return 2 * float64(s.M) * float64(s.N) * float64(s.K) }

// A Probe times one Impl on products of one shape, one run at a time, on
// the same random matrices, so that its runs can be interleaved with other
// work — another Impl's runs (Compare), a training step — that then sees
// the same machine state.
type Probe struct {
	g        Impl
	s        Shape
	a, b, c  []float32
	a16, b16 []uint16 // a bf16 probe's operands (GemmBF16)
}

// NewProbe makes s's random matrices and runs g on them once, to warm up.
func NewProbe(g Impl, s Shape) *Probe {
	m, n, k := s.M, s.N, s.K
	rng := rand.New(rand.NewPCG(uint64(m), uint64(n)<<32|uint64(k)))
	fill := func(xs []float32) {
		for i := range xs {
			xs[i] = 2*rng.Float32() - 1
		}
	}
	p := &Probe{g: g, s: s, a: make([]float32, m*k), b: make([]float32, k*n), c: make([]float32, m*n)}
	fill(p.a)
	fill(p.b)
	p.Seconds()
	return p
}

// NewProbeBF16 is NewProbe for GemmBF16: the product of bf16 operands that
// mixed precision multiplies, their values NewProbe's cut to bf16 (the
// upper halves: random values need no rounding rule).
func NewProbeBF16(g Impl, s Shape) *Probe {
	p := NewProbe(g, s)
	cut := func(xs []float32) []uint16 {
		h := make([]uint16, len(xs))
		for i, v := range xs {
			h[i] = uint16(math.Float32bits(v) >> 16)
		}
		return h
	}
	p.a16, p.b16 = cut(p.a), cut(p.b)
	p.a, p.b = nil, nil
	p.Seconds()
	return p
}

// on returns a Probe of g on p's matrices, warmed up.
func (p *Probe) on(g Impl) *Probe {
	q := &Probe{g: g, s: p.s, a: p.a, b: p.b, c: p.c, a16: p.a16, b16: p.b16}
	q.Seconds()
	return q
}

// Seconds runs the product once and returns how long it took.
func (p *Probe) Seconds() float64 {
	m, n, k := p.s.M, p.s.N, p.s.K
	start := time.Now()
	if p.a16 != nil {
		GemmBF16(p.g, false, false, m, n, k, 1, p.a16, k, p.b16, n, 0, p.c, n)
	} else {
		p.g.Sgemm(false, false, m, n, k, 1, p.a, k, p.b, n, 0, p.c, n)
	}
	return time.Since(start).Seconds()
}

// switchPause is Compare's wait between runs of different Impls.
const switchPause = 200 * time.Millisecond

// GFLOPs measures g on a product of shape s on random matrices: one
// warm-up run, then 2·M·N·K over the median of repeat timed runs
// (repeat ≥ 1), in GFLOP/s.
func GFLOPs(g Impl, s Shape, repeat int) float64 { return Compare([]Impl{g}, s, repeat, nil)[0] }

// Compare measures each of impls as GFLOPs does, on the same matrices, with
// their timed runs interleaved — run i of every Impl before run i+1 of any
// — so that a shared machine's changing load falls on all of them alike
// and their ratio means something. Before each run of one Impl after
// another, Compare waits switchPause: OpenBLAS's threads spin for about
// 0.1 s after a call (and the Go path's team polls briefly), and would
// otherwise take the cores from whichever runs next. After the pause each
// Impl makes one untimed run before its timed one, so that what is timed
// is a product among others, as in a training step, and not the waking of
// idle threads and cores (which, measured on a 2-vCPU virtual machine,
// took 0.1–2 ms and slowed the first 1024³ product after a pause by up to
// half). progress, if not nil, is called after each round of timed runs.
func Compare(impls []Impl, s Shape, repeat int, progress func()) []float64 {
	if len(impls) == 0 {
		return nil
	}
	probes := []*Probe{NewProbe(impls[0], s)}
	for _, g := range impls[1:] {
		probes = append(probes, probes[0].on(g))
	}
	secs := make([][]float64, len(impls))
	for range max(1, repeat) {
		for j, p := range probes {
			if len(impls) > 1 {
				time.Sleep(switchPause)
				p.Seconds()
			}
			secs[j] = append(secs[j], p.Seconds())
		}
		if progress != nil {
			progress()
		}
	}
	out := make([]float64, len(impls))
	for j := range impls {
		out[j] = s.Flops() / stats.Median(secs[j]) / 1e9
	}
	return out
}
