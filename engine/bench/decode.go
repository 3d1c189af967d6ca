package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/stats"
)

// DecodeOptions are the shape of a Decode measurement.
type DecodeOptions struct {
	Batch     int // prompts decoded together
	PromptLen int // tokens a prompt
	NewTokens int // tokens generated a prompt
	Repeat    int // timed runs after one warm-up run
}

// DecodeResult is a Decode measurement, a JSON line of `memtrain bench
// decode` (after its "preset").
type DecodeResult struct {
	Batch      int     `json:"batch"`
	PromptLen  int     `json:"prompt_len"`
	NewTokens  int     `json:"new_tokens"`
	Threads    int     `json:"threads"`
	Seconds    float64 `json:"seconds_median"`
	TokensPerS float64 `json:"tokens_per_s"` // generated tokens of the whole batch per second (prefill included)
}

// Decode builds a model of cfg with random weights on backend b and
// times greedy generation with the KV cache (llama.Model.Generate) of
// o.NewTokens tokens for o.Batch random prompts of o.PromptLen tokens:
// one warm-up run, then the median of o.Repeat.
func Decode(b engine.Backend, cfg *checkpoints.Config, o DecodeOptions) (DecodeResult, error) {
	if o.Batch < 1 || o.PromptLen < 1 || o.NewTokens < 1 || o.Repeat < 1 {
		return DecodeResult{}, fmt.Errorf("bench: want a positive batch, prompt length, new tokens and repeat count (got %d, %d, %d, %d)", o.Batch, o.PromptLen, o.NewTokens, o.Repeat)
	}
	// The prompts are made, and the times kept, before the model sees
	// them: their sizes are bounded first (overflow-safe: o.PromptLen +
	// o.NewTokens is not formed).
	if maxPos := cfg.MaxPositionEmbeddings; o.PromptLen > maxPos || o.NewTokens > maxPos-o.PromptLen {
		return DecodeResult{}, fmt.Errorf("bench: prompts of %d tokens and %d new exceed max_position_embeddings %d", o.PromptLen, o.NewTokens, maxPos)
	}
	if o.Repeat > MaxRuns {
		return DecodeResult{}, fmt.Errorf("bench: %d timed runs (want at most %d)", o.Repeat, MaxRuns)
	}
	m, err := llama.New(b, cfg, llama.Options{})
	if err != nil {
		return DecodeResult{}, err
	}
	defer m.Free()
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		return DecodeResult{}, err
	}
	r := rand.New(rand.NewPCG(3, 4))
	prompts := make([][]int32, o.Batch)
	for i := range prompts {
		prompts[i] = make([]int32, o.PromptLen)
		for j := range prompts[i] {
			prompts[i][j] = int32(r.IntN(cfg.VocabSize))
		}
	}
	opt := llama.GenerateOptions{MaxNewTokens: o.NewTokens}
	if _, err := m.Generate(prompts, opt); err != nil {
		return DecodeResult{}, err
	}
	times := make([]float64, o.Repeat)
	for i := range times {
		start := time.Now()
		if _, err := m.Generate(prompts, opt); err != nil {
			return DecodeResult{}, err
		}
		times[i] = time.Since(start).Seconds()
	}
	med := stats.Median(times)
	return DecodeResult{
		Batch: o.Batch, PromptLen: o.PromptLen, NewTokens: o.NewTokens, Threads: b.Threads(),
		Seconds: med, TokensPerS: float64(o.Batch) * float64(o.NewTokens) / med,
	}, nil
}
