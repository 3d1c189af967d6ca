package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestRoundStochasticUnbiased: over all 2¹⁶ random bits, the rounding of
// x averages to x exactly (the sum of 65,536 bfloat16s is exact in
// float64), for values inside a binade, at its top (where rounding up
// crosses into the next), negative, subnormal and already bfloat16.
func TestRoundStochasticUnbiased(t *testing.T) {
	for _, u := range []uint32{0x3f80_1234, 0x3fff_ff00, 0xbe12_8001, 0x0000_0003, 0x4040_0000, 0x7f7e_0001} {
		x := math.Float32frombits(u)
		sum := 0.0
		for r := range 1 << 16 {
			sum += float64(math.Float32frombits(uint32(engine.RoundStochastic(x, uint16(r))) << 16))
		}
		if mean := sum / (1 << 16); mean != float64(x) {
			t.Errorf("%#08x: stochastic roundings average %v, want %v", u, mean, x)
		}
	}
}

// TestAdamWStepBF16MomentsAnyShards: AdamWStep with BF16 moments rounds
// each element alike however the parameter is cut — X column blocks, Y
// row blocks, Z flat chunks of a block, ZeRO chunks of those — since its
// random bits are keyed by the element's index in the whole parameter:
// every part's master, copy and moments are the whole step's bits. And
// the float32 master and copy are AdamW's (the moments widen exactly).
func TestAdamWStepBF16MomentsAnyShards(t *testing.T) {
	const rows, cols = 6, 10
	n := rows * cols
	rng := rand.New(rand.NewPCG(3, 4))
	init := func(scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * scale)
		}
		return v
	}
	p0, g0, m0 := init(1), init(0.1), init(0.01)
	v0 := make([]float32, n)
	for i := range v0 {
		v0[i] = float32(rng.Float64() * 1e-3)
	}
	h := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 7}
	key := engine.MomentRound{Seed: 11, Tensor: engine.TensorKey("w")}
	b := New(Options{Threads: 2})
	ctl := b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	// step runs AdamWStep on the elements at the given indices of the
	// whole parameter, placed there by ix, and returns master, copy and
	// moments, widened.
	step := func(idx []int, ix engine.ElementIndex) [4][]float32 {
		k := len(idx)
		pick := func(v []float32) []float32 {
			out := make([]float32, k)
			for i, j := range idx {
				out[i] = v[j]
			}
			return out
		}
		ts := [6]*engine.Tensor{b.Alloc(engine.F32, k), b.Alloc(engine.F32, k), b.Alloc(engine.BF16, k), b.Alloc(engine.BF16, k), b.Alloc(engine.BF16, k)}
		for i, v := range [][]float32{p0, g0, m0, v0} {
			b.Upload(ts[i], pick(v))
		}
		r := key
		r.Index = ix
		b.AdamWStep([]engine.AdamWTensors{{Param: ts[0], Grad: ts[1], M: ts[2], V: ts[3], Copy: ts[4], Round: &r, WeightDecay: 0.1}}, h, 0, ctl)
		var out [4][]float32
		for i, j := range []int{0, 4, 2, 3} {
			out[i] = make([]float32, k)
			b.Download(out[i], ts[j])
		}
		return out
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	whole := step(all, engine.ElementIndex{Shard: engine.WholeShard(rows, cols), Cols: cols})
	checkCuts(t, cuts(rows, cols, [][3]int{{2, 1, 1}, {1, 2, 2}, {2, 2, 2}, {5, 3, 1}}, []int{1, 3}), whole[:], []string{"master", "copy", "m", "v"}, func(idx []int, at engine.ElementIndex) [][]float32 {
		r := step(idx, at)
		return r[:]
	})
	// The master and copy are AdamW's on the widened moments, and each
	// moment is AdamW's float32 rounded down or up, both seen.
	ref := [4]*engine.Tensor{b.Alloc(engine.F32, n), b.Alloc(engine.F32, n), b.Alloc(engine.F32, n), b.Alloc(engine.F32, n)}
	for i, v := range [][]float32{p0, g0, m0, v0} {
		w := append([]float32(nil), v...)
		if i >= 2 {
			for j := range w {
				w[j] = math.Float32frombits(uint32(bf16Of(w[j])) << 16)
			}
		}
		b.Upload(ref[i], w)
	}
	h.WeightDecay = 0.1
	b.AdamW(ref[0], ref[1], ref[2], ref[3], h)
	want := [4][]float32{make([]float32, n), nil, make([]float32, n), make([]float32, n)}
	for i, j := range []int{0, 2, 3} {
		b.Download(want[j], ref[[]int{0, 2, 3}[i]])
	}
	if err := numtest.Equal(whole[0], want[0]); err != nil {
		t.Errorf("master: %v", err)
	}
	up, down := 0, 0
	for _, k := range []int{2, 3} {
		for i, x := range want[k] {
			lo := math.Float32frombits(math.Float32bits(x) &^ 0xffff)
			hi := math.Float32frombits(math.Float32bits(x)&^0xffff + 0x10000)
			switch whole[k][i] {
			case lo:
				down++
			case hi:
				up++
			default:
				t.Errorf("moment %d[%d] = %v: neither neighbour of %v", k, i, whole[k][i], x)
			}
		}
	}
	if up == 0 || down == 0 {
		t.Errorf("moments rounded up %d times and down %d: not stochastically", up, down)
	}
}

// bf16Of is x rounded to nearest even.
func bf16Of(x float32) uint16 {
	u := math.Float32bits(x)
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// chunk is comm.Chunk: part r of n elements cut in k, the first ones
// ⌈n/k⌉ long.
// A cut is one rank's part of a rows×cols parameter under a grid of X
// column blocks, Y row blocks and Z chunks of each block's flat order,
// then ZeRO's D chunks of that: the parameter's elements it holds
// (indices into the whole, in the rank's order) and their ElementIndex.
type cut struct {
	name string
	idx  []int
	at   engine.ElementIndex
}

// cuts lists every rank's cut of a rows×cols parameter under each grid
// (x, y, z) and each ZeRO degree d.
func cuts(rows, cols int, grids [][3]int, ds []int) []cut {
	var out []cut
	for _, grid := range grids {
		x, y, z := grid[0], grid[1], grid[2]
		bw, bh := cols/x, rows/y
		for xi := range x {
			for yi := range y {
				for zi := range z {
					f0, f1 := chunk(bw*bh, z, zi)
					for _, d := range ds {
						for di := range d {
							o0, o1 := chunk(f1-f0, d, di)
							var idx []int
							for f := f0 + o0; f < f0+o1; f++ {
								idx = append(idx, (yi*bh+f/bw)*cols+xi*bw+f%bw)
							}
							sh := engine.Shard{Row0: yi * bh, Row1: (yi + 1) * bh, Col0: xi * bw, Col1: (xi + 1) * bw, Flat0: f0, Flat1: f1}
							out = append(out, cut{
								name: fmt.Sprintf("grid %v part (%d,%d,%d) ZeRO %d/%d", grid, xi, yi, zi, di, d),
								idx:  idx,
								at:   engine.ElementIndex{Shard: sh, Cols: cols}.Offset(o0),
							})
						}
					}
				}
			}
		}
	}
	return out
}

// checkCuts runs step on every cut and requires each of its outputs
// (named by what) to be the whole run's at the cut's elements, bit for bit.
func checkCuts(t *testing.T, cs []cut, whole [][]float32, what []string, step func(idx []int, at engine.ElementIndex) [][]float32) {
	t.Helper()
	for _, c := range cs {
		got := step(c.idx, c.at)
		for k, name := range what {
			want := make([]float32, len(c.idx))
			for i, j := range c.idx {
				want[i] = whole[k][j]
			}
			if err := numtest.Equal(got[k], want); err != nil {
				t.Errorf("%s: %s: %v", c.name, name, err)
			}
		}
	}
	if len(cs) < 20 {
		t.Fatalf("%d parts compared", len(cs))
	}
}

func chunk(n, k, r int) (lo, hi int) {
	q, rem := n/k, n%k
	lo = r*q + min(r, rem)
	hi = lo + q
	if r < rem {
		hi++
	}
	return lo, hi
}
