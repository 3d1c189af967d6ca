package launch_test

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// Train one step of a small Llama on 16 in-process ranks, data 2 × X 2 ×
// Y 2 × Z 2: each rank holds a sixteenth of every weight matrix, the four
// data·Z ranks split the batch's sequences, and the loss is one rank's.
func ExampleLocal() {
	cfg := &checkpoints.Config{
		HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2, NumAttentionHeads: 8, NumKeyValueHeads: 4,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32, VocabSize: 64,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.1,
	}
	weights := checkpoints.RandomWeights(cfg, 1)
	const B, T = 4, 8
	batch := llama.Batch{B: B, T: T, IDs: make([]int32, B*T), Targets: make([]int32, B*T)}
	for i := range batch.IDs {
		batch.IDs[i], batch.Targets[i] = int32(i%cfg.VocabSize), int32((7*i+3)%cfg.VocabSize)
	}
	step := func(g *parallel.Grid) (float64, error) {
		m, err := llama.New(cpu.New(cpu.Options{Threads: 1}), cfg, llama.Options{Parallel: g})
		if err != nil {
			return 0, err
		}
		defer m.Free()
		if err := m.SetWeights(weights); err != nil {
			return 0, err
		}
		mine := batch // one rank: everything; on the grid: this rank's data·Z share
		if g != nil {
			per := B / g.BatchRanks()
			lo, hi := g.BatchRank()*per*T, (g.BatchRank()+1)*per*T
			mine = llama.Batch{B: per, T: T, IDs: batch.IDs[lo:hi], Targets: batch.Targets[lo:hi]}
		}
		l, err := m.ForwardBackward(mine, 1.0/(B*T))
		if err != nil {
			return 0, err
		}
		if err := m.ReduceGradients(); err != nil {
			return 0, err
		}
		sums := []float64{l.Sum, l.Weight}
		err = m.SumBatch(sums)
		return sums[0] / sums[1], err
	}
	one, _ := step(nil)
	losses := make([]float64, 16)
	err := launch.Local(comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}, parallel.AllOverlap(), func(g *parallel.Grid) (err error) {
		losses[g.Rank()], err = step(g)
		return err
	})
	ref := make([]float64, len(losses)) // one rank's loss, for each rank of the grid
	for r := range ref {
		ref[r] = one
	}
	fmt.Println("error:", err)
	fmt.Printf("one rank %.5f, every rank of the grid within 1e-6: %v\n", one, numtest.Close(losses, ref, numtest.Tol{Abs: 1e-6}) == nil)
	// Output:
	// error: <nil>
	// one rank 4.17794, every rank of the grid within 1e-6: true
}
