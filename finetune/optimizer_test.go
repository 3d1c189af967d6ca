package finetune

import (
	"math"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/internal/numtest"
)

func TestSchedule(t *testing.T) {
	tests := []struct {
		s    Schedule
		step int
		want float64
	}{
		{Schedule{Kind: "constant", LR: 1e-3}, 0, 1e-3},
		{Schedule{Kind: "constant", LR: 1e-3, Warmup: 4}, 0, 0.25e-3},
		{Schedule{Kind: "constant", LR: 1e-3, Warmup: 4}, 3, 1e-3},
		{Schedule{Kind: "cosine", LR: 1, MinLR: 0.1, Warmup: 2, Total: 12}, 2, 1},
		{Schedule{Kind: "cosine", LR: 1, MinLR: 0.1, Warmup: 2, Total: 12}, 7, 0.55},
		{Schedule{Kind: "cosine", LR: 1, MinLR: 0.1, Warmup: 2, Total: 12}, 12, 0.1},
		{Schedule{Kind: "cosine", LR: 1, MinLR: 0.1, Warmup: 2, Total: 12}, 50, 0.1},
		{Schedule{Kind: "linear", LR: 1, MinLR: 0, Warmup: 0, Total: 10}, 5, 0.5},
	}
	for _, tt := range tests {
		if err := tt.s.Validate(); err != nil {
			t.Fatal(err)
		}
		if err := numtest.Scalar(tt.s.At(tt.step), tt.want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Errorf("%+v at %d: %v", tt.s, tt.step, err)
		}
	}
	for _, bad := range []Schedule{{Kind: "step", LR: 1}, {Kind: "constant", LR: 0}, {Kind: "cosine", LR: 1, Warmup: 5, Total: 5}, {Kind: "linear", LR: 1, MinLR: 2, Total: 3}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func newParam(b engine.Backend, name string, decay bool, val, grad []float32) *engine.Param {
	p := &engine.Param{Name: name, Full: []int{len(val)}, Shard: engine.WholeShard(1, len(val)),
		Value: b.Alloc(engine.F32, len(val)), Grad: b.Alloc(engine.F32, len(val)), Decay: decay}
	b.Upload(p.Value, val)
	b.Upload(p.Grad, grad)
	return p
}

func values(b engine.Backend, t *engine.Tensor) []float32 {
	out := make([]float32, t.Len())
	b.Download(out, t)
	return out
}

// TestAdamWMatchesFloat64 runs a few AdamW steps against the textbook
// update in float64, with weight decay only on the decayed parameter.
func TestAdamWMatchesFloat64(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	w := newParam(b, "w", true, []float32{0.5, -1, 2}, []float32{0.1, 0.2, -0.3})
	n := newParam(b, "norm", false, []float32{1, 1.5}, []float32{-0.4, 0.05})
	cfg := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	o, err := NewOptimizer(b, []*engine.Param{w, n}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type ref struct{ p, g, m, v []float64 }
	refs := []ref{{[]float64{0.5, -1, 2}, []float64{0.1, 0.2, -0.3}, make([]float64, 3), make([]float64, 3)},
		{[]float64{1, 1.5}, []float64{-0.4, 0.05}, make([]float64, 2), make([]float64, 2)}}
	for step := 1; step <= 3; step++ {
		lr := 1e-2 * float64(step)
		o.Update(lr)
		for i, r := range refs {
			wd := cfg.WeightDecay
			if i == 1 {
				wd = 0
			}
			for j := range r.p {
				r.p[j] -= lr * wd * r.p[j]
				r.m[j] = cfg.Beta1*r.m[j] + (1-cfg.Beta1)*r.g[j]
				r.v[j] = cfg.Beta2*r.v[j] + (1-cfg.Beta2)*r.g[j]*r.g[j]
				mh := r.m[j] / (1 - math.Pow(cfg.Beta1, float64(step)))
				vh := r.v[j] / (1 - math.Pow(cfg.Beta2, float64(step)))
				r.p[j] -= lr * mh / (math.Sqrt(vh) + cfg.Eps)
			}
		}
	}
	for i, p := range []*engine.Param{w, n} {
		if err := numtest.Close(values(b, p.Value), refs[i].p, numtest.Tol{Abs: 1e-6}); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

func TestSGDAndClipping(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	p := newParam(b, "w", true, []float32{1, 2}, []float32{3, 4})
	q := newParam(b, "v", true, []float32{0}, []float32{12})
	params := []*engine.Param{p, q}
	if err := numtest.Scalar(GradNorm(b, params), 13, numtest.Tol{Abs: 1e-6}); err != nil {
		t.Fatalf("norm: %v", err)
	}
	norm, clipped := ClipGradNorm(b, params, 1)
	if err := numtest.Scalar(norm, 13, numtest.Tol{Abs: 1e-6}); err != nil || !clipped {
		t.Fatalf("clip returned %v %v: %v", norm, clipped, err)
	}
	coef := 1 / (13 + 1e-6)
	if err := numtest.Close(values(b, p.Grad), []float64{3 * coef, 4 * coef}, numtest.Tol{Abs: 1e-7}); err != nil {
		t.Errorf("clipped grads: %v", err)
	}
	o, _ := NewOptimizer(b, params, OptimizerConfig{Name: "sgd"})
	o.Update(0.5)
	if err := numtest.Scalar(float64(values(b, p.Value)[0]), 1-0.5*3*coef, numtest.Tol{Abs: 1e-6}); err != nil {
		t.Errorf("sgd step: %v", err)
	}
	// A norm under the limit is left alone.
	r := newParam(b, "r", true, []float32{0}, []float32{0.5})
	ClipGradNorm(b, []*engine.Param{r}, 1)
	if g := values(b, r.Grad); g[0] != 0.5 {
		t.Errorf("unclipped grad changed: %v", g)
	}
	for _, bad := range []OptimizerConfig{{Name: "lion"}, {Name: "adamw", Beta1: 1, Beta2: 0.9, Eps: 1e-8}, {Name: "sgd", WeightDecay: -1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
