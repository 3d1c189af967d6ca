// Package bench measures the model on a backend, as `memtrain bench step`
// and `memtrain bench decode` report it: training steps (Step) and
// batched greedy decoding (Decode) of a model of a given configuration
// with random weights on random tokens. The results are the commands'
// JSON lines. It sits above the engine: no engine package imports it.
package bench

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/stats"
	"github.com/memtrain/memtrain/internal/units"
)

// MaxRuns bounds the timed runs of a measurement (Step's steps,
// Decode's runs), whose times are kept.
const MaxRuns = 1_000_000

// RecomputeMode is o.Recompute as the engine names it.
func (o StepOptions) RecomputeMode() llama.Recompute {
	if o.Recompute {
		return llama.RecomputeFull
	}
	return llama.RecomputeNone
}

// StepOptions are the shape of a Step measurement.
type StepOptions struct {
	Batch, SeqLen int  // sequences a step, tokens a sequence
	Steps         int  // timed steps after one warm-up step
	Recompute     bool // full recomputation (llama.RecomputeFull)
	// Activations is the model's activation dtype (llama.Options):
	// F32, or BF16 for mixed precision.
	Activations engine.DType
	// GEMM is the product timed for StepResult.GEMMGFLOPs; zero: 2048³.
	// With BF16 activations it is the product of bf16 operands
	// (gemm.GemmBF16) that the step's own products are, and the kernel
	// peak that product's kernel's.
	GEMM gemm.Shape
	// Progress, if not nil, is called after each of the Steps+1 steps.
	Progress func()
}

// StepResult is a Step measurement, a JSON line of `memtrain bench step`
// (after its "preset").
type StepResult struct {
	Params             int64   `json:"params"`
	Batch              int     `json:"batch"`
	SeqLen             int     `json:"seq_len"`
	Threads            int     `json:"threads"`
	GEMM               string  `json:"gemm"`
	Recompute          bool    `json:"recompute"`
	Precision          string  `json:"precision"`
	StepMS             float64 `json:"step_ms_median"`
	TokensPerS         float64 `json:"tokens_per_s"`
	ModelFLOPsPerToken float64 `json:"model_flops_per_token"`
	AchievedGFLOPs     float64 `json:"achieved_gflops"`
	GEMMGFLOPs         float64 `json:"gemm_gflops"`
	Efficiency         float64 `json:"efficiency"`
	// KernelPeakGFLOPs is the GEMM's micro-kernel alone on every thread
	// (gemm.KernelPeak), the rate no step can beat on this CPU, and
	// PeakFraction the achieved rate's share of it; both 0 (and left
	// out) when the GEMM is not the Go path.
	KernelPeakGFLOPs float64 `json:"kernel_peak_gflops,omitempty"`
	PeakFraction     float64 `json:"peak_fraction,omitempty"`
	// Memory: the engine's accounting of what the model allocates
	// (llama.Memory: weights, gradients, AdamW's moments, a matrix's bf16
	// copy in mixed precision, the workspace), the workspace alone, and
	// the process's peak resident set, which includes the matrices of the
	// GEMM timed beside the steps, 4·(M·K + K·N + M·N) bytes.
	EngineBytes int64 `json:"engine_bytes"`
	// AllocatedBytes is measured: the backend's peak of tensor memory
	// (MemStats) over the steps, from the model's creation on.
	AllocatedBytes  int64 `json:"allocated_bytes"`
	ActivationBytes int64 `json:"activation_bytes"`
	PeakRSSBytes    int64 `json:"peak_rss_bytes,omitempty"`
}

// Step builds a model of cfg with random weights on backend b and times
// full training steps (forward, backward, AdamW) on random tokens: one
// warm-up step, then the median of o.Steps. It reports tokens/s, model
// FLOPs per token (engine.ModelFLOPsPerToken) and the GFLOP/s they make,
// and their ratio (Efficiency) to the GFLOP/s of g, the backend's matrix
// multiply, on o.GEMM, timed once after each step (the median), with the engine's memory
// accounting and the process's peak RSS (Linux; 0 elsewhere).
func Step(b engine.Backend, g gemm.Impl, cfg *checkpoints.Config, o StepOptions) (StepResult, error) {
	if o.Batch < 1 || o.SeqLen < 1 || o.Steps < 1 {
		return StepResult{}, fmt.Errorf("bench: want a positive batch, sequence length and step count (got %d, %d, %d)", o.Batch, o.SeqLen, o.Steps)
	}
	if o.SeqLen > cfg.MaxPositionEmbeddings {
		return StepResult{}, fmt.Errorf("bench: sequences of %d tokens exceed max_position_embeddings %d", o.SeqLen, cfg.MaxPositionEmbeddings)
	}
	if o.Steps > MaxRuns {
		return StepResult{}, fmt.Errorf("bench: %d timed steps (want at most %d)", o.Steps, MaxRuns)
	}
	if _, ok := units.MulInt(int64(o.Batch), int64(o.SeqLen)); !ok {
		return StepResult{}, fmt.Errorf("bench: a batch of %d sequences of %d tokens overflows", o.Batch, o.SeqLen)
	}
	if o.GEMM == (gemm.Shape{}) {
		o.GEMM = gemm.Shape{M: 2048, N: 2048, K: 2048}
	}
	base := b.MemStats().Allocated
	rec := o.RecomputeMode()
	m, err := llama.New(b, cfg, llama.Options{Recompute: rec, Activations: o.Activations})
	if err != nil {
		return StepResult{}, err
	}
	defer m.Free()
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		return StepResult{}, err
	}
	tr := NewTrainer(b, m)
	defer tr.Free()
	r := rand.New(rand.NewPCG(1, 2))
	n := o.Batch * o.SeqLen
	batch := llama.Batch{B: o.Batch, T: o.SeqLen, IDs: make([]int32, n), Targets: make([]int32, n)}
	for i := range batch.IDs {
		batch.IDs[i] = int32(r.IntN(cfg.VocabSize))
		batch.Targets[i] = int32(r.IntN(cfg.VocabSize))
	}
	step := func() error {
		_, err := tr.Step(batch)
		if err == nil && o.Progress != nil {
			o.Progress()
		}
		return err
	}
	if err := step(); err != nil {
		return StepResult{}, err
	}
	// Each step is followed by one run of the GEMM, so that the two see
	// the same machine state and Efficiency holds on a loaded machine.
	half := o.Activations == engine.BF16
	probe := gemm.NewProbe(g, o.GEMM)
	if half {
		probe = gemm.NewProbeBF16(g, o.GEMM)
	}
	times, gemmTimes := make([]float64, o.Steps), make([]float64, o.Steps)
	for i := range times {
		start := time.Now()
		if err := step(); err != nil {
			return StepResult{}, err
		}
		times[i] = time.Since(start).Seconds()
		gemmTimes[i] = probe.Seconds()
	}
	med := stats.Median(times)
	res := StepResult{
		Params: cfg.Params().Total, Batch: o.Batch, SeqLen: o.SeqLen,
		Threads: b.Threads(), GEMM: g.Name(), Recompute: o.Recompute, Precision: precisionName(o.Activations),
		StepMS:             med * 1e3,
		TokensPerS:         float64(n) / med,
		ModelFLOPsPerToken: engine.ModelFLOPsPerToken(cfg, o.SeqLen),
		PeakRSSBytes:       peakRSS(),
	}
	res.AllocatedBytes = b.MemStats().Peak - base
	mem := llama.Memory(cfg, llama.Work{Train: true, Recompute: rec, Micro: 1, Moments: 2, Batch: o.Batch, SeqLen: o.SeqLen, Activations: o.Activations})
	res.EngineBytes, res.ActivationBytes = mem.Total(), mem.Workspace
	res.AchievedGFLOPs = res.TokensPerS * res.ModelFLOPsPerToken / 1e9
	res.GEMMGFLOPs = o.GEMM.Flops() / stats.Median(gemmTimes) / 1e9
	res.Efficiency = res.AchievedGFLOPs / res.GEMMGFLOPs
	if peak, ok := gemm.KernelPeak(g, kernelPeakTime, half); ok {
		res.KernelPeakGFLOPs, res.PeakFraction = peak, res.AchievedGFLOPs/peak
	}
	return res, nil
}

// kernelPeakTime is how long Step times the GEMM's micro-kernel alone.
const kernelPeakTime = 300 * time.Millisecond

// precisionName is the precision a step ran at, as the precision key and
// --precision spell it.
func precisionName(act engine.DType) string {
	if act == engine.BF16 {
		return "bf16"
	}
	return "f32"
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

// Trainer is one rank's training step as finetune.TrainStep takes it: the
// loss and the gradient norm kept on the device (llama.StepSums), one
// fused AdamW (Backend.AdamWStep, refreshing any bf16 weight copies)
// clipped at 1 and checked there, and the sums read once after it — the
// step's one host synchronisation. Step times it; engine/cuda's GPU
// benchmark runs it on a GPU, so both measure the step that trains.
type Trainer struct {
	m    *llama.Model
	b    engine.Backend
	ts   []engine.AdamWTensors
	step int
}

// NewTrainer allocates AdamW's moments for m's parameters on b.
func NewTrainer(b engine.Backend, m *llama.Model) *Trainer {
	t := &Trainer{m: m, b: b}
	for _, p := range m.Params() {
		t.ts = append(t.ts, engine.AdamWTensors{Param: p.Value, Grad: p.Grad, Copy: p.Copy,
			M: b.Alloc(engine.F32, p.Value.Shape...), V: b.Alloc(engine.F32, p.Value.Shape...), WeightDecay: 0.1})
	}
	return t
}

// Step trains on batch, every token weighted alike, and returns the
// step's mean loss.
func (t *Trainer) Step(batch llama.Batch) (float64, error) {
	t.step++
	t.m.ZeroGrads()
	sums := t.m.StepSums(1)
	if err := t.m.ForwardBackwardSum(batch, 1/float32(batch.B*batch.T), sums, 0); err != nil {
		return 0, err
	}
	if err := t.m.FinishStep(sums, 1); err != nil {
		return 0, err
	}
	t.b.AdamWStep(t.ts, engine.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: t.step}, 1, sums.Control())
	// Read is the step's synchronisation, as in finetune.TrainStep: its
	// download waits for everything issued before it.
	v := sums.Read()
	return v.Loss / float64(batch.B*batch.T), nil
}

// Free releases the moments.
func (t *Trainer) Free() {
	for _, x := range t.ts {
		t.b.Free(x.M)
		t.b.Free(x.V)
	}
	t.ts = nil
}
