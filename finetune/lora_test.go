package finetune

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestLoRARunResumes: a LoRA run (goldfish, dropout, accumulation) of 4
// steps on one rank, and the same run stopped after 2 steps on an X×Y×Z
// grid and resumed on one rank, give the same metrics; RUN/final is a PEFT
// adapter folder that loads on the base, and that merges into it.
func TestLoRARunResumes(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.Loss = "goldfish"
	cfg.Goldfish = goldfish.Config{Strategy: goldfish.HashTable, K: 3, H: 2}
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-2
	cfg.LoRA = LoRA{Rank: 4, Alpha: 8, Dropout: 0.1, Targets: "q_proj,v_proj,down_proj", BaseDType: "f32"}

	root := t.TempDir()
	cfg.Out = filepath.Join(root, "one")
	want := trainRank(t, cfg, nil, "", 0)
	cfg.Out = filepath.Join(root, "resumed")
	first := trainRank(t, cfg, &comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}, "", 2)
	second := trainRank(t, cfg, nil, cfg.Out, 0)
	got := append(first, second...)
	if len(got) != len(want) {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for i, w := range want {
		if g := got[i]; g.Kept != w.Kept {
			t.Errorf("step %d: resumed %+v\none rank %+v", w.Step, g, w)
		}
	}
	checkMetrics(t, "resumed against one rank", got, want, map[string]float64{"loss": 1e-5, "grad_norm": 1e-5, "eval_loss": 1e-5})
	if want[0].Loss == want[len(want)-1].Loss {
		t.Errorf("the loss did not move: %v", want[0].Loss)
	}
	for _, run := range []string{filepath.Join(root, "one"), cfg.Out} {
		final := filepath.Join(run, FinalDir)
		base, err := checkpoints.Open(model)
		if err != nil {
			t.Fatal(err)
		}
		ad, err := checkpoints.OpenAdapter(final, base.Config)
		if err != nil {
			t.Fatal(err)
		}
		if ad.Config.R != 4 || ad.Config.LoRAAlpha != 8 || ad.Config.LoRADropout != 0.1 || !filepath.IsAbs(ad.Config.BaseModelNameOrPath) {
			t.Errorf("%s: %+v", final, ad.Config)
		}
		if _, err := os.Stat(filepath.Join(final, checkpoints.ConfigFile)); err == nil {
			t.Errorf("%s: a LoRA run's final is an adapter, not a model", final)
		}
		// The latest checkpoint carries the adapter's configuration.
		latest, err := LatestCheckpoint(filepath.Join(run, CheckpointsDir))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(latest, checkpoints.AdapterConfigFile)); err != nil {
			t.Error(err)
		}
		merged := filepath.Join(t.TempDir(), "merged")
		if err := checkpoints.Export(model, merged, checkpoints.ExportOptions{DType: checkpoints.DTypeF32, Adapter: ad}); err != nil {
			t.Fatal(err)
		}
		m, err := checkpoints.Open(merged)
		if err != nil {
			t.Fatal(err)
		}
		changed := 0
		for _, s := range base.Config.TensorSpecs() {
			a, _ := base.Weights.ReadFloat32(s.Name)
			b, _ := m.Weights.ReadFloat32(s.Name)
			for i := range a {
				if a[i] != b[i] {
					changed++
					if !strings.Contains(s.Name, "q_proj") && !strings.Contains(s.Name, "v_proj") && !strings.Contains(s.Name, "down_proj") {
						t.Fatalf("merge changed %s, which the adapter does not target", s.Name)
					}
					break
				}
			}
		}
		if changed == 0 {
			t.Error("merge changed nothing")
		}
		m.Close()
		ad.Close()
		base.Close()
	}
}

// TestLoRARunBF16: a LoRA run in mixed precision (lora.base_dtype auto
// holds the float32 base in bf16) trains — its loss moves, like the
// float32 run's and within 1% of it — and stopped after 2 steps and
// resumed gives the metrics of the run straight through (the adapters'
// bf16 copies are refreshed from the checkpoint). On other data-parallel
// ranks it would not be exact: the gradients' float32 sums in another
// order move a master weight's last bits, and now and then its copy
// rounds to the neighbouring bf16 value.
func TestLoRARunBF16(t *testing.T) {
	cfg := shortRun(t)
	cfg.LoRA = LoRA{Rank: 4, Alpha: 8, Dropout: 0.1, Targets: "q_proj,v_proj,down_proj", BaseDType: "auto"}
	root := t.TempDir()
	cfg.Out = filepath.Join(root, "f32")
	ref := trainRank(t, cfg, nil, "", 0)
	cfg.Precision = "bf16"
	cfg.Out = filepath.Join(root, "bf16")
	want := trainRank(t, cfg, nil, "", 0)
	cfg.Out = filepath.Join(root, "resumed")
	got := append(trainRank(t, cfg, nil, "", 2), trainRank(t, cfg, nil, cfg.Out, 0)...)
	if len(got) != len(want) || len(want) != len(ref) {
		t.Fatalf("%d, %d and %d metrics lines", len(ref), len(want), len(got))
	}
	for i, w := range want {
		if g := got[i]; g.Step != w.Step || g.Loss != w.Loss || g.GradNorm != w.GradNorm || g.EvalLoss != w.EvalLoss {
			t.Errorf("step %d: resumed %+v\nstraight %+v", w.Step, g, w)
		}
	}
	checkMetrics(t, "bf16 against f32", want, ref, map[string]float64{"loss": 0.01})
	if want[0].Loss == want[len(want)-1].Loss {
		t.Errorf("the bf16 loss did not move: %v", want[0].Loss)
	}
	t.Logf("bf16 losses %v … %v; f32 %v … %v", want[0].Loss, want[len(want)-1].Loss, ref[0].Loss, ref[len(ref)-1].Loss)
}

// TestLoRAConfig: the lora block's errors name the key; its adapter is
// PEFT's configuration of the block.
func TestLoRAConfig(t *testing.T) {
	base := DefaultConfig()
	base.Model, base.Data, base.Out = "m", "d", "o"
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.LoRA.Rank = -1 }, "lora.rank"},
		{func(c *Config) { c.LoRA.Rank, c.LoRA.Targets = 8, "q_proj,lm_head" }, `"lm_head"`},
		{func(c *Config) { c.LoRA.Rank, c.LoRA.Targets = 8, "q_proj,,v_proj" }, "lora.targets"},
		{func(c *Config) { c.LoRA.Rank, c.LoRA.Dropout = 8, 1 }, "lora_dropout"},
		{func(c *Config) { c.LoRA.Rank, c.LoRA.BaseDType = 8, "f16" }, "lora.base_dtype"},
		{func(c *Config) { c.LoRA.Init = "adapter" }, "lora.init"},
		{func(c *Config) { c.LoRA.Rank = 8192 }, `"r"`},
	} {
		cfg := base
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", cfg.LoRA, err, c.want)
		}
	}
	cfg := base
	cfg.LoRA = LoRA{Rank: 8, Targets: "all-linear", RSLoRA: true}
	a, err := cfg.LoRA.Adapter("/base")
	if err != nil {
		t.Fatal(err)
	}
	if a.R != 8 || a.LoRAAlpha != 16 || len(a.TargetModules) != 7 || !a.UseRSLoRA || a.BaseModelNameOrPath != "/base" {
		t.Errorf("adapter %+v (scale %v)", a, a.Scale())
	}
	if err := numtest.Scalar(a.Scale(), 16/math.Sqrt(8), numtest.Tol{Abs: 1e-15}); err != nil {
		t.Errorf("adapter scale: %v", err)
	}
	if a, err := (LoRA{}).Adapter("/base"); a != nil || err != nil {
		t.Errorf("rank 0: %v, %v (want full fine-tuning)", a, err)
	}
}
