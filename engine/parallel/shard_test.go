package parallel_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
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
	for _, shape := range []comm.Grid{{Data: 1, X: 2, Y: 4, Z: 2}, {Data: 2, X: 4, Y: 1, Z: 4}, {Data: 1, X: 1, Y: 2, Z: 4}} {
		for _, w := range weights {
			cols := w.Shape[len(w.Shape)-1]
			rebuilt := make([]float32, len(w.Data))
			covered := make([]float32, len(w.Data))
			for x := 0; x < shape.X; x++ {
				for y := 0; y < shape.Y; y++ {
					for z := 0; z < shape.Z; z++ {
						s := parallel.ShardAt(shape, x, y, z, w.Name, w.Shape)
						part := parallel.Extract(s, cols, w.Data)
						if len(w.Shape) == 1 && (y > 0 || z > 0) {
							continue // norm weights are replicated over Y and Z
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
