package vec

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestAdamW: every level gives the Go loop's bits, for lengths around the
// kernel's block of 8 and for values from tiny to huge (zero and subnormal
// gradients included).
func TestAdamW(t *testing.T) {
	c := &AdamWStep{Decay: 1 - 1e-3*0.1, B1: 0.9, A1: 1 - 0.9, B2: 0.999, A2: float32(1 - 0.999),
		StepSize: float32(-1e-3 / (1 - math.Pow(0.9, 3))), BC2Sqrt: float32(math.Sqrt(1 - math.Pow(0.999, 3))), Eps: 1e-8}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 8, 9, 16, 100, 1001} {
		p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range n {
			scale := float32(math.Pow(10, float64(rng.IntN(16)-8)))
			p[i] = (rng.Float32()*2 - 1) * scale
			g[i] = (rng.Float32()*2 - 1) * scale
			m[i] = (rng.Float32()*2 - 1) * scale * 0.1
			v[i] = rng.Float32() * scale * scale
			switch i % 11 {
			case 3:
				g[i] = 0
			case 5:
				g[i] = math.Float32frombits(1) // subnormal
			}
		}
		want := func() [4][]float32 {
			saved := level
			defer func() { level = saved }()
			level = levelGo
			w := [4][]float32{append([]float32(nil), p...), g, append([]float32(nil), m...), append([]float32(nil), v...)}
			AdamW(w[0], w[1], w[2], w[3], c)
			return w
		}()
		eachLevel(t, func(t *testing.T) {
			got := [4][]float32{append([]float32(nil), p...), g, append([]float32(nil), m...), append([]float32(nil), v...)}
			AdamW(got[0], got[1], got[2], got[3], c)
			for k, name := range []string{"p", "", "m", "v"} {
				if name == "" {
					continue // g, an input
				}
				if err := numtest.Equal(got[k], want[k]); err != nil {
					t.Fatalf("n=%d: %s against the Go loop: %v", n, name, err)
				}
			}
		})
	}
}
