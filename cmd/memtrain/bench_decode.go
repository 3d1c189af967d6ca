package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/llama"
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
	Preset     string  `json:"preset"`
	Batch      int     `json:"batch"`
	PromptLen  int     `json:"prompt_len"`
	NewTokens  int     `json:"new_tokens"`
	Threads    int     `json:"threads"`
	Seconds    float64 `json:"seconds_median"`
	TokensPerS float64 `json:"tokens_per_s"` // generated tokens of the whole batch per second (prefill included)
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
	fl.StringVar(&f.preset, "preset", "small", "model shape (see `memtrain inspect --help`)")
	fl.IntVar(&f.batch, "batch", 8, "prompts decoded together")
	fl.IntVar(&f.promptLen, "prompt-len", 32, "tokens per prompt")
	fl.IntVar(&f.newTokens, "new-tokens", 128, "tokens generated per prompt")
	fl.IntVar(&f.repeat, "repeat", 3, "timed runs; the median is reported")
	f.engine.register(fl)
	return cmd
}

func runBenchDecode(cmd *cobra.Command, f benchDecodeFlags) error {
	if f.batch <= 0 || f.promptLen <= 0 || f.newTokens <= 0 || f.repeat <= 0 {
		return errors.New("bench decode: --batch, --prompt-len, --new-tokens and --repeat must be positive")
	}
	p, err := checkpoints.LookupPreset(f.preset)
	if err != nil {
		return err
	}
	cfg := p.Config()
	if n := cfg.Params().Total; n > maxInitParams {
		return fmt.Errorf("bench decode: %s has %s parameters, too many for a CPU benchmark", f.preset, units.FormatCount(n))
	}
	b, err := f.engine.backend()
	if err != nil {
		return err
	}
	m, err := llama.New(b, cfg, llama.Options{})
	if err != nil {
		return err
	}
	defer m.Free()
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(3, 4))
	prompts := make([][]int32, f.batch)
	for i := range prompts {
		prompts[i] = make([]int32, f.promptLen)
		for j := range prompts[i] {
			prompts[i][j] = int32(r.IntN(cfg.VocabSize))
		}
	}
	opt := llama.GenerateOptions{MaxNewTokens: f.newTokens}
	if _, err := m.Generate(prompts, opt); err != nil {
		return fmt.Errorf("bench decode: %w", err)
	}
	times := make([]float64, f.repeat)
	for i := range times {
		start := time.Now()
		if _, err := m.Generate(prompts, opt); err != nil {
			return fmt.Errorf("bench decode: %w", err)
		}
		times[i] = time.Since(start).Seconds()
	}
	med := median(times)
	return json.NewEncoder(cmd.OutOrStdout()).Encode(benchDecodeResult{
		Preset: f.preset, Batch: f.batch, PromptLen: f.promptLen, NewTokens: f.newTokens, Threads: b.Threads(),
		Seconds: med, TokensPerS: float64(f.batch*f.newTokens) / med,
	})
}
