package cpu

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// ropeDirect is RoPE by sign·θ with the angles evaluated row by row, as
// before the angle table (sign applied to the sine before it is rounded):
// the reference the table must equal bit for bit. The rotation is rope's
// own; the conformance suite checks it.
func ropeDirect(x []float32, ps []int32, fs []float32, sign float32) []float32 {
	half := len(fs)
	d := 2 * half
	heads := len(x) / (len(ps) * d)
	out := slices.Clone(x)
	cos, sin := make([]float32, half), make([]float32, half)
	for i, p := range ps {
		pf := float32(p)
		for j := range fs {
			s, c := math.Sincos(float64(float32(pf * fs[j])))
			cos[j], sin[j] = float32(c), float32(float64(sign)*s)
		}
		for h := range heads {
			rotate(out[(i*heads+h)*d:(i*heads+h+1)*d], cos, sin)
		}
	}
	return out
}

func invFreqs(half int, theta float64) []float32 {
	fs := make([]float32, half)
	for j := range fs {
		fs[j] = float32(1 / math.Pow(theta, float64(2*j)/float64(2*half)))
	}
	return fs
}

// TestRoPEAngleTable checks RoPE and RoPEBackward against ropeDirect, bit
// for bit, through the table's life on one backend: positions in and out
// of order, a table that grows, a second invFreq that replaces it (and the
// first that comes back), −0 against +0, positions past maxAngleRows and
// negative ones (evaluated per call), on 1 and 3 threads.
func TestRoPEAngleTable(t *testing.T) {
	const heads = 3
	a, c := invFreqs(8, 10000), invFreqs(8, 500000)
	negZero := slices.Clone(a)
	negZero[0] = float32(math.Copysign(0, -1))
	posZero := slices.Clone(a)
	posZero[0] = 0
	seq := func(lo, n int) []int32 {
		ps := make([]int32, n)
		for i := range ps {
			ps[i] = int32(lo + i%7*3 + i/7) // repeats and out of order
		}
		return ps
	}
	cases := []struct {
		name string
		ps   []int32
		fs   []float32
	}{
		{"first", seq(0, 40), a},
		{"grows", seq(900, 400), a},
		{"other invFreq", seq(0, 40), c},
		{"first again", seq(500, 40), a},
		{"+0", seq(0, 9), posZero},
		{"-0", seq(0, 9), negZero},
		{"past the table", []int32{maxAngleRows - 1, maxAngleRows, 1 << 30, 3}, a},
		{"negative", []int32{-5, 0, 7}, a},
		{"large in table", []int32{maxAngleRows - 1, maxAngleRows - 2, 0}, a},
	}
	for _, threads := range []int{1, 3} {
		be := New(Options{Threads: threads})
		rng := rand.New(rand.NewPCG(4, uint64(threads)))
		for _, tc := range cases {
			for _, sign := range []float32{1, -1} {
				x := randn(rng, len(tc.ps)*heads*2*len(tc.fs))
				xt := upload(be, x, len(tc.ps), heads, 2*len(tc.fs))
				pos := uploadInt(be, tc.ps, len(tc.ps))
				fs := upload(be, tc.fs, len(tc.fs))
				if sign > 0 {
					be.RoPE(xt, pos, fs)
				} else {
					be.RoPEBackward(xt, pos, fs)
				}
				if err := numtest.Equal(Float32s(xt), ropeDirect(x, tc.ps, tc.fs, sign)); err != nil {
					t.Fatalf("threads %d, %s, sign %v: %v", threads, tc.name, sign, err)
				}
				be.Free(xt)
				be.Free(pos)
				be.Free(fs)
			}
		}
	}
}

// TestRoPEConcurrent runs RoPE from several goroutines on one backend, with
// two invFreqs and growing positions, so that the table is replaced while
// others read it (run it with -race).
func TestRoPEConcurrent(t *testing.T) {
	be := New(Options{Threads: 2})
	freqs := [][]float32{invFreqs(4, 10000), invFreqs(4, 1e6)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(5, uint64(g)))
			for it := range 20 {
				fs := freqs[(g+it)%2]
				ps := make([]int32, 16)
				for i := range ps {
					ps[i] = int32(rng.IntN(64 << it % 5000))
				}
				x := randn(rng, len(ps)*2*2*len(fs))
				xt := upload(be, x, len(ps), 2, 2*len(fs))
				pos, ft := uploadInt(be, ps, len(ps)), upload(be, fs, len(fs))
				be.RoPE(xt, pos, ft)
				err := numtest.Equal(Float32s(xt), ropeDirect(x, ps, fs, 1))
				be.Free(xt)
				be.Free(pos)
				be.Free(ft)
				if err != nil {
					t.Errorf("goroutine %d, call %d: RoPE differs from the direct rotation: %v", g, it, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkRoPE rotates a step's queries of peer-tiny (batch 8 × 256
// positions, 4 heads of 64), forward and backward.
func BenchmarkRoPE(b *testing.B) {
	const B, T, heads, half = 8, 256, 4, 32
	be := New(Options{})
	rng := rand.New(rand.NewPCG(6, 6))
	x := upload(be, randn(rng, B*T*heads*2*half), B*T, heads, 2*half)
	ps := make([]int32, B*T)
	for i := range ps {
		ps[i] = int32(i % T)
	}
	pos, fs := uploadInt(be, ps, B*T), upload(be, invFreqs(half, 10000), half)
	b.SetBytes(2 * B * T * heads * 2 * half * 4)
	for b.Loop() {
		be.RoPE(x, pos, fs)
		be.RoPEBackward(x, pos, fs)
	}
}
