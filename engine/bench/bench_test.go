package bench

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// smallConfig is the tiny preset with a small vocabulary, so that a step
// takes milliseconds.
func smallConfig(t *testing.T) *checkpoints.Config {
	t.Helper()
	p, err := checkpoints.LookupPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	cfg.VocabSize = 512
	return cfg
}

func TestStep(t *testing.T) {
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		cfg := smallConfig(t)
		g := gemm.New(2)
		b := cpu.New(cpu.Options{Threads: 2, GEMM: g})
		ticks := 0
		r, err := Step(b, g, cfg, StepOptions{Batch: 2, SeqLen: 8, Steps: 2, Recompute: true, Activations: act, GEMM: gemm.Shape{M: 32, N: 32, K: 32}, Progress: func() { ticks++ }})
		if err != nil {
			t.Fatal(err)
		}
		if ticks != 3 {
			t.Errorf("progress called %d times, want 3 (a warm-up and 2 timed steps)", ticks)
		}
		if r.Params != cfg.Params().Total || r.Batch != 2 || r.SeqLen != 8 || !r.Recompute || r.Threads != 2 || r.GEMM != "go" || r.Precision != act.String() {
			t.Errorf("echoed shape: %+v", r)
		}
		if !(r.StepMS > 0) || !(r.TokensPerS > 0) || !(r.GEMMGFLOPs > 0) || !(r.Efficiency > 0) || !(r.KernelPeakGFLOPs > 0) || r.PeakFraction != r.AchievedGFLOPs/r.KernelPeakGFLOPs {
			t.Errorf("rates: %+v", r)
		}
		if want := engine.ModelFLOPsPerToken(cfg, 8); r.ModelFLOPsPerToken != want {
			t.Errorf("model FLOPs a token %v, want %v", r.ModelFLOPsPerToken, want)
		}
		mem := llama.Memory(cfg, llama.Work{Train: true, Recompute: llama.RecomputeFull, Moments: 2, Batch: 2, SeqLen: 8, Micro: 1, Activations: act})
		if r.AchievedGFLOPs != r.TokensPerS*r.ModelFLOPsPerToken/1e9 || r.EngineBytes != mem.Total() || r.ActivationBytes != mem.Workspace || r.ActivationBytes <= 0 {
			t.Errorf("derived fields: %+v", r)
		}
	}
}

// TestStepMemoryIsTheEngines checks the accounting bench step prints
// against what the backend allocated over the steps.
func TestStepMemoryIsTheEngines(t *testing.T) {
	cfg := smallConfig(t)
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		for _, rec := range []bool{false, true} {
			g := gemm.New(1)
			b := cpu.New(cpu.Options{Threads: 1, GEMM: g})
			r, err := Step(b, g, cfg, StepOptions{Batch: 2, SeqLen: 8, Steps: 1, Recompute: rec, Activations: act, GEMM: gemm.Shape{M: 8, N: 8, K: 8}})
			if err != nil {
				t.Fatal(err)
			}
			// The step's scalars (llama.StepSums) included: Micro.
			want := llama.Memory(cfg, llama.Work{Train: true, Recompute: StepOptions{Recompute: rec}.RecomputeMode(), Micro: 1, Moments: 2, Batch: 2, SeqLen: 8, Activations: act}).Total()
			if r.EngineBytes != want || r.AllocatedBytes != want {
				t.Errorf("%v recompute=%v: accounting %d, allocated %d bytes; llama.Memory %d", act, rec, r.EngineBytes, r.AllocatedBytes, want)
			}
		}
	}
}

func TestDecode(t *testing.T) {
	cfg := smallConfig(t)
	b := cpu.New(cpu.Options{Threads: 1})
	r, err := Decode(b, cfg, DecodeOptions{Batch: 2, PromptLen: 3, NewTokens: 4, Repeat: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Batch != 2 || r.PromptLen != 3 || r.NewTokens != 4 || r.Threads != 1 || !(r.Seconds > 0) || r.TokensPerS != 8/r.Seconds {
		t.Errorf("result %+v", r)
	}
}

func TestBadOptions(t *testing.T) {
	cfg := smallConfig(t)
	b := cpu.New(cpu.Options{Threads: 1})
	g := gemm.New(1)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"zero batch", stepErr(Step(b, g, cfg, StepOptions{SeqLen: 8, Steps: 1})), "positive batch, sequence length and step count (got 0, 8, 1)"},
		{"too long", stepErr(Step(b, g, cfg, StepOptions{Batch: 1, SeqLen: cfg.MaxPositionEmbeddings + 1, Steps: 1})), "exceed max_position_embeddings 2048"},
		{"zero repeat", decodeErr(Decode(b, cfg, DecodeOptions{Batch: 1, PromptLen: 1, NewTokens: 1})), "(got 1, 1, 1, 0)"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || strings.Contains(c.err.Error(), "--") {
			t.Errorf("%s: %v, want an error containing %q and naming no flag", c.name, c.err, c.want)
		}
	}
}

func stepErr(_ StepResult, err error) error     { return err }
func decodeErr(_ DecodeResult, err error) error { return err }

// TestTrainer: a step's loss is the model's mean loss on the batch before
// the update, and the update changes it.
func TestTrainer(t *testing.T) {
	cfg := smallConfig(t)
	b := cpu.New(cpu.Options{Threads: 1})
	m := randomModel(t, b, cfg, llama.Options{})
	batch := llama.Batch{B: 2, T: 4, IDs: []int32{1, 2, 3, 4, 5, 6, 7, 8}, Targets: []int32{2, 3, 4, 5, 6, 7, 8, 9}}
	before, err := m.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTrainer(b, m)
	defer tr.Free()
	loss, err := tr.Step(batch)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Scalar(loss, before.Mean(), numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("step loss against the model's: %v", err)
	}
	after, _ := m.Evaluate(batch)
	if !(after.Mean() < before.Mean()) {
		t.Errorf("loss %v after a step, %v before", after.Mean(), before.Mean())
	}
}

// BenchmarkStep times the training step issue 13 measures against
// PyTorch (peer-tiny, batch 8, 256 tokens, two threads), in float32 and in
// bf16 mixed precision, for profiling:
//
//	go test ./engine/bench -run - -bench Step/bf16 -cpuprofile cpu.out
func BenchmarkStep(b *testing.B) {
	p, err := checkpoints.LookupPreset("peer-tiny")
	if err != nil {
		b.Fatal(err)
	}
	cfg := p.Config()
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		b.Run(act.String(), func(b *testing.B) {
			g := gemm.New(2)
			be := cpu.New(cpu.Options{Threads: 2, GEMM: g})
			m := randomModel(b, be, cfg, llama.Options{Activations: act})
			tr := NewTrainer(be, m)
			defer tr.Free()
			const batch, seq = 8, 256
			bt := llama.Batch{B: batch, T: seq, IDs: make([]int32, batch*seq), Targets: make([]int32, batch*seq)}
			for i := range bt.IDs {
				bt.IDs[i] = int32(i * 7919 % cfg.VocabSize)
				bt.Targets[i] = int32(i * 104729 % cfg.VocabSize)
			}
			if _, err := tr.Step(bt); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := tr.Step(bt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch*seq)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// randomModel is a model of cfg with options opt on backend b with random weights, freed
// when the test ends.
func randomModel(tb testing.TB, b engine.Backend, cfg *checkpoints.Config, opt llama.Options) *llama.Model {
	tb.Helper()
	m, err := llama.New(b, cfg, opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Free)
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		tb.Fatal(err)
	}
	return m
}
