package vec

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// eachLevelB runs a benchmark once per implementation.
func eachLevelB(b *testing.B, f func(b *testing.B)) {
	saved := level
	defer func() { level = saved }()
	for _, l := range levels() {
		level = l
		b.Run(levelNames[l], f)
	}
}

func benchInputs(n int, lo, hi float32) []float32 {
	rng := rand.New(rand.NewPCG(9, 9))
	x := make([]float32, n)
	for i := range x {
		x[i] = lo + (hi-lo)*rng.Float32()
	}
	return x
}

// BenchmarkMathExp is the old way: math.Exp in float64 per element.
func BenchmarkMathExp(b *testing.B) {
	src := benchInputs(4096, -20, 5)
	dst := make([]float32, len(src))
	b.SetBytes(int64(4 * len(src)))
	for b.Loop() {
		for i, x := range src {
			dst[i] = float32(math.Exp(float64(x)))
		}
	}
}

func BenchmarkExp(b *testing.B) {
	src := benchInputs(4096, -20, 5)
	dst := make([]float32, len(src))
	eachLevelB(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			Exp(dst, src)
		}
	})
}

func BenchmarkExpSum(b *testing.B) {
	src := benchInputs(32000, -20, 5)
	dst := make([]float32, len(src))
	eachLevelB(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(src)))
		for b.Loop() {
			ExpSum(dst, src, 5)
		}
	})
}

func BenchmarkSwiGLU(b *testing.B) {
	g, u, d := benchInputs(4096, -8, 8), benchInputs(4096, -2, 2), benchInputs(4096, -2, 2)
	out, dg, du := make([]float32, len(g)), make([]float32, len(g)), make([]float32, len(g))
	eachLevelB(b, func(b *testing.B) {
		b.Run("forward", func(b *testing.B) {
			b.SetBytes(int64(4 * len(g)))
			for b.Loop() {
				SwiGLU(out, g, u)
			}
		})
		b.Run("backward", func(b *testing.B) {
			b.SetBytes(int64(4 * len(g)))
			for b.Loop() {
				SwiGLUBackward(dg, du, d, g, u)
			}
		})
	})
}

func BenchmarkDot(b *testing.B) {
	for _, n := range []int{64, 4096} {
		x, y := benchInputs(n, -1, 1), benchInputs(n, -1, 1)
		var sink float32
		eachLevelB(b, func(b *testing.B) {
			b.Run(strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				for b.Loop() {
					sink += Dot(x, y)
				}
			})
		})
	}
}

func BenchmarkAxpy(b *testing.B) {
	for _, n := range []int{64, 4096} {
		x, y := benchInputs(n, -1, 1), benchInputs(n, -1, 1)
		eachLevelB(b, func(b *testing.B) {
			b.Run(strconv.Itoa(n), func(b *testing.B) {
				b.SetBytes(int64(8 * n))
				for b.Loop() {
					Axpy(1e-3, x, y)
				}
			})
		})
	}
}

func BenchmarkMax(b *testing.B) {
	x := benchInputs(32000, -10, 10)
	var sink float32
	eachLevelB(b, func(b *testing.B) {
		b.SetBytes(int64(4 * len(x)))
		for b.Loop() {
			sink += Max(x)
		}
	})
}
