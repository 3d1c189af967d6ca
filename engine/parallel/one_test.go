package parallel_test

import (
	"errors"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestOne checks that the grid of one rank is one rank: whole shards at
// coordinate zero, every copy counted, and sums and agreement that leave
// the values and the error as they are.
func TestOne(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	g := parallel.One(b)
	if want := (comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}); g.Shape() != want || g.At != (parallel.Coord{}) || g.Rank() != 0 {
		t.Fatalf("One: shape %v at %+v rank %d, want %v at zero", g.Shape(), g.At, g.Rank(), want)
	}
	if g.BatchRanks() != 1 || g.BatchRank() != 0 || !g.CountsBatch() {
		t.Errorf("One: batch ranks %d, batch rank %d, counts %v", g.BatchRanks(), g.BatchRank(), g.CountsBatch())
	}
	for _, s := range countsConfig(false).TensorSpecs() {
		rows, cols := engine.RowsCols(s.Shape)
		if sh := g.Shard(s.Split, s.Shape); sh != engine.WholeShard(rows, cols) {
			t.Errorf("%s: shard %+v, want the whole tensor", s.Name, sh)
		}
		if !g.CountsUnique(s.Split) {
			t.Errorf("%s: not counted on one rank", s.Name)
		}
	}
	// 0.1 has no float32 value: a sum through a float32 tensor would
	// change it, and one rank sums nothing.
	vals := []float64{0.1, 3}
	if err := g.SumBatch(b, vals); err != nil || vals[0] != 0.1 || vals[1] != 3 {
		t.Errorf("SumBatch = %v, %v; want [0.1 3]", vals, err)
	}
	if s, err := g.SumUnique(b, 0.1); err != nil || s != 0.1 {
		t.Errorf("SumUnique(0.1) = %v, %v", s, err)
	}
	failed := errors.New("disk full")
	if err := g.Agree(b, failed); err != failed {
		t.Errorf("Agree(failed) = %v, want the error itself", err)
	}
	if err := g.Agree(b, nil); err != nil {
		t.Errorf("Agree(nil) = %v", err)
	}
	if any, err := g.Any(b, true); !any || err != nil {
		t.Errorf("Any(true) = %v, %v", any, err)
	}
}
