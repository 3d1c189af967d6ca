package perfmodel_test

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/units"
)

// Plan Llama 3.1 8B on one node of 8 H100 with one 8192-token sequence a
// GPU, as torchtitan's benchmark runs it. The times, tokens/s and MFU are
// the model's predictions (at the assumed DefaultEfficiency); the memory
// is the engine's accounting of what each rank allocates.
func ExampleSearch() {
	p, _ := checkpoints.LookupPreset("llama3.1-8b")
	dev, _ := perfmodel.LookupDevice("h100")
	plans, err := perfmodel.Search(perfmodel.Job{
		Config: p.Config(), Device: dev, GPUs: 8, SeqLen: 8192, GlobalBatchTokens: 8 * 8192,
	}, perfmodel.Options{TopK: 3})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, pl := range plans {
		fmt.Printf("%v micro-batch %d×%d recompute %v: %.2f s, %.0f tokens/s/GPU, MFU %.1f%%, %s\n",
			pl.Grid, pl.MicroBatch, pl.MicroBatches, pl.Recompute, pl.StepSeconds, pl.TokensPerSecondPerGPU, 100*pl.MFU, units.FormatBytes(pl.Memory.Total()))
	}
	// Output:
	// dp=1 x=1 y=2 z=4 micro-batch 1×2 recompute false: 1.25 s, 6572 tokens/s/GPU, MFU 38.5%, 62.0 GiB
	// dp=1 x=1 y=4 z=2 micro-batch 1×4 recompute false: 1.32 s, 6187 tokens/s/GPU, MFU 36.2%, 47.1 GiB
	// dp=2 x=1 y=4 z=1 micro-batch 1×4 recompute false: 1.33 s, 6148 tokens/s/GPU, MFU 36.0%, 60.6 GiB
}

// Count what one rank sends over each group in a step.
func ExampleCollectives() {
	p, _ := checkpoints.LookupPreset("llama3.1-8b")
	step := perfmodel.Step{Grid: perfmodel.Grid{Data: 2, X: 2, Y: 2, Z: 2}, SeqLen: 8192, MicroBatch: 1, MicroBatches: 2}
	cs, err := perfmodel.Collectives(p.Config(), step)
	if err != nil {
		fmt.Println(err)
		return
	}
	sent := map[string]float64{}
	for _, c := range cs {
		sent[c.Group] += c.SentBytes()
	}
	for _, g := range perfmodel.Groups() {
		fmt.Printf("%-6s %8.3f GB\n", g, sent[g]/1e9)
	}
	// Output:
	// x        60.046 GB
	// y        17.449 GB
	// z        23.039 GB
	// data      4.015 GB
	// data-z    0.001 GB
}
