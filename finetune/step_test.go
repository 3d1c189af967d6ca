package finetune

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/numtest"
)

// goldenRun is steps.json of scripts/fixtures/make_train_golden.py.
type goldenRun struct {
	MaxGradNorm float64 `json:"max_grad_norm"`
	Optimizer   struct {
		Name        string    `json:"name"`
		Betas       []float64 `json:"betas"`
		Eps         float64   `json:"eps"`
		WeightDecay float64   `json:"weight_decay"`
	} `json:"optimizer"`
	Schedule *struct {
		Kind   string  `json:"kind"`
		LR     float64 `json:"lr"`
		MinLR  float64 `json:"min_lr"`
		Total  int     `json:"total"`
		Warmup int     `json:"warmup"`
	} `json:"schedule"`
	Goldfish *struct {
		K int `json:"k"`
		H int `json:"h"`
	} `json:"goldfish"`
	LoRA *struct {
		R       int      `json:"r"`
		Alpha   float64  `json:"lora_alpha"`
		RSLoRA  bool     `json:"use_rslora"`
		Targets []string `json:"target_modules"`
	} `json:"lora"`
	Records []struct {
		Loss     float64 `json:"loss"`
		LR       float64 `json:"lr"`
		GradNorm float64 `json:"grad_norm"`
		Clipped  bool    `json:"clipped"`
		Micro    []struct {
			IDs     [][]int32   `json:"ids"`
			Targets [][]int32   `json:"targets"`
			Padding [][]float32 `json:"padding_weights"`
			Weights [][]float32 `json:"weights"`
		} `json:"micro_batches"`
	} `json:"records"`
}

func flatten[T any](rows [][]T) []T {
	var out []T
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

// TestTrainStepsMatchPyTorch replays the golden runs: per-step losses
// within 1e-5 relative, final weights (and AdamW moments) within
// 1e-4·max|b| per tensor of PyTorch's float64 run.
func TestTrainStepsMatchPyTorch(t *testing.T) {
	root := filepath.Join("testdata", "golden")
	for _, run := range []string{"adamw", "sgd", "lora"} {
		t.Run(run, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, run, "steps.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g goldenRun
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoints.Open(root)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			b := cpu.New(cpu.Options{Threads: 2})
			// The lora run trains a PEFT adapter written by the reference
			// on the same base, frozen.
			var ad *checkpoints.Adapter
			if run == "lora" {
				if ad, err = checkpoints.OpenAdapter(filepath.Join(root, run, "adapter"), ck.Config); err != nil {
					t.Fatal(err)
				}
				defer ad.Close()
				if ad.Config.R != g.LoRA.R || ad.Config.LoRAAlpha != g.LoRA.Alpha || !slices.Equal(ad.Config.TargetModules, g.LoRA.Targets) {
					t.Fatalf("adapter config %+v, steps.json's %+v", ad.Config, g.LoRA)
				}
			}
			opt := llama.Options{}
			if ad != nil {
				opt.LoRA = ad.Config
			}
			m, err := llama.Load(b, ck, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Free()
			if ad != nil {
				if err := m.LoadAdapters(ad.Weights); err != nil {
					t.Fatal(err)
				}
			}
			oc := OptimizerConfig{Name: g.Optimizer.Name, WeightDecay: g.Optimizer.WeightDecay, Eps: g.Optimizer.Eps}
			if len(g.Optimizer.Betas) == 2 {
				oc.Beta1, oc.Beta2 = g.Optimizer.Betas[0], g.Optimizer.Betas[1]
			}
			o, err := NewOptimizer(b, m.Trainable(), oc)
			if err != nil {
				t.Fatal(err)
			}
			defer o.Free()
			for s, rec := range g.Records {
				lr := rec.LR
				if g.Schedule != nil {
					sc := Schedule{Kind: g.Schedule.Kind, LR: g.Schedule.LR, MinLR: g.Schedule.MinLR, Warmup: g.Schedule.Warmup, Total: g.Schedule.Total}
					if err := numtest.Scalar(sc.At(s), rec.LR, numtest.Tol{Rel: 1e-12}); err != nil {
						t.Errorf("step %d: schedule's lr: %v", s, err)
					}
					lr = sc.At(s)
				}
				var micro []llama.Batch
				for _, mb := range rec.Micro {
					if g.Goldfish != nil {
						// memtrain's goldfish mask gives the reference's weights.
						gm, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashTable, K: g.Goldfish.K, H: g.Goldfish.H})
						if err != nil {
							t.Fatal(err)
						}
						for r := range mb.Targets {
							w := slices.Clone(mb.Padding[r])
							gm.Apply(mb.Targets[r], w)
							if !slices.Equal(w, mb.Weights[r]) {
								t.Fatalf("step %d: goldfish weights %v, reference %v", s, w, mb.Weights[r])
							}
						}
					}
					micro = append(micro, llama.Batch{B: len(mb.IDs), T: len(mb.IDs[0]),
						IDs: flatten(mb.IDs), Targets: flatten(mb.Targets), Weights: flatten(mb.Weights)})
				}
				res, err := TrainStep(m, o, micro, lr, g.MaxGradNorm)
				if err != nil {
					t.Fatal(err)
				}
				if err := numtest.Scalar(res.Loss, rec.Loss, numtest.Tol{Rel: 1e-5}); err != nil {
					t.Errorf("step %d: loss: %v", s, err)
				}
				if err := numtest.Scalar(res.GradNorm, rec.GradNorm, numtest.Tol{Rel: 1e-4}); err != nil {
					t.Errorf("step %d: grad norm: %v", s, err)
				}
				if g.MaxGradNorm > 0 && res.Clipped != rec.Clipped {
					t.Errorf("step %d: clipped %v, want %v", s, res.Clipped, rec.Clipped)
				}
			}
			final, err := checkpoints.OpenFile(filepath.Join(root, run, "final.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer final.Close()
			check := func(name string, got []float32) {
				want, err := final.ReadFloat32(name)
				if err != nil {
					t.Fatal(err)
				}
				if err := numtest.CloseMax(got, want, 1e-4); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			trained := m.Weights()
			if ad != nil {
				trained = m.AdapterTensors()
			}
			for _, w := range trained {
				check(w.Name, w.Data)
			}
			if mv, vv := o.Moments(); mv != nil {
				for i, p := range m.Trainable() {
					check("exp_avg/"+p.Name, values(b, mv[i]))
					check("exp_avg_sq/"+p.Name, values(b, vv[i]))
				}
			}
		})
	}
}
