package perfmodel

import (
	"errors"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/internal/units"
)

func TestDevices(t *testing.T) {
	for _, c := range []struct {
		name   string
		peak   float64
		memory int64
	}{
		{"h100", 989e12, 80e9}, {"H200", 989e12, 143771 << 20}, {"a100", 312e12, 80e9}, {"mi250x", 191.5e12, 64e9},
	} {
		d, err := LookupDevice(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if d.PeakFLOPs != c.peak || d.MemoryBytes != c.memory || d.NodeSize != 8 || d.Kernels == nil {
			t.Errorf("%s: %+v", c.name, d)
		}
		if !(d.InterNodeBandwidth > 0 && d.InterNodeBandwidth < d.IntraNodeBandwidth && d.HBMBandwidth > d.IntraNodeBandwidth) {
			t.Errorf("%s: implausible bandwidths %+v", c.name, d)
		}
	}
	if _, err := LookupDevice("v100"); err == nil || !strings.Contains(err.Error(), "a100, h100, h200, mi250x") {
		t.Errorf("unknown device: %v", err)
	}
	if len(Devices()) != 4 {
		t.Errorf("%d devices", len(Devices()))
	}
}

func TestParseRecompute(t *testing.T) {
	for s, want := range map[string]Recompute{"auto": RecomputeAuto, "on": RecomputeOn, "off": RecomputeOff, "selective": RecomputeSelective} {
		if r, err := ParseRecompute(s); err != nil || r != want || r.String() != s {
			t.Errorf("%q: %v %v", s, r, err)
		}
	}
	if _, err := ParseRecompute("yes"); err == nil {
		t.Error("accepted yes")
	}
}

// TestEstimateTime checks the time model's arithmetic by hand on the
// small model, with a device whose nodes hold 4 ranks so that data and
// data-z (span 8) cross nodes while X (span 2) and Z (span 4) stay inside.
func TestEstimateTime(t *testing.T) {
	cfg := smallConfig(t)
	dev := Device{Name: "test", PeakFLOPs: 1e12, MemoryBytes: 1e9, HBMBandwidth: 1e11, NodeSize: 4,
		IntraNodeBandwidth: 1e9, InterNodeBandwidth: 1e8, Efficiency: 0.5}
	s := Step{Grid: Grid{Data: 2, X: 2, Y: 1, Z: 2}, SeqLen: 8, MicroBatch: 1, MicroBatches: 2}
	for _, o := range []Options{{NoOverlap: true}, {}, {Efficiency: 0.25, NoOverlap: true}} {
		p, err := Estimate(cfg, dev, s, o)
		if err != nil {
			t.Fatal(err)
		}
		// Sent elements from TestCollectivesByHand, all float32: x 22528
		// activations + 160 statistics; z 110592 + 16384 + 16384 split
		// into gathers and reduce-scatters: per weight and call ½·block
		// each way.
		xBytes := 22528*4 + 160*4.0
		zGather := 0.5 * 2 * (2*2*18432 + 8192 + 8192) // per layer fwd+bwd, embedding fwd, head fwd (its backward reuses it)
		zScatter := 0.5 * 2 * (2*18432 + 8192 + 8192)
		zBytes := zGather*4 + zScatter*4
		dataBytes := 26624 * 4.0
		dataZBytes := 1.5 * 5 * 32 * 4 // norm gradients over 4 ranks spanning 2 nodes
		want := GroupSeconds{X: xBytes / 1e9, Z: zBytes / 1e9, Data: dataBytes / 1e8, DataZ: dataZBytes / 1e8}
		for _, grp := range Groups() {
			if err := numtest.Scalar(p.Comm.Of(grp), want.Of(grp), numtest.Tol{Abs: 1e-15}); err != nil {
				t.Errorf("%+v: %s comm seconds: %v", o, grp, err)
			}
		}
		eff := 0.5
		if o.Efficiency > 0 {
			eff = o.Efficiency
		}
		// A device described by its measured step efficiency: the kernel
		// list's FLOPs (the rank's: its linears split over X = 2, its
		// (data, z) coordinate's 2 micro-batches × 8 tokens) at peak × eff.
		list, err := llama.Kernels(cfg, s.Work(o))
		if err != nil {
			t.Fatal(err)
		}
		flops := 0.0
		for _, k := range list {
			flops += k.Cost().FLOPs
		}
		if err := numtest.Scalar(p.ComputeSeconds, flops/(1e12*eff), numtest.Tol{Rel: 1e-12}); err != nil {
			t.Errorf("%+v: compute seconds: %v", o, err)
		}
		if err := numtest.Scalar(p.OptimizerSeconds, 26784*28/1e11, numtest.Tol{Abs: 1e-18}); err != nil {
			t.Errorf("optimizer seconds: %v", err)
		}
		total := p.Comm.X + p.Comm.Y + p.Comm.Z + p.Comm.Data + p.Comm.DataZ
		if o.NoOverlap {
			if err := numtest.Scalar(p.ExposedCommSeconds, total, numtest.Tol{Abs: 1e-15}); err != nil {
				t.Errorf("no overlap: exposed against all comm seconds: %v", err)
			}
		}
		if !o.NoOverlap && !(p.ExposedCommSeconds < total) {
			t.Errorf("overlap hides nothing: exposed %g of %g", p.ExposedCommSeconds, total)
		}
		if got := p.ComputeSeconds + p.OptimizerSeconds + p.ExposedCommSeconds; got != p.StepSeconds {
			t.Errorf("step %g ≠ %g", p.StepSeconds, got)
		}
		if err := numtest.Scalar(p.TokensPerSecondPerGPU, 64/p.StepSeconds/8, numtest.Tol{Rel: 1e-9}); err != nil {
			t.Errorf("tokens/s/GPU: %v", err)
		}
		if err := numtest.Scalar(p.MFU, p.TokensPerSecondPerGPU*engine.ModelFLOPsPerToken(cfg, 8)/1e12, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Errorf("MFU: %v", err)
		}
	}
}

// Test405B is the planner's acceptance: Llama 3.1 405B on 8192 H100 answers
// quickly, with grids that fit in 80 GB, ranked by time.
func Test405B(t *testing.T) {
	cfg := preset(t, "llama3.1-405b")
	dev, _ := LookupDevice("h100")
	start := time.Now()
	plans, err := Search(Job{Config: cfg, Device: dev, GPUs: 8192, SeqLen: 8192, GlobalBatchTokens: 8192 * 8192}, Options{TopK: 20})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("search took %v", d)
	}
	if len(plans) != 20 {
		t.Fatalf("%d plans, want the top 20", len(plans))
	}
	if !sort.SliceIsSorted(plans, func(a, b int) bool { return plans[a].StepSeconds < plans[b].StepSeconds }) {
		t.Error("plans not ranked by step time")
	}
	for _, p := range plans {
		if p.Grid.Size() != 8192 || p.GlobalBatchTokens() != 8192*8192 {
			t.Errorf("%v: %d ranks, %d tokens", p.Grid, p.Grid.Size(), p.GlobalBatchTokens())
		}
		if m := p.Memory.Total(); m > int64(DefaultMemoryFraction*80e9) {
			t.Errorf("%v needs %s", p.Grid, units.FormatBytes(m))
		}
		if !(p.MFU > 0 && p.MFU <= dev.Kernels.GEMM) { // no kernel beats a large GEMM
			t.Errorf("%v: MFU %g", p.Grid, p.MFU)
		}
	}
	t.Logf("best: %v micro-batch %d×%d recompute %v, %.1f s a step, MFU %.3f, %s per GPU",
		plans[0].Grid, plans[0].MicroBatch, plans[0].MicroBatches, plans[0].Recompute, plans[0].StepSeconds, plans[0].MFU, units.FormatBytes(plans[0].Memory.Total()))
}

func TestSearchChoices(t *testing.T) {
	cfg := preset(t, "llama3.1-8b")
	dev, _ := LookupDevice("h100")
	job := Job{Config: cfg, Device: dev, GPUs: 16, SeqLen: 4096, GlobalBatchTokens: 64 * 4096}
	for rec, want := range map[Recompute]llama.Recompute{RecomputeOn: llama.RecomputeFull, RecomputeOff: llama.RecomputeNone, RecomputeSelective: llama.RecomputeSelective} {
		plans, err := Search(job, Options{Recompute: rec})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range plans {
			if p.Recompute != want {
				t.Errorf("recompute %v gave %v", rec, p.Recompute)
			}
			if got := int64(p.MicroBatch) * int64(p.MicroBatches) * int64(p.Grid.Data*p.Grid.Z); got != 64 {
				t.Errorf("%v: %d sequences a step", p.Grid, got)
			}
		}
	}
	// Every grid whose Data·Z divides the 64 sequences appears once.
	plans, err := Search(job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[Grid]bool{}
	for _, p := range plans {
		if seen[p.Grid] {
			t.Errorf("%v twice", p.Grid)
		}
		seen[p.Grid] = true
	}
	if want := len(Grids(cfg, 16)); len(plans) > want || len(plans) == 0 {
		t.Errorf("%d plans of %d grids", len(plans), want)
	}
	// Overlap never loses.
	for _, p := range plans {
		q, _ := Estimate(cfg, dev, p.Step, Options{NoOverlap: true})
		if !(q.StepSeconds >= p.StepSeconds) {
			t.Errorf("%v: %g s without overlap, %g with", p.Grid, q.StepSeconds, p.StepSeconds)
		}
	}
}

func TestSearchErrors(t *testing.T) {
	cfg := preset(t, "llama3.1-405b")
	h100, _ := LookupDevice("h100")
	_, err := Search(Job{Config: cfg, Device: h100, GPUs: 8, SeqLen: 8192, GlobalBatchTokens: 8 * 8192}, Options{})
	var nf *NoFitError
	if !errors.As(err, &nf) {
		t.Fatalf("405B on 8 GPUs: %v", err)
	}
	if nf.Smallest.Memory.Total() <= nf.Usable || !strings.Contains(err.Error(), "the smallest needs") || nf.Smallest.Recompute != llama.RecomputeFull {
		t.Errorf("no-fit error: %v (%+v)", err, nf.Smallest)
	}
	small := preset(t, "tiny")
	nanPeak, infBW, nanLatency := h100, h100, h100
	nanPeak.PeakFLOPs, infBW.IntraNodeBandwidth, nanLatency.Latency = math.NaN(), math.Inf(1), math.NaN()
	for _, c := range []struct {
		job  Job
		opt  Options
		want string
	}{
		{Job{Config: small, Device: nanPeak, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{}, "lacks a finite positive peak (NaN)"},
		{Job{Config: small, Device: infBW, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{}, "bandwidth (+Inf"},
		{Job{Config: small, Device: nanLatency, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{}, "negative latency NaN"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{Efficiency: math.NaN()}, "efficiency NaN: want a fraction in (0, 1]"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{Efficiency: 1.5}, "efficiency 1.5"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{MemoryFraction: -0.5}, "memory fraction -0.5"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, Options{TopK: -1}, "top -1"},
	} {
		if _, err := Search(c.job, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v %+v: %v, want %q", c.job.Device, c.opt, err, c.want)
		}
	}
	for _, c := range []struct {
		job  Job
		want string
	}{
		{Job{Config: small, Device: h100, GPUs: 0, SeqLen: 8, GlobalBatchTokens: 8}, "gpus must be positive"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 0, GlobalBatchTokens: 8}, "sequence length must be positive"},
		{Job{Config: small, Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 12}, "not a positive multiple"},
		{Job{Config: small, Device: h100, GPUs: 3, SeqLen: 8, GlobalBatchTokens: 16}, "no grid of 3 ranks"},
		{Job{Config: small, Device: Device{Name: "blank"}, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, "lacks"},
		{Job{Device: h100, GPUs: 2, SeqLen: 8, GlobalBatchTokens: 16}, "no model"},
	} {
		if _, err := Search(c.job, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.job, err, c.want)
		}
	}
}

func BenchmarkSearch405B(b *testing.B) {
	cfg := preset(b, "llama3.1-405b")
	dev, _ := LookupDevice("h100")
	job := Job{Config: cfg, Device: dev, GPUs: 8192, SeqLen: 8192, GlobalBatchTokens: 8192 * 8192}
	for b.Loop() {
		if _, err := Search(job, Options{TopK: 10}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSelectiveRecomputeCosts: for Llama 3.1 8B at 8,192 tokens in bf16
// on one rank, selective recomputation's step times its GEMMs and
// attention as no recomputation does (it runs none of them again; on X
// ranks a recomputed norm's rescaling is a batch of one-row GEMMs) and
// adds only memory-bound kernels, less than full recomputation adds; its
// memory lies between the two.
func TestSelectiveRecomputeCosts(t *testing.T) {
	cfg := preset(t, "llama3.1-8b")
	dev, _ := LookupDevice("h200")
	o := Options{Precision: engine.PrecisionBF16}
	var plans []Plan
	for _, rec := range []llama.Recompute{llama.RecomputeNone, llama.RecomputeSelective, llama.RecomputeFull} {
		p, err := Estimate(cfg, dev, Step{Grid: Grid{1, 1, 1, 1}, SeqLen: 8192, MicroBatch: 1, MicroBatches: 1, Recompute: rec}, o)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, p)
	}
	none, sel, full := plans[0], plans[1], plans[2]
	if sel.Kernels.GEMM != none.Kernels.GEMM || sel.Kernels.Attention != none.Kernels.Attention {
		t.Errorf("selective GEMM and attention %v, %v s; none's %v, %v s", sel.Kernels.GEMM, sel.Kernels.Attention, none.Kernels.GEMM, none.Kernels.Attention)
	}
	if !(none.StepSeconds < sel.StepSeconds && sel.StepSeconds < full.StepSeconds) {
		t.Errorf("step seconds none %v, selective %v, full %v: want increasing", none.StepSeconds, sel.StepSeconds, full.StepSeconds)
	}
	if !(none.Memory.Total() > sel.Memory.Total() && sel.Memory.Total() > full.Memory.Total()) {
		t.Errorf("memory none %d, selective %d, full %d: want decreasing", none.Memory.Total(), sel.Memory.Total(), full.Memory.Total())
	}
	t.Logf("8B on one rank, bf16, 8192 tokens: none %.3f s %s, selective %.3f s %s, full %.3f s %s", none.StepSeconds, units.FormatBytes(none.Memory.Total()),
		sel.StepSeconds, units.FormatBytes(sel.Memory.Total()), full.StepSeconds, units.FormatBytes(full.Memory.Total()))
}
