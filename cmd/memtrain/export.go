package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/checkpoints/gguf"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/units"
)

type exportFlags struct {
	out, dtype, maxShardSize string
	format                   string // hf (or "", merge's) or gguf
	download                 bool   // fetch a Hub model missing from the cache
}

func newExportCmd() *cobra.Command {
	var f exportFlags
	var adapter string
	cmd := &cobra.Command{
		Use:   "export CKPT|RUN --out DIR|FILE.gguf",
		Short: "Write a checkpoint as a HuggingFace checkpoint folder or a GGUF file (llama.cpp, ollama)",
		Long: `export writes a checkpoint as a HuggingFace checkpoint folder: config.json, the
tokenizer files, and the weights by HF name in model.safetensors, or in
model-0000i-of-0000N.safetensors files with model.safetensors.index.json when
they exceed --max-shard-size. CKPT is a checkpoint folder (an HF one, or a
training checkpoint saved on any grid, whose weights are in pieces); RUN, a run
folder, exports its latest checkpoint. A LoRA run's checkpoint (or the run, or
its RUN/final adapter) exports as its base with the adapter merged in, as
memtrain merge writes it.

It streams: each tensor is read from the pieces that hold it and written a
block at a time, so that it never holds more than one tensor in memory. DIR
must be new (or an empty folder); it is written under a temporary name and
renamed into place once complete.

--format gguf writes one GGUF file instead, for llama.cpp, ollama and LM
Studio, as llama.cpp's converter writes it (--dtype f32, f16, bf16 or q8_0).
--adapter merges a LoRA adapter in, in either format.`,
		Example: `  memtrain export run --out run-hf
  memtrain export run/checkpoints/step-00000200 --out hf --dtype bf16 --max-shard-size 5GB
  memtrain export run --format gguf --dtype q8_0 --out model.gguf
  memtrain export base --adapter run/final --format gguf --out model.gguf`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check("export"); err != nil {
				return err
			}
			if err := fetchModel(cmd, f.download, args[0]); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			ref, err := resolveAdapted(cmd.ErrOrStderr(), "model", args[0], adapter)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			return runExport(cmd, "export", ref, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "the HF checkpoint folder to write (new or empty), or the GGUF file (new)")
	fl.StringVar(&f.format, "format", "hf", "hf (a HuggingFace checkpoint folder) or gguf (one file for llama.cpp and ollama)")
	fl.StringVar(&f.dtype, "dtype", "f32", "weights as f32 or bf16; for gguf also f16 or q8_0")
	fl.StringVar(&f.maxShardSize, "max-shard-size", "5GB", "largest weights file, as 5GB or 500MiB; 0 writes one model.safetensors")
	fl.StringVar(&adapter, "adapter", "", "a LoRA adapter folder (PEFT format, e.g. a LoRA run's RUN/final) to merge in")
	downloadFlag(fl, &f.download)
	return cmd
}

// check refuses bad flags in one line before any model is resolved.
func (f exportFlags) check(what string) error {
	if f.out == "" {
		return fmt.Errorf("%s: give the folder to write with --out DIR", what)
	}
	_, ggufErr := gguf.ParseType(f.dtype)
	switch d := strings.ToLower(f.dtype); {
	case f.format != "hf" && f.format != "" && f.format != "gguf":
		return fmt.Errorf("%s: --format %q: want hf or gguf", what, f.format)
	case f.format == "gguf" && ggufErr != nil:
		return fmt.Errorf("%s: --dtype %q: want f32, f16, bf16 or q8_0", what, f.dtype)
	case f.format != "gguf" && d != "f32" && d != "bf16" && d != "auto":
		return fmt.Errorf("%s: --dtype %q: want f32, bf16 or auto", what, f.dtype)
	}
	if _, err := units.ParseBytes(f.maxShardSize); err != nil {
		return fmt.Errorf("%s: --max-shard-size: %w", what, err)
	}
	return nil
}

// runExport writes the model of ref (its adapter merged in, if it has
// one) as an HF checkpoint folder or a GGUF file; what names the command
// in errors.
func runExport(cmd *cobra.Command, what string, ref finetune.ModelRef, f exportFlags) error {
	if err := f.check(what); err != nil {
		return err
	}
	var ad *checkpoints.Adapter
	if ref.Adapter != "" {
		cfg, err := checkpoints.ReadConfig(ref.Dir)
		if err == nil {
			ad, err = checkpoints.OpenAdapter(ref.Adapter, cfg)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		defer ad.Close()
	}
	var bar *progressbar.ProgressBar
	var progress func(done, total int)
	if isTerminal(cmd.ErrOrStderr()) {
		progress = func(done, total int) {
			if bar == nil {
				bar = newBar(cmd.ErrOrStderr(), total, what, "tensors")
			}
			bar.Set(done)
		}
	}
	written, err := "", error(nil) // the format and dtype, for the message
	if f.format == "gguf" {
		typ, _ := gguf.ParseType(f.dtype) // checked
		written = "GGUF, " + typ.String()
		err = gguf.Export(ref.Dir, f.out, gguf.Options{Type: typ, Adapter: ad, Progress: progress})
	} else {
		var dtype checkpoints.DType
		if dtype, err = checkpoints.ExportDType(ref.Dir, f.dtype); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		limit, _ := units.ParseBytes(f.maxShardSize) // checked
		written = dtype.String()
		err = checkpoints.Export(ref.Dir, f.out, checkpoints.ExportOptions{DType: dtype, MaxShardBytes: limit, Adapter: ad, Progress: progress})
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if ref.Adapter != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (%s): the base %s with the adapter %s merged in; the base is unchanged\n", f.out, written, ref.Dir, ref.Adapter)
		return nil
	}
	fmt.Fprintf(cmd.OutOrStdout(), "exported %s to %s (%s)\n", ref.Dir, f.out, written)
	return nil
}

func newMergeCmd() *cobra.Command {
	var f exportFlags
	var model, adapter string
	cmd := &cobra.Command{
		Use:   "merge --model BASE --adapter DIR --out DIR",
		Short: "Merge a LoRA adapter into its base model, as a HuggingFace checkpoint folder",
		Long: `merge folds a LoRA adapter (PEFT's format: adapter_config.json and
adapter_model.safetensors, as memtrain's LoRA runs write RUN/final and PEFT's
save_pretrained writes) into its base: every adapted weight becomes
W + s·B·A (s = lora_alpha/r, or lora_alpha/√r with use_rslora), computed in
float64 from the weight as stored and rounded once to --dtype. It streams
through the one HF writer, tensor by tensor, as export does.

--model may be omitted when the adapter's base_model_name_or_path is a local
folder, and --adapter when --model names a LoRA run or its adapter.`,
		Example: `  memtrain merge --model base --adapter run/final --out merged
  memtrain merge --adapter run/final --out merged --dtype bf16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check("merge"); err != nil {
				return err
			}
			if model == "" && adapter == "" {
				return errors.New("merge: give the adapter with --adapter DIR (and its base with --model BASE)")
			}
			if model == "" { // the adapter names its base
				model, adapter = adapter, ""
			} else if err := fetchModel(cmd, f.download, model); err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			ref, err := resolveAdapted(cmd.ErrOrStderr(), "model", model, adapter)
			if err != nil {
				return fmt.Errorf("merge: %w", err)
			}
			if ref.Adapter == "" {
				return fmt.Errorf("merge: %s has no adapter to merge: give one with --adapter DIR", model)
			}
			return runExport(cmd, "merge", ref, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&model, "model", "", "the base checkpoint folder (default: the adapter's base_model_name_or_path)")
	fl.StringVar(&adapter, "adapter", "", "the LoRA adapter folder (PEFT format)")
	fl.StringVar(&f.out, "out", "", "the merged HF checkpoint folder to write (new or empty)")
	fl.StringVar(&f.dtype, "dtype", "auto", "weights as f32, bf16, or auto (the base's dtype)")
	fl.StringVar(&f.maxShardSize, "max-shard-size", "5GB", "largest weights file, as 5GB or 500MiB; 0 writes one model.safetensors")
	downloadFlag(fl, &f.download)
	return cmd
}
