package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/units"
)

// maxInspectBatch bounds --batch: a million sequences a step is beyond
// any machine, and the accounting beyond it would only saturate.
const maxInspectBatch = 1 << 20

type inspectFlags struct {
	preset    string
	batch     int
	seqLen    int
	precision string
	json      bool
	verify    bool
	// lora, when positive, adds a LoRA fine-tune of this rank on
	// loraTargets to the report.
	lora        int
	loraTargets string
	recompute   bool
	// loraAlpha and loraRSLoRA are an inspected adapter's (0: 2·rank).
	loraAlpha  float64
	loraRSLoRA bool
}

// inspectReport is what `inspect --json` prints.
type inspectReport struct {
	Source     string                  `json:"source"`
	Config     *checkpoints.Config     `json:"config"`
	Params     paramsReport            `json:"params"`
	DTypeBytes map[string]int64        `json:"bytes_per_dtype"`
	Stored     *checkpoints.SetSummary `json:"stored,omitempty"`
	Tokenizer  *tokenizerReport        `json:"tokenizer,omitempty"`
	Training   trainingReport          `json:"training_memory"`
	LoRA       *loraReport             `json:"lora_memory,omitempty"`
}

// loraReport is a LoRA fine-tune's memory on one CPU rank, by the
// engine's own accounting (llama.Memory: what the preflight checks and
// New and the passes allocate).
type loraReport struct {
	Rank          int      `json:"r"`
	Alpha         float64  `json:"lora_alpha"`
	Targets       []string `json:"target_modules"`
	AdapterParams int64    `json:"adapter_params"`
	BaseDType     string   `json:"base_dtype"`
	// Precision is --precision's, as for the full fine-tune (with bf16
	// the base is held in bf16 and the adapters get bf16 copies).
	Precision      string `json:"precision"`
	Batch          int    `json:"batch"`
	SeqLen         int    `json:"seq_len"`
	Recompute      bool   `json:"recompute"`
	Params         int64  `json:"params"`
	OptimizerState int64  `json:"optimizer_state"`
	Workspace      int64  `json:"workspace"`
	Total          int64  `json:"total"`
}

type paramsReport struct {
	Total        int64 `json:"total"`
	NonEmbedding int64 `json:"non_embedding"`
	Embedding    int64 `json:"embedding"`
	PerLayer     int64 `json:"per_layer"`
}

type tokenizerReport struct {
	Family    string `json:"family"`
	VocabSize int    `json:"vocab_size"`
	Error     string `json:"error,omitempty"`
}

type trainingReport struct {
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
}

func newInspectCmd() *cobra.Command {
	var f inspectFlags
	var presetNames []string
	for _, p := range checkpoints.Presets() {
		presetNames = append(presetNames, fmt.Sprintf("  %-14s %s", p.Name, p.Description))
	}
	cmd := &cobra.Command{
		Use:   "inspect DIR | --preset NAME | CHECKPOINT --verify",
		Short: "Print a checkpoint's config, parameter counts and fine-tuning memory",
		Long: `inspect prints a checkpoint's (or a preset's) configuration, its parameter
counts (total and non-embedding), its size in each dtype, what is stored on
disk, and the memory needed to fully fine-tune it with AdamW: weights,
gradients, the two moments, and activations for --batch sequences of
--seq-len tokens, with and without activation recomputation.

--verify checks a training checkpoint (RUN/checkpoints/step-NNNNNNNN) instead:
every file against the size and SHA-256 its checkpoint.json records. It prints
OK with the number of files, or fails naming the bad file.

Presets:
` + strings.Join(presetNames, "\n"),
		Example: `  memtrain inspect ./tiny
  memtrain inspect --preset llama3.1-405b --seq-len 8192 --precision bf16 --json
  memtrain inspect run/checkpoints/step-00000050 --verify`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runInspect(cmd, args, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.preset, "preset", "", "inspect a preset shape instead of a checkpoint folder")
	fl.IntVar(&f.batch, "batch", 1, "sequences per step for the activation estimate")
	fl.IntVar(&f.seqLen, "seq-len", 0, "tokens per sequence for the activation estimate (default min(2048, max_position_embeddings))")
	fl.StringVar(&f.precision, "precision", "f32", "training precision: f32, or bf16 (mixed: bf16 activations and weight copies, fp32 master weights, gradients and moments)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of a table")
	fl.BoolVar(&f.verify, "verify", false, "check a training checkpoint's files against its checkpoint.json")
	fl.IntVar(&f.lora, "lora", 0, "also size a LoRA fine-tune of this rank (the base frozen in its stored dtype), as finetune's preflight does")
	fl.StringVar(&f.loraTargets, "lora-targets", "q_proj,k_proj,v_proj,o_proj", "the LoRA fine-tune's projections (with --lora)")
	fl.BoolVar(&f.recompute, "recompute", false, "the LoRA fine-tune recomputes activations (with --lora)")
	return cmd
}

func runInspect(cmd *cobra.Command, args []string, f inspectFlags) error {
	if (len(args) == 1) == (f.preset != "") {
		return errors.New("inspect: give a checkpoint folder or --preset NAME (one of them)")
	}
	if len(args) == 1 && !f.verify {
		// A LoRA adapter (a run's RUN/final, a LoRA run or checkpoint) is
		// inspected as its base with the adapter's fine-tune sized.
		ref, err := resolveAdapted(cmd.ErrOrStderr(), "model", args[0], "")
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		if ref.Adapter != "" && f.lora == 0 {
			cfg, err := checkpoints.ReadConfig(ref.Dir)
			if err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			ad, err := checkpoints.OpenAdapter(ref.Adapter, cfg)
			if err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			f.lora, f.loraTargets, f.loraAlpha, f.loraRSLoRA = ad.Config.R, strings.Join(ad.Config.TargetModules, ","), ad.Config.LoRAAlpha, ad.Config.UseRSLoRA
			ad.Close()
		}
		args = []string{ref.Dir}
	} else if len(args) == 1 {
		// Inspect reads a checkpoint's metadata; --verify checks its bytes.
		dir, resolved, err := finetune.ResolvePath(args[0])
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		if resolved {
			fmt.Fprintf(cmd.ErrOrStderr(), "memtrain: model: %s → %s\n", args[0], dir)
		}
		args = []string{dir}
	}
	if f.verify {
		if len(args) != 1 {
			return errors.New("inspect: --verify checks a checkpoint folder, not a preset")
		}
		m, err := finetune.VerifyCheckpoint(args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: OK, %d files verified (step %d)\n", args[0], len(m.Files), m.Step)
		return nil
	}
	switch {
	case f.batch <= 0:
		return fmt.Errorf("inspect: --batch %d: want 1 or more", f.batch)
	case f.seqLen < 0:
		return fmt.Errorf("inspect: --seq-len %d: want 1 or more (0: the default)", f.seqLen)
	}
	if f.batch > maxInspectBatch {
		return fmt.Errorf("inspect: --batch %d: want at most %d sequences", f.batch, maxInspectBatch)
	}
	if f.lora < 0 || f.lora > checkpoints.MaxLoRARank {
		return fmt.Errorf("inspect: --lora %d: want a rank of 1 to %d (0: none)", f.lora, checkpoints.MaxLoRARank)
	}
	precision, err := engine.ParsePrecision(f.precision)
	if err != nil {
		return fmt.Errorf("inspect: --precision: %w", err)
	}
	rep := inspectReport{}
	if f.preset != "" {
		p, err := checkpoints.LookupPreset(f.preset)
		if err != nil {
			return fmt.Errorf("inspect: --preset: %w", err)
		}
		rep.Source, rep.Config = "preset "+p.Name, p.Config()
	} else {
		ck, err := checkpoints.Open(args[0])
		if err != nil {
			return err
		}
		defer ck.Close()
		rep.Source, rep.Config = args[0], ck.Config
		stored := ck.Weights.Summary()
		rep.Stored = &stored
		if path := ck.TokenizerPath(); path != "" {
			tr := &tokenizerReport{}
			if tok, _, err := openTokenizer(path); err != nil {
				tr.Error = err.Error()
			} else {
				tr.Family, tr.VocabSize = tok.Family(), tok.VocabSize()
			}
			rep.Tokenizer = tr
		}
	}
	cfg := rep.Config
	pc := cfg.Params()
	rep.Params = paramsReport{Total: pc.Total, NonEmbedding: pc.NonEmbedding, Embedding: pc.Embedding, PerLayer: pc.PerLayer}
	rep.DTypeBytes = map[string]int64{}
	for _, d := range []checkpoints.DType{checkpoints.DTypeF32, checkpoints.DTypeBF16, checkpoints.DTypeF16} {
		rep.DTypeBytes[d.String()] = pc.Total * int64(d.Size())
	}
	seq := f.seqLen
	if seq == 0 {
		seq = cfg.DefaultSeqLen()
	}
	if seq > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("inspect: --seq-len %d exceeds %s's max_position_embeddings %d", seq, rep.Source, cfg.MaxPositionEmbeddings)
	}
	rep.Training = trainingMemory(cfg, f.batch, seq, precision)
	if f.lora != 0 {
		if rep.LoRA, err = loraMemory(rep, f, seq, precision); err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
	}
	out := cmd.OutOrStdout()
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printInspect(out, rep)
}

func printInspect(w io.Writer, r inspectReport) error {
	c := r.Config
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t%s\n", k, fmt.Sprintf(format, args...)) }
	row("model", "%s", r.Source)
	row("architecture", "LlamaForCausalLM")
	row("hidden_size", "%d", c.HiddenSize)
	row("intermediate_size", "%d", c.IntermediateSize)
	row("num_hidden_layers", "%d", c.NumHiddenLayers)
	row("attention heads", "%d (kv %d, head_dim %d)", c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDimension())
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
	row("  activations", "%s (with recomputation %s; the engine's workspace)", engine.FormatNeed(t.Activations), engine.FormatNeed(t.ActivationsRecompute))
	row("  total", "%s (with recomputation %s)", engine.FormatNeed(t.Total), engine.FormatNeed(t.TotalRecompute))
	if l := r.LoRA; l != nil {
		fmt.Fprintln(tw)
		recompute := ""
		if l.Recompute {
			recompute = ", recomputation"
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

// trainingMemory is a full AdamW fine-tune of cfg on one rank, batch
// sequences of seq tokens at precision p, with and without activation
// recomputation, by the engine's own accounting (llama.Itemize: what
// finetune's preflight checks, and what New and the passes allocate).
func trainingMemory(cfg *checkpoints.Config, batch, seq int, p engine.Precision) trainingReport {
	w := llama.Work{Train: true, Moments: 2, Batch: batch, SeqLen: seq, Micro: 1, Activations: p.Activations()}
	it := llama.Itemize(cfg, w)
	w.Recompute = true
	rec := llama.Itemize(cfg, w)
	return trainingReport{
		Optimizer: "AdamW", Precision: p.String(), Batch: batch, SeqLen: seq,
		Weights: it.Weights, Gradients: it.Gradients, OptimizerState: it.Optimizer,
		Activations: it.Activations, ActivationsRecompute: rec.Activations,
		Total: it.Total(), TotalRecompute: rec.Total(),
	}
}

// loraMemory sizes the LoRA fine-tune of f on the report's model at
// precision p: the base held as lora.base_dtype auto holds it (its stored
// dtype, bf16 with bf16 activations), by llama.Memory, the accounting
// finetune's preflight checks.
func loraMemory(rep inspectReport, f inspectFlags, seq int, p engine.Precision) (*loraReport, error) {
	lc := finetune.LoRA{Rank: f.lora, Alpha: f.loraAlpha, RSLoRA: f.loraRSLoRA, Targets: f.loraTargets, BaseDType: "auto"}
	cfg := finetune.DefaultConfig()
	cfg.LoRA, cfg.Recompute, cfg.Precision = lc, f.recompute, p.String()
	a, err := lc.Adapter("")
	if err != nil {
		return nil, fmt.Errorf("--lora: %w", err)
	}
	opt, err := cfg.ModelOptions(rep.Config)
	if err != nil {
		return nil, err
	}
	w := llama.Work{Train: true, Recompute: f.recompute, Moments: 2, Batch: f.batch, SeqLen: seq, Micro: 1, LoRA: a, BaseDType: opt.BaseDType, Activations: opt.Activations}
	m := llama.Memory(rep.Config, w)
	return &loraReport{Rank: a.R, Alpha: a.LoRAAlpha, Targets: a.TargetModules, AdapterParams: rep.Config.AdapterParams(a),
		BaseDType: opt.BaseDType.String(), Precision: p.String(), Batch: f.batch, SeqLen: seq, Recompute: f.recompute,
		Params: m.Params, OptimizerState: m.Optimizer, Workspace: m.Workspace, Total: m.Total()}, nil
}
