package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/bench"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

type benchDecodeFlags struct {
	preset    string
	batch     int
	promptLen int
	newTokens int
	repeat    int
	engine    engineFlags
}

// benchDecodeResult is the JSON line `bench decode` prints.
type benchDecodeResult struct {
	Preset string `json:"preset"`
	bench.DecodeResult
}

func newBenchDecodeCmd() *cobra.Command {
	var f benchDecodeFlags
	cmd := &cobra.Command{
		Use:   "decode [--preset small] [--batch 8] [--prompt-len 32] [--new-tokens 128]",
		Short: "Measure batched greedy decoding with the KV cache",
		Long: `bench decode generates --new-tokens greedily for --batch random prompts of
--prompt-len tokens on a randomly initialised preset and prints one JSON line:
the aggregate generated tokens per second (prefill included), the median of
--repeat runs after a warm-up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchDecode(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.preset, "preset", "small", "model shape (see 'memtrain inspect --help')")
	options.IntRange(fl, &f.batch, "batch", 8, 1, units.MaxCount, "", "prompts decoded together")
	options.IntRange(fl, &f.promptLen, "prompt-len", 32, 1, checkpoints.MaxPositions, "", "tokens per prompt")
	options.IntRange(fl, &f.newTokens, "new-tokens", 128, 1, checkpoints.MaxPositions, "", "tokens generated per prompt")
	options.IntRange(fl, &f.repeat, "repeat", 3, 1, maxBenchRuns, "", "timed runs; the median is reported")
	f.engine.register(fl)
	return cmd
}

func runBenchDecode(cmd *cobra.Command, f benchDecodeFlags) error {
	p, err := checkpoints.LookupPreset(f.preset)
	if err != nil {
		return fmt.Errorf("bench decode: --preset: %w", err)
	}
	cfg := p.Config()
	// Every count has its bound before anything is sized from it: the
	// prompts and their continuations within the model's positions (the
	// KV cache), the batch by the preflight below.
	maxPos := cfg.MaxPositionEmbeddings
	switch {
	case f.promptLen >= maxPos:
		return fmt.Errorf("bench decode: --prompt-len %d: want 1 to %d (%s's max_position_embeddings %d, less a new token)", f.promptLen, maxPos-1, f.preset, maxPos)
	case f.newTokens > maxPos-f.promptLen:
		return fmt.Errorf("bench decode: --new-tokens %d: want 1 to %d (--prompt-len %d and the new tokens within %s's max_position_embeddings %d)", f.newTokens, maxPos-f.promptLen, f.promptLen, f.preset, maxPos)
	}
	if n := cfg.Params().Total; n > maxInitParams {
		return fmt.Errorf("bench decode: %s has %s parameters, too many for a CPU benchmark", f.preset, units.FormatCount(n))
	}
	if err := f.engine.preflight("bench decode: "+f.preset, cfg, llama.Work{Batch: f.batch, SeqLen: f.promptLen, NewTokens: f.newTokens}); err != nil {
		return err
	}
	b, err := f.engine.backend()
	if err != nil {
		return err
	}
	res, err := bench.Decode(b, cfg, bench.DecodeOptions{Batch: f.batch, PromptLen: f.promptLen, NewTokens: f.newTokens, Repeat: f.repeat})
	if err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(benchDecodeResult{f.preset, res})
}
