package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestInt8Pieces: a part's pieces are its runs of elements in one block
// of Int8Block columns of a whole parameter's row: whole blocks when the
// part's cuts fall on block boundaries, pieces of them otherwise.
func TestInt8Pieces(t *testing.T) {
	cases := []struct {
		ix   engine.ElementIndex
		n    int
		want []int
	}{
		{engine.ElementIndex{Shard: engine.WholeShard(2, 128), Cols: 128}, 256, []int{0, 64, 128, 192, 256}},
		{engine.ElementIndex{Shard: engine.Shard{Row0: 0, Row1: 2, Col0: 64, Col1: 128, Flat0: 0, Flat1: 128}, Cols: 128}, 128, []int{0, 64, 128}},
		// Columns 32…95 of each row: each row's run meets two blocks.
		{engine.ElementIndex{Shard: engine.Shard{Row0: 0, Row1: 2, Col0: 32, Col1: 96, Flat0: 0, Flat1: 128}, Cols: 128}, 128, []int{0, 32, 64, 96, 128}},
		// A Z chunk starting mid-row: elements 96… of a 2 × 128 block.
		{engine.ElementIndex{Shard: engine.Shard{Row0: 0, Row1: 2, Col0: 0, Col1: 128, Flat0: 96, Flat1: 256}, Cols: 128}, 160, []int{0, 32, 96, 160}},
		// A vector of 100: a block and a short one.
		{engine.ElementIndex{Shard: engine.WholeShard(1, 100), Cols: 100}, 100, []int{0, 64, 100}},
	}
	for i, c := range cases {
		got := engine.Int8Pieces(c.ix, c.n)
		if len(got) != len(c.want) || engine.Int8PieceCount(c.ix, c.n) != int64(len(c.want)-1) {
			t.Errorf("case %d: pieces %v (count %d), want %v", i, got, engine.Int8PieceCount(c.ix, c.n), c.want)
			continue
		}
		for j := range got {
			if got[j] != c.want[j] {
				t.Errorf("case %d: pieces %v, want %v", i, got, c.want)
				break
			}
		}
	}
}

// TestInt8MomentsRoundTrip: moments decoded from any codes and scales,
// encoded to nearest, give those codes and scales back (a checkpoint's
// float32 moments resume exactly), for m and v, a piece whose largest
// code is the scale's own (as every encoded piece has).
func TestInt8MomentsRoundTrip(t *testing.T) {
	b := New(Options{Threads: 2})
	rng := rand.New(rand.NewPCG(5, 6))
	ix := engine.ElementIndex{Shard: engine.WholeShard(3, 100), Cols: 100}
	n := 300
	q := &engine.Int8Moments{Starts: engine.Int8Pieces(ix, n)}
	pieces := len(q.Starts) - 1
	q.MScale, q.VScale = b.Alloc(engine.F32, pieces), b.Alloc(engine.F32, pieces)
	for k := range 2 {
		codesT, back := b.Alloc(engine.I8, n), b.Alloc(engine.I8, n)
		c := codes("test", codesT)
		scales := make([]float32, pieces)
		for p := range pieces {
			scales[p] = float32(rng.ExpFloat64() * 1e-3)
			lo, hi := q.Starts[p], q.Starts[p+1]
			for i := lo; i < hi; i++ {
				if k == 0 {
					c[i] = uint8(1 + rng.IntN(255)) // −127…127 stored + 128
				} else {
					c[i] = uint8(rng.IntN(256))
				}
			}
			// The largest code of the piece, as encoding leaves one.
			c[lo+rng.IntN(hi-lo)] = map[int]uint8{0: 255, 1: 255}[k]
		}
		b.Upload(scaleOf(q, k), scales)
		x := b.Alloc(engine.F32, n)
		b.DecodeMoment(x, codesT, q, k)
		want := append([]uint8(nil), c...)
		b.EncodeMoment(back, q, k, x)
		got := codes("test", back)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("moment %d element %d: code %d after a round trip, was %d", k, i, got[i], want[i])
			}
		}
		gotScales := make([]float32, pieces)
		b.Download(gotScales, scaleOf(q, k))
		if err := numtest.Equal(gotScales, scales); err != nil {
			t.Errorf("moment %d: scales: %v", k, err)
		}
	}
}

// TestAdamWStepInt8AnyShards: with 8-bit moments, a parameter cut by a
// grid along block boundaries (X and Y blocks, Z flat chunks, ZeRO
// chunks of 64-column multiples) updates each part to the whole step's
// bits: master, codes and scales (decoded), since the pieces are the
// whole blocks and the rounding is keyed by the whole parameter's
// indices.
func TestAdamWStepInt8AnyShards(t *testing.T) {
	const rows, cols = 4, 256
	n := rows * cols
	rng := rand.New(rand.NewPCG(8, 9))
	p0, g0 := make([]float32, n), make([]float32, n)
	for i := range p0 {
		p0[i], g0[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*0.1)
	}
	h := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 3}
	b := New(Options{Threads: 2})
	ctl := b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	// run takes two steps (the second from 8-bit moments) on the elements
	// idx of the whole parameter, placed by ix, and returns the master
	// and the decoded moments.
	run := func(idx []int, ix engine.ElementIndex) [3][]float32 {
		k := len(idx)
		pick := func(v []float32) []float32 {
			out := make([]float32, k)
			for i, j := range idx {
				out[i] = v[j]
			}
			return out
		}
		q := &engine.Int8Moments{Starts: engine.Int8Pieces(ix, k)}
		q.MScale, q.VScale = b.Alloc(engine.F32, len(q.Starts)-1), b.Alloc(engine.F32, len(q.Starts)-1)
		p, g, m, v := b.Alloc(engine.F32, k), b.Alloc(engine.F32, k), b.Alloc(engine.I8, k), b.Alloc(engine.I8, k)
		b.Upload(p, pick(p0))
		b.Upload(g, pick(g0))
		b.EncodeMoment(m, q, 0, b.Alloc(engine.F32, k)) // zero moments
		r := &engine.MomentRound{Seed: 3, Tensor: engine.TensorKey("w"), Index: ix}
		for step := 1; step <= 2; step++ {
			h.Step = step
			b.AdamWStep([]engine.AdamWTensors{{Param: p, Grad: g, M: m, V: v, Round: r, Int8: q, WeightDecay: 0.1}}, h, 0, ctl)
		}
		out := [3][]float32{make([]float32, k), make([]float32, k), make([]float32, k)}
		b.Download(out[0], p)
		for j, c := range []*engine.Tensor{m, v} {
			x := b.Alloc(engine.F32, k)
			b.DecodeMoment(x, c, q, j)
			b.Download(out[j+1], x)
		}
		return out
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	whole := run(all, engine.ElementIndex{Shard: engine.WholeShard(rows, cols), Cols: cols})
	checkCuts(t, cuts(rows, cols, [][3]int{{2, 1, 1}, {1, 2, 2}, {2, 2, 2}, {4, 1, 1}}, []int{1, 2}), whole[:], []string{"master", "m", "v"}, func(idx []int, at engine.ElementIndex) [][]float32 {
		r := run(idx, at)
		return r[:]
	})
}
