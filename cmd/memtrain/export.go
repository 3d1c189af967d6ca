package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/internal/units"
)

type exportFlags struct {
	out          string
	dtype        string
	maxShardSize string
}

func newExportCmd() *cobra.Command {
	var f exportFlags
	cmd := &cobra.Command{
		Use:   "export CKPT|RUN --out DIR",
		Short: "Write a checkpoint, sharded or not, as a HuggingFace checkpoint folder",
		Long: `export writes a checkpoint as a HuggingFace checkpoint folder: config.json, the
tokenizer files, and the weights by HF name in model.safetensors, or in
model-0000i-of-0000N.safetensors files with model.safetensors.index.json when
they exceed --max-shard-size. CKPT is a checkpoint folder (an HF one, or a
training checkpoint saved on any grid, whose weights are in pieces); RUN, a run
folder, exports its latest checkpoint.

It streams: each tensor is read from the pieces that hold it and written a
block at a time, so that it never holds more than one tensor in memory. DIR
must be new (or an empty folder); it is written under a temporary name and
renamed into place once complete.`,
		Example: `  memtrain export run --out run-hf
  memtrain export run/checkpoints/step-00000200 --out hf --dtype bf16 --max-shard-size 5GB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runExport(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "the HF checkpoint folder to write (new or empty)")
	fl.StringVar(&f.dtype, "dtype", "f32", "weights as f32 or bf16")
	fl.StringVar(&f.maxShardSize, "max-shard-size", "5GB", "largest weights file, as 5GB or 500MiB; 0 writes one model.safetensors")
	return cmd
}

func runExport(cmd *cobra.Command, src string, f exportFlags) error {
	if f.out == "" {
		return errors.New("export: give the folder to write with --out DIR")
	}
	var dtype checkpoints.DType
	switch strings.ToLower(f.dtype) {
	case "f32":
		dtype = checkpoints.DTypeF32
	case "bf16":
		dtype = checkpoints.DTypeBF16
	default:
		return fmt.Errorf("export: --dtype %q: want f32 or bf16", f.dtype)
	}
	limit, err := units.ParseBytes(f.maxShardSize)
	if err != nil {
		return fmt.Errorf("export: --max-shard-size: %w", err)
	}
	dir, err := resolveModel(cmd.ErrOrStderr(), src)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	opt := checkpoints.ExportOptions{DType: dtype, MaxShardBytes: limit}
	var bar *progressbar.ProgressBar
	if isTerminal(cmd.ErrOrStderr()) {
		opt.Progress = func(done, total int) {
			if bar == nil {
				bar = newBar(cmd.ErrOrStderr(), total, "export")
			}
			bar.Set(done)
		}
	}
	err = checkpoints.Export(dir, f.out, opt)
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "exported %s to %s (%s)\n", dir, f.out, dtype)
	return nil
}
