package parallel_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestShardsTileEveryTensor: over the (x, y, z) ranks of a grid the shards
// of every weight cover it exactly once; Extract, Place and ReadShard
// agree, and ReadShard reads only the rows holding its chunk.
func TestShardsTileEveryTensor(t *testing.T) {
	cfg := countsConfig(false)
	dir := filepath.Join(t.TempDir(), "model")
	weights := checkpoints.RandomWeights(cfg, 2)
	if err := checkpoints.Save(dir, cfg, weights, checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	specs := cfg.TensorSpecs() // RandomWeights' order
	for _, shape := range []comm.Grid{{Data: 1, X: 2, Y: 4, Z: 2}, {Data: 2, X: 4, Y: 1, Z: 4}, {Data: 1, X: 1, Y: 2, Z: 4}} {
		for i, w := range weights {
			split := specs[i].Split
			cols := w.Shape[len(w.Shape)-1]
			rebuilt := make([]float32, len(w.Data))
			covered := make([]float32, len(w.Data))
			for x := 0; x < shape.X; x++ {
				for y := 0; y < shape.Y; y++ {
					for z := 0; z < shape.Z; z++ {
						s := parallel.ShardAt(shape, x, y, z, split, w.Shape)
						part := parallel.Extract(s, cols, w.Data)
						if !parallel.CountsAt(parallel.Coord{X: x, Y: y, Z: z}, split) {
							continue // a copy of another rank's shard (norm weights over Y and Z)
						}
						before := ck.Weights.BytesRead()
						read, err := parallel.ReadShard(ck.Weights, w.Name, w.Shape, s)
						if err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(read, part) {
							t.Fatalf("%v %s (%d,%d,%d): ReadShard differs from Extract", shape, w.Name, x, y, z)
						}
						if n := ck.Weights.BytesRead() - before; len(w.Shape) == 2 && n > int64(4*(len(part)+2*(s.Col1-s.Col0))) {
							t.Errorf("%v %s: read %d bytes for a shard of %d elements", shape, w.Name, n, len(part))
						}
						parallel.Place(s, cols, rebuilt, part)
						mark := make([]float32, len(w.Data))
						ones := make([]float32, s.Elements())
						for i := range ones {
							ones[i] = 1
						}
						parallel.Place(s, cols, mark, ones)
						for i, v := range mark {
							covered[i] += v
						}
					}
				}
			}
			if !slices.Equal(rebuilt, w.Data) {
				t.Errorf("%v %s: the shards do not rebuild the tensor", shape, w.Name)
			}
			for i, c := range covered {
				if c != 1 {
					t.Fatalf("%v %s: element %d in %v shards", shape, w.Name, i, c)
				}
			}
		}
	}
}

// splitSpecs are a tensor of every split kind, the kinds no family of
// the engine uses yet (a vector over Y, as a q/k/v bias; replicated, as
// a per-head q/k norm or an adapter) included. Every grid of up to two
// ranks an axis divides them.
var splitSpecs = []checkpoints.TensorSpec{
	{Name: "rows over Y", Shape: []int{12, 8}, Split: checkpoints.SplitRowsY},
	{Name: "rows over X", Shape: []int{8, 12}, Split: checkpoints.SplitRowsX},
	{Name: "vector over X", Shape: []int{8}, Split: checkpoints.SplitVectorX},
	{Name: "vector over Y", Shape: []int{12}, Split: checkpoints.SplitVectorY},
	{Name: "replicated vector", Shape: []int{6}, Split: checkpoints.SplitReplicated},
	{Name: "replicated matrix", Shape: []int{3, 4}, Split: checkpoints.SplitReplicated},
}

// smallGrids are every grid of one or two ranks an axis.
func smallGrids() []comm.Grid {
	var out []comm.Grid
	for _, d := range []int{1, 2} {
		for _, x := range []int{1, 2} {
			for _, y := range []int{1, 2} {
				for _, z := range []int{1, 2} {
					out = append(out, comm.Grid{Data: d, X: x, Y: y, Z: z})
				}
			}
		}
	}
	return out
}

// TestSplitsTileEveryTensor: for every split kind and every grid of up to
// 2×2×2×2, the shards that CountsAt counts tile the tensor exactly once
// per data replica; every other rank holds a copy of a counted rank's
// shard; LocalShape holds the shard's elements; and a matrix's shard is
// a Z chunk of its (x, y) block while every other split's is whole on
// each Z rank.
func TestSplitsTileEveryTensor(t *testing.T) {
	for _, shape := range smallGrids() {
		for _, spec := range splitSpecs {
			t.Run(fmt.Sprintf("%v/%s", shape, spec.Name), func(t *testing.T) {
				rows, cols := engine.RowsCols(spec.Shape)
				counted := map[int][]int{} // data replica → times each element is counted
				var held []engine.Shard    // the counted shards
				all := map[engine.Shard]bool{}
				for r := range shape.Size() {
					d, x, y, z := shape.Coords(r)
					s := parallel.ShardAt(shape, x, y, z, spec.Split, spec.Shape)
					if n := engine.Elements(parallel.LocalShape(spec.Shape, s)); n != s.Elements() || n == 0 {
						t.Fatalf("rank %d: LocalShape holds %d elements, the shard %d", r, n, s.Elements())
					}
					if s.Row0 < 0 || s.Row1 > rows || s.Col0 < 0 || s.Col1 > cols || s.Flat0 < 0 || s.Flat1 > (s.Row1-s.Row0)*(s.Col1-s.Col0) {
						t.Fatalf("rank %d: shard %+v outside %v", r, s, spec.Shape)
					}
					if whole := s.Elements() == (s.Row1-s.Row0)*(s.Col1-s.Col0); whole != (shape.Z == 1 || !spec.Split.ChunksZ()) {
						t.Errorf("rank %d: shard %+v of its block: Z chunking %v, want %v", r, s, !whole, spec.Split.ChunksZ())
					}
					all[s] = true
					if !parallel.CountsAt(parallel.Coord{Data: d, X: x, Y: y, Z: z}, spec.Split) {
						continue
					}
					if d == 0 {
						held = append(held, s)
					}
					if counted[d] == nil {
						counted[d] = make([]int, rows*cols)
					}
					idx := make([]float32, rows*cols)
					for i := range idx {
						idx[i] = float32(i)
					}
					for _, i := range parallel.Extract(s, cols, idx) {
						counted[d][int(i)]++
					}
				}
				if len(counted) != 1 {
					t.Fatalf("%d data replicas count elements, want only the first", len(counted))
				}
				for i, n := range counted[0] {
					if n != 1 {
						t.Fatalf("element %d counted %d times", i, n)
					}
				}
				for s := range all {
					if !slices.Contains(held, s) {
						t.Errorf("shard %+v is held by a rank but counted by none", s)
					}
				}
			})
		}
	}
}

// TestGradGroupsSumCopies: the groups a gradient is summed over
// (Grid.GradGroups) join only ranks that hold the same shard, so that a
// sum adds copies of the same elements: a matrix's Z chunks are summed
// apart (zGrads' reduce-scatter), so its groups never cross Z. (That the
// groups join every rank whose copy holds a different part of the sum is
// the engine's grid tests' to show, against one rank's gradients.)
func TestGradGroupsSumCopies(t *testing.T) {
	for _, shape := range []comm.Grid{{Data: 2, X: 2, Y: 2, Z: 2}, {Data: 1, X: 2, Y: 1, Z: 2}} {
		err := launch.Local(shape, parallel.Overlap{}, func(g *parallel.Grid) error {
			b := cpu.New(cpu.Options{Threads: 1})
			for _, spec := range splitSpecs {
				s := g.Shard(spec.Split, spec.Shape)
				mine := []float32{float32(s.Row0), float32(s.Row1), float32(s.Col0), float32(s.Col1), float32(s.Flat0), float32(s.Flat1)}
				first, batch := g.GradGroups(spec.Split)
				for _, c := range []comm.Comm{first, batch} {
					if c == nil {
						continue
					}
					src := b.Alloc(engine.F32, len(mine))
					dst := b.Alloc(engine.F32, len(mine)*c.Size())
					b.Upload(src, mine)
					if err := c.AllGather(dst, src); err != nil {
						return err
					}
					got := make([]float32, dst.Len())
					b.Download(got, dst)
					for r := range c.Size() {
						if !slices.Equal(got[r*len(mine):(r+1)*len(mine)], mine) {
							return fmt.Errorf("%s: group %s joins shards %v and %v", spec.Name, c.Group(), mine, got[r*len(mine):(r+1)*len(mine)])
						}
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("%v: %v", shape, err)
		}
	}
}

// TestLaunchReportsTheCause: a rank failing on its own comes first in
// Launch's error, ahead of the others' consequences.
func TestLaunchReportsTheCause(t *testing.T) {
	cause := errors.New("disk full")
	err := launch.Local(comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, parallel.Overlap{}, func(g *parallel.Grid) error {
		if g.Rank() == 1 {
			return cause
		}
		return g.World.Barrier()
	}, comm.WithTimeout(200e6))
	if !errors.Is(err, cause) || !strings.HasPrefix(err.Error(), "rank 1: disk full") {
		t.Errorf("Launch: %v", err)
	}
}
