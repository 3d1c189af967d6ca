package finetune

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/units"
)

// A ModelReport is a model's — a checkpoint's or a preset's — shape,
// parameter counts, sizes and the memory of fine-tuning it, by the
// engine's own accounting: `memtrain inspect`'s report, and its JSON.
type ModelReport struct {
	Source     string                  `json:"source"`
	Config     *checkpoints.Config     `json:"config"`
	Params     ParamReport             `json:"params"`
	DTypeBytes map[string]int64        `json:"bytes_per_dtype"`
	Stored     *checkpoints.SetSummary `json:"stored,omitempty"`
	Tokenizer  *TokenizerSummary       `json:"tokenizer,omitempty"`
	Training   TrainingMemory          `json:"training_memory"`
	LoRA       *LoRAMemory             `json:"lora_memory,omitempty"`
}

// LoRAMemory is a LoRA fine-tune's memory on one CPU rank, by the
// engine's own accounting (llama.Memory: what the preflight checks and
// New and the passes allocate).
type LoRAMemory struct {
	Rank          int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	Targets       []string `json:"target_modules"`
	AdapterParams int64    `json:"adapter_params"`
	BaseDType     string   `json:"base_dtype"`
	// Precision is the full fine-tune's (with bf16 the base is held in
	// bf16 and the adapters get bf16 copies).
	Precision string `json:"precision"`
	Batch     int    `json:"batch"`
	SeqLen    int    `json:"seq_len"`
	// Recompute is InspectOptions.Recompute ("none", "selective" or
	// "full").
	Recompute      llama.Recompute `json:"recompute"`
	Params         int64           `json:"params"`
	OptimizerState int64           `json:"optimizer_state"`
	Workspace      int64           `json:"workspace"`
	Total          int64           `json:"total"`
}

// ParamReport is checkpoints.Config.Params in the report's JSON.
type ParamReport struct {
	Total        int64 `json:"total"`
	NonEmbedding int64 `json:"non_embedding"`
	Embedding    int64 `json:"embedding"`
	PerLayer     int64 `json:"per_layer"`
}

// TokenizerSummary is a checkpoint's tokenizer, or why it cannot be read.
type TokenizerSummary struct {
	Family    string `json:"family"`
	VocabSize int    `json:"vocab_size"`
	Error     string `json:"error,omitempty"`
}

// TrainingMemory is a full AdamW fine-tune's memory on one rank, without
// activation recomputation, with selective and with full recomputation.
type TrainingMemory struct {
	Optimizer            string `json:"optimizer"`
	Precision            string `json:"precision"`
	Batch                int    `json:"batch"`
	SeqLen               int    `json:"seq_len"`
	Weights              int64  `json:"weights"`
	Gradients            int64  `json:"gradients"`
	OptimizerState       int64  `json:"optimizer_state"`
	Activations          int64  `json:"activations"`
	ActivationsRecompute int64  `json:"activations_recompute"`
	Total                int64  `json:"total"`
	TotalRecompute       int64  `json:"total_recompute"`
	// ActivationsSelective and TotalSelective are with selective
	// recomputation (llama.RecomputeSelective); the two above with full.
	ActivationsSelective int64 `json:"activations_selective"`
	TotalSelective       int64 `json:"total_selective"`
	// PerParam are the bytes a parameter of weights, gradients and
	// optimizer state under each memory option at the precision (the
	// split master in mixed precision only), by the same accounting.
	PerParam []StateBytes `json:"bytes_per_param"`
}

// StateBytes are the bytes a parameter that a full fine-tune holds
// beside its activations under one choice of the master and moments
// keys.
type StateBytes struct {
	Master  string `json:"master"`
	Moments string `json:"moments"`
	// Fused is optimizer.fused: the gradients are the units' in flight
	// in the backward, not the whole model's.
	Fused bool    `json:"fused"`
	Bytes float64 `json:"bytes"`
}

// WriteText writes the report as a table, as `memtrain inspect` prints it.
func (r *ModelReport) WriteText(w io.Writer) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("model", "%s", r.Source)
	row("architecture", "%s (model_type %s)", c.Family().Architecture, c.Family().ModelType)
	row("hidden_size", "%d", c.HiddenSize)
	row("intermediate_size", "%d", c.IntermediateSize)
	row("num_hidden_layers", "%d", c.NumHiddenLayers)
	row("attention heads", "%d (kv %d, head_dim %d)", c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDimension())
	if w := c.Window(); w > 0 {
		row("sliding_window", "%d keys", w)
	}
	if c.QKVBias() {
		row("attention biases", "q_proj, k_proj, v_proj")
	}
	if c.QKNorm() {
		row("head norms", "q_norm, k_norm over head_dim %d", c.HeadDimension())
	}
	row("vocab_size", "%d", c.VocabSize)
	row("max_position_embeddings", "%d", c.MaxPositionEmbeddings)
	rope := fmt.Sprintf("theta %g", c.RopeTheta)
	if rs := c.RopeScaling; rs != nil {
		rope += fmt.Sprintf(", %s scaling ×%g (low %g, high %g, original %d)", rs.RopeType, rs.Factor, rs.LowFreqFactor, rs.HighFreqFactor, rs.OriginalMaxPositionEmbeddings)
	}
	row("rope", "%s", rope)
	row("rms_norm_eps", "%g", c.RMSNormEps)
	row("tie_word_embeddings", "%v", c.TieWordEmbeddings)
	row("bos / eos ids", "%v / %v", c.BOSTokenIDs, c.EOSTokenIDs)
	row("torch_dtype", "%s", c.TorchDType)
	if t := r.Tokenizer; t != nil {
		if t.Error != "" {
			row("tokenizer", "unreadable: %s", t.Error)
		} else {
			row("tokenizer", "%s, %d tokens", t.Family, t.VocabSize)
		}
	}
	fmt.Fprintln(tw)
	row("parameters", "%s (%d)", units.FormatCount(r.Params.Total), r.Params.Total)
	row("  non-embedding", "%s (%d)", units.FormatCount(r.Params.NonEmbedding), r.Params.NonEmbedding)
	row("  embedding", "%s (%d)", units.FormatCount(r.Params.Embedding), r.Params.Embedding)
	row("  per layer", "%s (%d)", units.FormatCount(r.Params.PerLayer), r.Params.PerLayer)
	row("weights", "F32 %s, BF16 %s, F16 %s", units.FormatBytes(r.DTypeBytes["F32"]), units.FormatBytes(r.DTypeBytes["BF16"]), units.FormatBytes(r.DTypeBytes["F16"]))
	if s := r.Stored; s != nil {
		var parts []string
		for _, d := range []string{"F32", "BF16", "F16"} {
			if b, ok := s.Bytes[d]; ok {
				parts = append(parts, fmt.Sprintf("%s %s", d, units.FormatBytes(b)))
			}
		}
		row("stored", "%s in %d tensors, %d file(s)", strings.Join(parts, ", "), s.Tensors, len(s.Files))
	}
	fmt.Fprintln(tw)
	t := r.Training
	row("full fine-tune", "AdamW, %s, batch %d × %d tokens", t.Precision, t.Batch, t.SeqLen)
	row("  weights", "%s", units.FormatBytes(t.Weights))
	row("  gradients", "%s", units.FormatBytes(t.Gradients))
	row("  optimizer (2 moments)", "%s", units.FormatBytes(t.OptimizerState))
	row("  bytes a parameter", "of weights, gradients and moments, by master, optimizer.moments and optimizer.fused:")
	for _, s := range t.PerParam {
		fused := ""
		if s.Fused {
			fused = ", fused"
		}
		row(fmt.Sprintf("    %s, %s%s", s.Master, s.Moments, fused), "%.2f", s.Bytes)
	}
	row("  activations", "%s (with selective recomputation %s, with full %s; the engine's workspace)",
		engine.FormatNeed(t.Activations), engine.FormatNeed(t.ActivationsSelective), engine.FormatNeed(t.ActivationsRecompute))
	row("  total", "%s (with selective recomputation %s, with full %s)", engine.FormatNeed(t.Total), engine.FormatNeed(t.TotalSelective), engine.FormatNeed(t.TotalRecompute))
	if l := r.LoRA; l != nil {
		fmt.Fprintln(tw)
		recompute := ""
		if l.Recompute != llama.RecomputeNone {
			recompute = ", " + l.Recompute.String() + " recomputation"
		}
		row("LoRA fine-tune", "r %d, alpha %g on %s, AdamW, %s, batch %d × %d tokens%s (one CPU rank)", l.Rank, l.Alpha, strings.Join(l.Targets, ","), l.Precision, l.Batch, l.SeqLen, recompute)
		row("  adapters", "%s parameters", units.FormatCount(l.AdapterParams))
		copies := ""
		if l.Precision == engine.PrecisionBF16.String() {
			copies = " and bf16 copies"
		}
		row("  weights", "%s (base frozen in %s, no gradients; adapters f32 with gradients%s)", units.FormatBytes(l.Params), l.BaseDType, copies)
		row("  optimizer (2 moments)", "%s", units.FormatBytes(l.OptimizerState))
		row("  workspace", "%s (activations, the engine's plan)", engine.FormatNeed(l.Workspace))
		row("  total", "%s", engine.FormatNeed(l.Total))
	}
	return tw.Flush()
}

// InspectOptions are the fine-tunes a ModelReport sizes.
type InspectOptions struct {
	Batch     int              // sequences a step
	SeqLen    int              // tokens a sequence, at most the model's positions
	Precision engine.Precision // the training precision
	// LoRA, when its Rank is set, adds a LoRA fine-tune to the report,
	// the base held as lora.base_dtype auto holds it; Recompute is its
	// activation recomputation.
	LoRA      LoRA
	Recompute llama.Recompute
}

// AdapterLoRA is the lora block of the LoRA adapter of ref, as
// InspectOptions.LoRA sizes it: its rank, alpha, rsLoRA and projections.
func AdapterLoRA(ref ModelRef) (LoRA, error) {
	cfg, err := checkpoints.ReadConfig(ref.Dir)
	if err != nil {
		return LoRA{}, err
	}
	ad, err := checkpoints.OpenAdapter(ref.Adapter, cfg)
	if err != nil {
		return LoRA{}, err
	}
	defer ad.Close()
	c := ad.Config
	return LoRA{Rank: c.R, Alpha: c.LoRAAlpha, RSLoRA: c.UseRSLoRA, Targets: strings.Join(c.TargetModules, ",")}, nil
}

// InspectModel reports on the model of cfg, named source: a checkpoint's
// (ck, whose stored weights and tokenizer the report adds) or a preset's
// (ck nil).
func InspectModel(source string, cfg *checkpoints.Config, ck *checkpoints.Checkpoint, opt InspectOptions) (*ModelReport, error) {
	if opt.SeqLen > cfg.MaxPositionEmbeddings {
		return nil, fmt.Errorf("finetune: %s: sequences of %d tokens exceed max_position_embeddings %d", source, opt.SeqLen, cfg.MaxPositionEmbeddings)
	}
	rep := &ModelReport{Source: source, Config: cfg}
	if ck != nil {
		stored := ck.Weights.Summary()
		rep.Stored = &stored
		if path := ck.TokenizerPath(); path != "" {
			tr := &TokenizerSummary{}
			if tok, _, err := data.OpenTokenizer(path); err != nil {
				tr.Error = err.Error()
			} else {
				tr.Family, tr.VocabSize = tok.Family(), tok.VocabSize()
			}
			rep.Tokenizer = tr
		}
	}
	pc := cfg.Params()
	rep.Params = ParamReport{Total: pc.Total, NonEmbedding: pc.NonEmbedding, Embedding: pc.Embedding, PerLayer: pc.PerLayer}
	rep.DTypeBytes = map[string]int64{}
	for _, d := range []checkpoints.DType{checkpoints.DTypeF32, checkpoints.DTypeBF16, checkpoints.DTypeF16} {
		rep.DTypeBytes[d.String()] = pc.Total * int64(d.Size())
	}
	rep.Training = trainingMemory(cfg, opt.Batch, opt.SeqLen, opt.Precision)
	if opt.LoRA.Rank != 0 {
		var err error
		if rep.LoRA, err = loraMemory(cfg, opt); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// trainingMemory is a full AdamW fine-tune of cfg on one rank, batch
// sequences of seq tokens at precision p, with each activation
// recomputation, by the engine's own accounting (llama.Itemize: what
// the preflight checks, and what New and the passes allocate).
func trainingMemory(cfg *checkpoints.Config, batch, seq int, p engine.Precision) TrainingMemory {
	w := llama.Work{Train: true, Moments: 2, Batch: batch, SeqLen: seq, Micro: 1, Activations: p.Activations()}
	it := llama.Itemize(cfg, w)
	w.Recompute = llama.RecomputeSelective
	sel := llama.Itemize(cfg, w)
	w.Recompute = llama.RecomputeFull
	rec := llama.Itemize(cfg, w)
	return TrainingMemory{
		Optimizer: "AdamW", Precision: p.String(), Batch: batch, SeqLen: seq,
		Weights: it.Weights, Gradients: it.Gradients, OptimizerState: it.Optimizer,
		Activations: it.Activations, ActivationsRecompute: rec.Activations,
		Total: it.Total(), TotalRecompute: rec.Total(), PerParam: stateBytes(cfg, p),
		ActivationsSelective: sel.Activations, TotalSelective: sel.Total(),
	}
}

// stateBytes lists the bytes a parameter of a full fine-tune's weights,
// gradients and moments under each master and moments choice, unfused
// and with the optimizer fused into the backward.
func stateBytes(cfg *checkpoints.Config, p engine.Precision) []StateBytes {
	masters := []string{"fp32"}
	if p.Activations() == engine.BF16 {
		masters = append(masters, "split")
	}
	var out []StateBytes
	for _, fused := range []bool{false, true} {
		for _, master := range masters {
			for _, moments := range []string{"fp32", "bf16", "int8"} {
				oc := OptimizerConfig{Moments: moments}
				w := llama.Work{Moments: 2, Activations: p.Activations(), SplitMaster: master == "split", MomentDType: oc.momentDType(), FusedOptimizer: fused}
				it := llama.Itemize(cfg, w)
				b := float64(engine.SumBytes(it.Weights, it.Gradients, it.Optimizer)) / float64(cfg.Params().Total)
				out = append(out, StateBytes{Master: master, Moments: moments, Fused: fused, Bytes: b})
			}
		}
	}
	return out
}

// loraMemory sizes opt's LoRA fine-tune of the model of mc at its
// precision: the base held as lora.base_dtype auto holds it (its stored
// dtype, bf16 with bf16 activations), by llama.Memory, the accounting
// the preflight checks.
func loraMemory(mc *checkpoints.Config, opt InspectOptions) (*LoRAMemory, error) {
	lc := opt.LoRA
	lc.BaseDType = "auto"
	p := opt.Precision
	cfg := DefaultConfig()
	cfg.LoRA, cfg.Recompute, cfg.Precision = lc, Recompute(opt.Recompute), p.String()
	a, err := lc.Adapter("")
	if err != nil {
		return nil, fmt.Errorf("finetune: lora: %w", err)
	}
	mo, err := cfg.ModelOptions(mc)
	if err != nil {
		return nil, err
	}
	w := llama.Work{Train: true, Recompute: opt.Recompute, Moments: 2, Batch: opt.Batch, SeqLen: opt.SeqLen, Micro: 1, LoRA: a, BaseDType: mo.BaseDType, Activations: mo.Activations}
	m := llama.Memory(mc, w)
	return &LoRAMemory{Rank: a.R, Alpha: a.LoRAAlpha, Targets: a.TargetModules, AdapterParams: mc.AdapterParams(a),
		BaseDType: mo.BaseDType.String(), Precision: p.String(), Batch: opt.Batch, SeqLen: opt.SeqLen, Recompute: opt.Recompute,
		Params: m.Params, OptimizerState: m.Optimizer, Workspace: m.Workspace, Total: m.Total()}, nil
}
