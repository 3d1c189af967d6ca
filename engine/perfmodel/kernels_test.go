package perfmodel

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestStepIsTheKernelList ties the plan to the kernel list: its kernel
// time, class by class, is the sum over every kernel of the step's whole
// list (llama.Kernels, every layer and micro-batch) of its modelled time,
// and its step time that plus the exposed communication — though
// estimate extrapolates from lists of one and two layers and one
// micro-batch (stepTime). The sums differ only by floating-point
// rounding: 1e-12 relative.
func TestStepIsTheKernelList(t *testing.T) {
	h200, _ := LookupDevice("h200")
	measured := Device{Name: "cpu", PeakFLOPs: 1e11, MemoryBytes: 64e9, HBMBandwidth: 2e10, NodeSize: 4,
		IntraNodeBandwidth: 4e9, InterNodeBandwidth: 4e9, Efficiency: 0.5, SharedNode: true}
	cases := []struct {
		model string
		dev   Device
		s     Step
		o     Options
	}{
		{"llama3.1-8b", h200, Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 2048, MicroBatch: 2, MicroBatches: 3}, Options{Precision: engine.PrecisionBF16}},
		{"llama3.1-8b", h200, Step{Grid: Grid{4, 1, 1, 1}, SeqLen: 8192, MicroBatch: 1, MicroBatches: 2, Recompute: llama.RecomputeFull}, Options{Precision: engine.PrecisionBF16}},
		{"llama3.1-8b", h200, Step{Grid: Grid{1, 2, 2, 2}, SeqLen: 4096, MicroBatch: 1, MicroBatches: 2}, Options{}},
		{"tiny", measured, Step{Grid: Grid{1, 2, 1, 2}, SeqLen: 64, MicroBatch: 2, MicroBatches: 4}, Options{}},
	}
	for _, c := range cases {
		cfg := preset(t, c.model)
		p, err := Estimate(cfg, c.dev, c.s, c.o)
		if err != nil {
			t.Fatal(err)
		}
		list, err := llama.Kernels(cfg, c.s.Work(c.o))
		if err != nil {
			t.Fatal(err)
		}
		var want KernelSeconds
		for _, k := range list {
			cost := k.Cost()
			sec := c.dev.kernelSeconds(cost, c.o, c.dev.share(c.s.Grid))
			switch cost.Class {
			case engine.ClassGEMM:
				want.GEMM += sec
			case engine.ClassAttention:
				want.Attention += sec
			case engine.ClassMemory:
				want.Memory += sec
			case engine.ClassHost:
				want.Host += sec
			}
		}
		if c.dev.Kernels == nil { // outside the measured efficiency: the optimizer and a grid's loss passes
			loss := lossSeconds(cfg, c.dev, c.s.Grid, float64(c.s.MicroBatch*c.s.SeqLen*c.s.MicroBatches))
			want.Memory += float64(ShardParams(cfg, c.s.Grid))*c.o.adamBytes()/(c.dev.HBMBandwidth/c.dev.share(c.s.Grid)) + loss
		}
		got := []float64{p.Kernels.GEMM, p.Kernels.Attention, p.Kernels.Memory, p.Kernels.Host, p.StepSeconds}
		if err := numtest.Close(got, []float64{want.GEMM, want.Attention, want.Memory, want.Host, want.Total() + p.ExposedCommSeconds},
			numtest.Tol{Rel: 1e-12}); err != nil {
			t.Errorf("%s on %s, %+v: (GEMM, attention, memory, host, step) seconds against the list's: %v", c.model, c.dev.Name, c.s, err)
		}
		if !strings.HasPrefix(p.Source, "modelled: ") || p.Kernels.Collective != p.ExposedCommSeconds {
			t.Errorf("%s: source %q, collective %g of %g exposed", c.model, p.Source, p.Kernels.Collective, p.ExposedCommSeconds)
		}
	}
}

// TestAttentionShareIsItsKernels: Llama 3.1 8B at T = 8192 on one H200
// in bf16 spends on attention what its attention kernels' FLOPs take at
// the modelled flash kernel's rates, and that share follows the kernel's
// pipes: a slower MMA instruction makes it larger, the GEMMs untouched.
func TestAttentionShareIsItsKernels(t *testing.T) {
	cfg := preset(t, "llama3.1-8b")
	dev, _ := LookupDevice("h200")
	s := Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 8192, MicroBatch: 1, MicroBatches: 1}
	o := Options{Precision: engine.PrecisionBF16}
	p, err := Estimate(cfg, dev, s, o)
	if err != nil {
		t.Fatal(err)
	}
	// Per layer: the forward's 4·D FLOPs and the backward's 10·D a
	// causal pair, 32 heads × 8192·8193/2 pairs, at the fractions the
	// derivation in AttentionEfficiency works out by hand: forward
	// 0.66 · 0.189/(0.189 + 0.0508 + 0.0625), backward 0.66 · 0.473/
	// (0.473 + 0.0313 + 0.0625) · 2322/(2322 + 979), each × the causal
	// tiles' useful share (T = 8192: 128-row query tiles 0.98474, 64-row
	// 0.99225). The hand figures are rounded to three digits: 1e-2.
	pairs := 32 * 8192.0 * 8193 / 2
	fwd := 0.66 * 0.189 / (0.189 + 0.0508 + 0.0625) * 0.98474
	bwd := 0.66 * 0.473 / (0.473 + 0.0313 + 0.0625) * 2322 / (2322 + 979) * 0.99225
	want := 32 * pairs * 128 * (4/fwd + 10/bwd) / 989e12
	if err := numtest.Scalar(p.Kernels.Attention, want, numtest.Tol{Rel: 1e-2}); err != nil {
		t.Errorf("attention seconds: %v", err)
	}
	share := p.Kernels.Attention / p.StepSeconds
	t.Logf("8B, T = 8192, one H200, bf16: step %.3f s (GEMM %.3f, attention %.3f = %.1f%%, memory %.3f), MFU %.3f",
		p.StepSeconds, p.Kernels.GEMM, p.Kernels.Attention, 100*share, p.Kernels.Memory, p.MFU)

	slow := dev
	slow.Kernels = new(KernelRates)
	*slow.Kernels = *dev.Kernels
	slow.Kernels.MMA /= 2
	q, err := Estimate(cfg, slow, s, o)
	if err != nil {
		t.Fatal(err)
	}
	if !(q.Kernels.Attention/q.StepSeconds > share) || q.Kernels.GEMM != p.Kernels.GEMM {
		t.Errorf("half the MMA rate: attention %g s of %g (was %g of %g), GEMM %g s (was %g)",
			q.Kernels.Attention, q.StepSeconds, p.Kernels.Attention, p.StepSeconds, q.Kernels.GEMM, p.Kernels.GEMM)
	}
}

// TestKernelRatesByHand checks the rate rules on shapes worked out by
// hand from their comments.
func TestKernelRatesByHand(t *testing.T) {
	r := hopperRates
	// q_proj of 8B at 8192 tokens: 1024 tiles in 8 waves of 132, K 4096.
	q := engine.GEMMShape{M: 8192, N: 4096, K: 4096, Batch: 1}
	want := 0.72 * (1024.0 / (8 * 132)) * (4096.0 / 4224) / (8192.0 / 8320)
	// A GEMM of 100 × 100: one tile, 10000 of its 32768 outputs useful,
	// one wave of 132 SMs holding one tile, K 64.
	small := engine.GEMMShape{M: 100, N: 100, K: 64, Batch: 1}
	wantSmall := 0.72 * (10000.0 / 32768) * (1.0 / 132) * (64.0 / 192) / (8192.0 / 8320)
	// Causal tiles: T = 256 with 128-row query tiles and 64-key tiles:
	// 128·128 + 128·256 pairs computed, 256·257/2 causal.
	causal := 256.0 * 257 / 2 / (128*128 + 128*256)
	// A window of 40 keeps 40·41/2 + 216·40 pairs; the second query tile
	// (positions 128…255) starts at key tile 64 (its first query's oldest
	// key is 89), computing 128·192 pairs.
	windowed := (40.0*41/2 + 216*40) / (128*128 + 128*192)
	got := []float64{r.gemmEfficiency(q, r.GEMM), r.gemmEfficiency(small, r.GEMM), causalUseful(256, 0, 128, 64),
		causalUseful(256, 40, 128, 64), r.F32AttentionEfficiency(), ampereRates.F32AttentionEfficiency()}
	// Exact arithmetic but for the order of operations: 1e-12.
	if err := numtest.Close(got, []float64{want, wantSmall, causal, windowed, 0.1, 0.2}, numtest.Tol{Rel: 1e-12}); err != nil {
		t.Errorf("(GEMM q_proj, GEMM 100², causal share, windowed share, f32 attention H100, A100): %v", err)
	}
	bad := r
	bad.MMA = 0
	if bad.Validate() == nil {
		t.Error("kernel rates with MMA 0 accepted")
	}
	d, _ := LookupDevice("h100")
	d.Kernels = nil
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "neither kernel rates") {
		t.Errorf("a device with neither kernel rates nor an efficiency: %v", err)
	}
}

// TestMeasuredStep: a bench step measurement of a step's rank work
// replaces its modelled kernel time (one micro-batch: the measured step
// itself), labelled measured; a step it did not measure keeps the model.
func TestMeasuredStep(t *testing.T) {
	cfg := preset(t, "llama3.2-1b")
	path := t.TempDir() + "/step.jsonl"
	line := `{"preset":"llama3.2-1b","params":` + strconv.FormatInt(cfg.Params().Total, 10) +
		`,"batch":2,"seq_len":4096,"recompute":false,"precision":"bf16","step_ms_median":1234.5,"tokens_per_s":6636}` + "\n\n"
	if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	ms, err := ReadMeasurements(path)
	if err != nil || len(ms) != 1 {
		t.Fatalf("ReadMeasurements: %v, %v", ms, err)
	}
	dev, _ := LookupDevice("h200")
	o := Options{Precision: engine.PrecisionBF16, Measured: ms}
	for _, c := range []struct {
		s        Step
		measured bool
	}{
		{Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 4096, MicroBatch: 2, MicroBatches: 1}, true},
		{Step{Grid: Grid{4, 1, 1, 1}, SeqLen: 4096, MicroBatch: 2, MicroBatches: 1}, true}, // replicas compute one rank's step
		{Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 2048, MicroBatch: 2, MicroBatches: 1}, false},
		{Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 4096, MicroBatch: 2, MicroBatches: 1, Recompute: llama.RecomputeFull}, false},
	} {
		p, err := Estimate(cfg, dev, c.s, o)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.HasPrefix(p.Source, "measured: bench step ("+path+":1)")
		if got != c.measured {
			t.Errorf("%+v: source %q", c.s, p.Source)
		}
		if c.measured {
			if err := numtest.Scalar(p.Kernels.Total(), 1.2345, numtest.Tol{Rel: 1e-12}); err != nil {
				t.Errorf("%+v: kernel seconds against the measured step: %v", c.s, err)
			}
		}
	}
	bad := t.TempDir() + "/bad.jsonl"
	if err := os.WriteFile(bad, []byte(`{"params": 5, "batch": 1, "seq_len": 8, "precision": "fp8", "step_ms_median": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadMeasurements(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:1") {
		t.Errorf("a bad precision: %v", err)
	}
}
