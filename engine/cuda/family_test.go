package cuda

import (
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestFamiliesEmulated: a step of each family beside Llama's — Mistral
// with a sliding window of 5 keys over 24 tokens, Qwen2 with its biases,
// Qwen3 with its head norms over a head_dim of 16 — on the emulated GPU
// gives the CPU backend's loss, gradients and updated weights, in float32
// and in mixed precision, and the same greedy generations, past the
// window.
func TestFamiliesEmulated(t *testing.T) {
	fakeCUDA(t)
	for _, family := range []string{"mistral", "qwen2", "qwen3"} {
		t.Run(family, func(t *testing.T) {
			cfg := testConfig()
			f, err := checkpoints.LookupFamily(family)
			if err != nil {
				t.Fatal(err)
			}
			cfg.ModelType, cfg.Architectures = f.ModelType, []string{f.Architecture}
			switch family {
			case "mistral":
				cfg.SlidingWindow = 5
			case "qwen3":
				cfg.HeadDim = 16
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			batch := randomBatch(cfg, 2, 24)

			ref := randomModel(t, cpu.New(cpu.Options{Threads: 2}), cfg)
			refLoss, refOut := trainStep(t, ref, batch)
			m := randomModel(t, newFake(t, 0, GemmF32), cfg)
			loss, out := trainStep(t, m, batch)
			if err := numtest.Scalar(loss.Mean(), refLoss.Mean(), numtest.Tol{Rel: 1e-5}); err != nil || loss.Weight != refLoss.Weight {
				t.Errorf("f32 loss (weight %v) against the CPU's (weight %v): %v", loss.Weight, refLoss.Weight, err)
			}
			if err := numtest.EachClose(out, refOut, numtest.Tol{Max: 1e-4}); err != nil {
				t.Errorf("f32 step against the CPU's: %v", err)
			}

			opt := llama.Options{Activations: engine.BF16}
			ref16 := randomModelWith(t, cpu.New(cpu.Options{Threads: 2}), cfg, opt)
			refLoss16, refOut16 := trainStep(t, ref16, batch)
			m16 := randomModelWith(t, newFake(t, 0, GemmF32), cfg, opt)
			loss16, out16 := trainStep(t, m16, batch)
			checkBF16Step(t, "bf16 step", loss16, refLoss16, out16, refOut16)

			gpu := randomModel(t, newFake(t, 0, GemmF32), cfg)
			host := randomModel(t, cpu.New(cpu.Options{Threads: 2}), cfg)
			sameGenerations(t, gpu, host, [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}}, family)
		})
	}
}
