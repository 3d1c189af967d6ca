package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/options"
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
	recompute   string
	// loraAlpha and loraRSLoRA are an inspected adapter's (0: 2·rank).
	loraAlpha  float64
	loraRSLoRA bool
	download   bool
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
--seq-len tokens, without activation recomputation, with selective (the norms'
outputs and SwiGLU's recomputed, no GEMM again) and with full recomputation.

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
	options.IntRange(fl, &f.batch, "batch", 1, 1, maxInspectBatch, "", "sequences per step for the activation estimate")
	options.IntRange(fl, &f.seqLen, "seq-len", 0, 1, checkpoints.MaxPositions, "the default", "tokens per sequence for the activation estimate (default min(2048, max_position_embeddings))")
	fl.StringVar(&f.precision, "precision", "f32", "training precision: f32, or bf16 (mixed: bf16 activations and weight copies, fp32 master weights, gradients and moments)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of a table")
	fl.BoolVar(&f.verify, "verify", false, "check a training checkpoint's files against its checkpoint.json")
	options.IntRange(fl, &f.lora, "lora", 0, 1, checkpoints.MaxLoRARank, "none", "also size a LoRA fine-tune of this rank (the base frozen in its stored dtype), as finetune's preflight does")
	fl.StringVar(&f.loraTargets, "lora-targets", "q_proj,k_proj,v_proj,o_proj", "the LoRA fine-tune's projections (with --lora)")
	downloadFlag(fl, &f.download)
	fl.StringVar(&f.recompute, "recompute", "none", "the LoRA fine-tune's activation recomputation (with --lora): none, selective or full (alone: full)")
	fl.Lookup("recompute").NoOptDefVal = "full"
	return cmd
}

func runInspect(cmd *cobra.Command, args []string, f inspectFlags) error {
	if (len(args) == 1) == (f.preset != "") {
		return errors.New("inspect: give a checkpoint folder or --preset NAME (one of them)")
	}
	if len(args) == 1 {
		if err := fetchModel(cmd, f.download, args[0]); err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
	}
	if len(args) == 1 && !f.verify {
		// A LoRA adapter (a run's RUN/final, a LoRA run or checkpoint) is
		// inspected as its base with the adapter's fine-tune sized.
		ref, err := resolveAdapted(cmd.ErrOrStderr(), "model", args[0], "")
		if err != nil {
			return fmt.Errorf("inspect: %w", err)
		}
		if ref.Adapter != "" && f.lora == 0 {
			lc, err := finetune.AdapterLoRA(ref)
			if err != nil {
				return fmt.Errorf("inspect: %w", err)
			}
			f.lora, f.loraTargets, f.loraAlpha, f.loraRSLoRA = lc.Rank, lc.Targets, lc.Alpha, lc.RSLoRA
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
	precision, err := engine.ParsePrecision(f.precision)
	if err != nil {
		return fmt.Errorf("inspect: --precision: %w", err)
	}
	var rec finetune.Recompute
	if err := rec.UnmarshalText([]byte(f.recompute)); err != nil {
		return fmt.Errorf("inspect: --recompute: %w", err)
	}
	opt := finetune.InspectOptions{Batch: f.batch, Precision: precision, Recompute: llama.Recompute(rec),
		LoRA: finetune.LoRA{Rank: f.lora, Alpha: f.loraAlpha, RSLoRA: f.loraRSLoRA, Targets: f.loraTargets}}
	if _, err := opt.LoRA.Adapter(""); err != nil {
		return fmt.Errorf("inspect: --lora: %w", err)
	}
	var (
		source string
		cfg    *checkpoints.Config
		ck     *checkpoints.Checkpoint
	)
	if f.preset != "" {
		p, err := checkpoints.LookupPreset(f.preset)
		if err != nil {
			return fmt.Errorf("inspect: --preset: %w", err)
		}
		source, cfg = "preset "+p.Name, p.Config()
	} else {
		if ck, err = checkpoints.Open(args[0]); err != nil {
			return err
		}
		defer ck.Close()
		source, cfg = args[0], ck.Config
	}
	if opt.SeqLen, err = cfg.SeqLen(f.seqLen); err != nil {
		return fmt.Errorf("inspect: %s: --seq-len %w", source, err)
	}
	rep, err := finetune.InspectModel(source, cfg, ck, opt)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	out := cmd.OutOrStdout()
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(out)
}
