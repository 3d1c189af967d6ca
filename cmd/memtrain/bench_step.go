package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/units"
)

type benchStepFlags struct {
	preset    string
	batch     int
	seqLen    int
	steps     int
	recompute bool
	engine    engineFlags
}

// benchStepResult is the JSON line `bench step` prints.
type benchStepResult struct {
	Preset             string  `json:"preset"`
	Params             int64   `json:"params"`
	Batch              int     `json:"batch"`
	SeqLen             int     `json:"seq_len"`
	Threads            int     `json:"threads"`
	GEMM               string  `json:"gemm"`
	Recompute          bool    `json:"recompute"`
	StepMS             float64 `json:"step_ms_median"`
	TokensPerS         float64 `json:"tokens_per_s"`
	ModelFLOPsPerToken float64 `json:"model_flops_per_token"`
	AchievedGFLOPs     float64 `json:"achieved_gflops"`
	GEMMGFLOPs         float64 `json:"gemm_gflops"`
	Efficiency         float64 `json:"efficiency"`
	// Memory: the engine's accounting (16 bytes a parameter for weights,
	// gradients and AdamW's moments, plus the activation workspace) and
	// the process's peak resident set.
	EngineBytes     int64 `json:"engine_bytes"`
	ActivationBytes int64 `json:"activation_bytes"`
	PeakRSSBytes    int64 `json:"peak_rss_bytes,omitempty"`
}

func newBenchStepCmd() *cobra.Command {
	var f benchStepFlags
	cmd := &cobra.Command{
		Use:   "step --preset P --batch B --seq-len T",
		Short: "Measure a full training step (forward, backward, AdamW)",
		Long: `bench step times training steps of a randomly initialised preset on random
tokens and prints one JSON line: tokens/s, model FLOPs per token
(6·N + 12·L·heads·D·T), the achieved GFLOP/s, memtrain's own float32 GEMM at
2048³ measured in the same run, and their ratio (efficiency), with the
engine's memory accounting beside the process's peak RSS.`,
		Example: `  memtrain bench step --preset small --batch 4 --seq-len 256`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runBenchStep(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.preset, "preset", "small", "model shape (see `memtrain inspect --help`)")
	fl.IntVar(&f.batch, "batch", 4, "sequences per step")
	fl.IntVar(&f.seqLen, "seq-len", 256, "tokens per sequence")
	fl.IntVar(&f.steps, "steps", 5, "timed steps (after one warm-up step); the median is reported")
	fl.BoolVar(&f.recompute, "recompute", false, "recompute activations in the backward pass")
	f.engine.register(fl)
	return cmd
}

func runBenchStep(cmd *cobra.Command, f benchStepFlags) error {
	if f.batch <= 0 || f.seqLen <= 0 || f.steps <= 0 {
		return errors.New("bench step: --batch, --seq-len and --steps must be positive")
	}
	p, err := checkpoints.LookupPreset(f.preset)
	if err != nil {
		return err
	}
	cfg := p.Config()
	if f.seqLen > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("bench step: --seq-len %d exceeds %s's max_position_embeddings %d", f.seqLen, f.preset, cfg.MaxPositionEmbeddings)
	}
	if n := cfg.Params().Total; n > maxInitParams {
		return fmt.Errorf("bench step: %s has %s parameters, too many for a CPU step", f.preset, units.FormatCount(n))
	}
	b, g, err := f.engine.build()
	if err != nil {
		return err
	}
	m, err := llama.New(b, cfg, llama.Options{Recompute: f.recompute})
	if err != nil {
		return err
	}
	defer m.Free()
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		return err
	}
	type moments struct{ m, v *engine.Tensor }
	state := map[*engine.Param]moments{}
	for _, p := range m.Params() {
		state[p] = moments{b.Alloc(engine.F32, p.Value.Shape...), b.Alloc(engine.F32, p.Value.Shape...)}
	}
	defer func() {
		for _, s := range state {
			b.Free(s.m)
			b.Free(s.v)
		}
	}()
	r := rand.New(rand.NewPCG(1, 2))
	n := f.batch * f.seqLen
	batch := llama.Batch{B: f.batch, T: f.seqLen, IDs: make([]int32, n), Targets: make([]int32, n)}
	for i := range batch.IDs {
		batch.IDs[i] = int32(r.IntN(cfg.VocabSize))
		batch.Targets[i] = int32(r.IntN(cfg.VocabSize))
	}
	step := func(t int) error {
		m.ZeroGrads()
		if _, err := m.ForwardBackward(batch, float32(1)/float32(n)); err != nil {
			return err
		}
		for _, p := range m.Params() {
			s := state[p]
			b.AdamW(p.Value, p.Grad, s.m, s.v, engine.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: t})
		}
		return b.Synchronize()
	}
	if err := step(1); err != nil {
		return err
	}
	times := make([]float64, f.steps)
	for i := range times {
		start := time.Now()
		if err := step(i + 2); err != nil {
			return err
		}
		times[i] = time.Since(start).Seconds()
	}
	med := median(times)
	res := benchStepResult{
		Preset: f.preset, Params: cfg.Params().Total, Batch: f.batch, SeqLen: f.seqLen,
		Threads: b.Threads(), GEMM: g.Name(), Recompute: f.recompute,
		StepMS:             med * 1e3,
		TokensPerS:         float64(n) / med,
		ModelFLOPsPerToken: engine.ModelFLOPsPerToken(cfg, f.seqLen),
		ActivationBytes:    llama.ActivationBytes(cfg, f.batch, f.seqLen, true, f.recompute),
		PeakRSSBytes:       peakRSS(),
	}
	res.EngineBytes = 16*res.Params + res.ActivationBytes
	res.AchievedGFLOPs = res.TokensPerS * res.ModelFLOPsPerToken / 1e9
	res.GEMMGFLOPs = timeGemm(g, 2048, 2048, 2048, 3)
	res.Efficiency = res.AchievedGFLOPs / res.GEMMGFLOPs
	return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// peakRSS reads the process's peak resident set (VmHWM) on Linux; 0
// elsewhere.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
