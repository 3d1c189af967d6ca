package perfmodel_test

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/units"
)

// Plan Llama 3.1 8B on one node of 8 H100 with one 8192-token sequence a
// GPU, as torchtitan's benchmark runs it. The times, tokens/s and MFU are
// the model's predictions for memtrain's own engine, its step's kernel
// list each at its modelled rate: in float32 (the default precision; bf16
// runs on data-parallel grids alone, where 8B does not fit in 80 GB) the
// GEMMs run on bf16 tensor cores but attention on the scalar float32
// kernels, which take most of the step at 8192 tokens. The memory is the
// engine's accounting of what each rank allocates.
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
	// dp=1 x=1 y=2 z=4 micro-batch 1×2 recompute none: 9.94 s, 824 tokens/s/GPU, MFU 4.8%, 62.0 GiB
	// dp=2 x=1 y=2 z=2 micro-batch 1×2 recompute selective: 9.99 s, 820 tokens/s/GPU, MFU 4.8%, 62.4 GiB
	// dp=2 x=1 y=4 z=1 micro-batch 1×4 recompute none: 10.13 s, 809 tokens/s/GPU, MFU 4.7%, 60.6 GiB
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
