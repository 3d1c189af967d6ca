package finetune

import (
	"math"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// TestInspectModel: a preset's report counts its parameters as the
// config does, sizes the full fine-tune by the engine's accounting
// (llama.Itemize) and a LoRA fine-tune only when asked, and refuses
// sequences longer than the model's positions.
func TestInspectModel(t *testing.T) {
	p, err := checkpoints.LookupPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	pc := cfg.Params()
	opt := InspectOptions{Batch: 2, SeqLen: 16, Precision: engine.PrecisionF32}
	rep, err := InspectModel("preset tiny", cfg, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Params != (ParamReport{Total: pc.Total, NonEmbedding: pc.NonEmbedding, Embedding: pc.Embedding, PerLayer: pc.PerLayer}) {
		t.Errorf("params %+v, want %+v", rep.Params, pc)
	}
	if rep.DTypeBytes["F32"] != 4*pc.Total || rep.DTypeBytes["BF16"] != 2*pc.Total || rep.Stored != nil || rep.Tokenizer != nil || rep.LoRA != nil {
		t.Errorf("report %+v: want F32 and BF16 sizes, nothing stored, no tokenizer, no LoRA", rep)
	}
	it := llama.Itemize(cfg, llama.Work{Train: true, Moments: 2, Batch: 2, SeqLen: 16, Micro: 1, Activations: engine.PrecisionF32.Activations()})
	if tr := rep.Training; tr.Weights != it.Weights || tr.Gradients != it.Gradients || tr.OptimizerState != it.Optimizer || tr.Total != it.Total() {
		t.Errorf("training memory %+v, engine's %+v", tr, it)
	}

	opt.LoRA = LoRA{Rank: 4, Targets: "q_proj,v_proj"}
	rep, err = InspectModel("preset tiny", cfg, nil, opt)
	if err != nil {
		t.Fatal(err)
	}
	if l := rep.LoRA; l == nil || l.Rank != 4 || len(l.Targets) != 2 || l.AdapterParams <= 0 || l.OptimizerState >= rep.Training.OptimizerState {
		t.Fatalf("LoRA %+v: want rank 4 on 2 projections, fewer moments than the full fine-tune's", l)
	}
	var b strings.Builder
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"model                    preset tiny\n", "full fine-tune           AdamW, f32, batch 2 × 16 tokens\n", "LoRA fine-tune           r 4, alpha 8 on q_proj,v_proj"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("table lacks %q:\n%s", row, b.String())
		}
	}

	opt.SeqLen = cfg.MaxPositionEmbeddings + 1
	if _, err := InspectModel("preset tiny", cfg, nil, opt); err == nil || !strings.Contains(err.Error(), "exceed max_position_embeddings") {
		t.Errorf("sequences past the positions: %v", err)
	}
}

// TestInspectBytesPerParam: inspect's bytes a parameter of a full
// fine-tune in mixed precision under each master and moments choice, for
// Llama 3.1 8B (whose norms, without bf16 copies, are 0.003% of it): 18
// as is, 2 fewer with the split master, 4 fewer with bf16 moments, 6 fewer
// less their scales (4 bytes a 64 per moment) with 8-bit ones; and with
// the optimizer fused into the backward the 4 bytes of the float32
// gradient gone but for the largest unit's, the embedding's or the
// head's 128,256 × 4,096 (0.2617 bytes a parameter of 8,030,261,248).
func TestInspectBytesPerParam(t *testing.T) {
	cfg, err := checkpoints.LookupConfig("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := InspectModel("llama3.1-8b", cfg, nil, InspectOptions{Batch: 1, SeqLen: 128, Precision: engine.PrecisionBF16})
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]float64{{"fp32", "fp32"}: 18, {"fp32", "bf16"}: 14, {"fp32", "int8"}: 12.125, {"split", "fp32"}: 16, {"split", "bf16"}: 12, {"split", "int8"}: 10.125}
	if len(rep.Training.PerParam) != 2*len(want) {
		t.Fatalf("%d choices, want %d: %+v", len(rep.Training.PerParam), 2*len(want), rep.Training.PerParam)
	}
	const unit = 128256.0 * 4096 * 4 / 8030261248 // the largest unit's gradient, a parameter
	for _, s := range rep.Training.PerParam {
		w, ok := want[[2]string{s.Master, s.Moments}]
		if s.Fused {
			w += unit - 4
		}
		// Within 0.01: the norms' missing copies, the RoPE table.
		if !ok || math.Abs(s.Bytes-w) > 0.01 {
			t.Errorf("master %s, moments %s, fused %v: %.4f bytes a parameter, want %.4f", s.Master, s.Moments, s.Fused, s.Bytes, w)
		}
	}
}
