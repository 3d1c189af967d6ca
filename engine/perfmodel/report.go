package perfmodel

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/units"
)

// A Report is a search's plans with what they were planned for and where
// each number comes from: what memtrain plan prints, as JSON or as text
// (WriteText).
type Report struct {
	Model            string  `json:"model"`
	Params           int64   `json:"params"`
	ModelFLOPsPerTok float64 `json:"model_flops_per_token"`
	GPUs             int     `json:"gpus"`
	Device           Device  `json:"device"`
	// Efficiency is --efficiency when given (the large GEMMs' share of
	// the peak, or a measured device's step efficiency), else the
	// device's measured step efficiency; 0 when its kernel rates alone
	// time the step.
	Efficiency float64 `json:"efficiency,omitempty"`
	// Attention is the bf16 flash attention kernel's modelled share of
	// the peak at the plan's sequence length, forward and backward (0
	// without kernel rates).
	Attention         [2]float64 `json:"attention_efficiency,omitempty"`
	UsableMemory      int64      `json:"usable_memory_bytes"`
	SeqLen            int        `json:"seq_len"`
	GlobalBatchTokens int64      `json:"global_batch_tokens"`
	Overlap           bool       `json:"overlap"`
	Recompute         string     `json:"recompute"`
	Precision         string     `json:"precision"`
	// State is the optimizer-state options planned with (Options.State).
	State string `json:"state"`
	// LoRA is the adapters' rank of a LoRA plan (Options.LoRA), 0 for a
	// full fine-tune.
	LoRA        int     `json:"lora,omitempty"`
	FSBandwidth float64 `json:"fs_bandwidth"` // bytes/s
	// Sources say which numbers are the device's (Device.Sources),
	// which the engine's accounting and which the model's predictions.
	Sources ReportSources `json:"sources"`
	Plans   []ReportPlan  `json:"plans"`
}

// ReportSources say where a report's numbers come from.
type ReportSources struct {
	Sources
	// MemoryPerGPU is the memory columns'.
	MemoryPerGPU string `json:"memory_per_gpu"`
	// Usable is the usable memory fraction's.
	Usable string `json:"usable_memory"`
	// Predicted lists the columns the performance model predicts.
	Predicted string `json:"predicted"`
}

// The sources of the numbers plan computes rather than reads.
const (
	usableSource    = "assumed: headroom for the CUDA context, NCCL's buffers, the allocator's fragmentation and kernels' transient workspace"
	predictedSource = "step time, tokens/s, MFU, communication and checkpoint times: predicted by the performance model from the device's numbers and the step's kernel list, not measured"
)

// memoryPerGPUSource is the memory columns' source at precision p.
func memoryPerGPUSource(p engine.Precision) string {
	layout := "float32 weights, gradients, AdamW moments and activations"
	if p == engine.PrecisionBF16 {
		layout = "float32 master weights, gradients and AdamW moments, bf16 weight copies and activations"
	}
	return "the engine's accounting of what a rank allocates (llama.Memory; " + layout + ", flash attention), checked against the backends' allocations by tests; not measured on a GPU"
}

// ReportPlan is one ranked grid.
type ReportPlan struct {
	Plan
	MemoryTotal int64 `json:"memory_total"`
}

// NewReport is the report of plans, a Search's result for job under opt,
// of the model named model.
func NewReport(model string, cfg *checkpoints.Config, job Job, opt Options, plans []Plan) Report {
	dev, seq, prec := job.Device, job.SeqLen, opt.Precision
	r := Report{
		Model: model, Params: cfg.Params().Total, ModelFLOPsPerTok: engine.ModelFLOPsPerToken(cfg, seq),
		GPUs: job.GPUs, Device: dev, Efficiency: dev.Efficiency, UsableMemory: opt.UsableMemory(dev, job.GPUs),
		SeqLen: seq, GlobalBatchTokens: job.GlobalBatchTokens, Overlap: opt.Overlaps(dev), Recompute: opt.Recompute.String(), Precision: prec.String(), State: opt.State(), LoRA: opt.LoRA, FSBandwidth: opt.FSBandwidth,
		Sources: ReportSources{Sources: dev.Sources, MemoryPerGPU: memoryPerGPUSource(prec), Usable: usableSource, Predicted: predictedSource},
	}
	if k := dev.Kernels; k != nil {
		a := engine.AttentionShape{B: 1, T: seq, Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads, D: cfg.HeadDimension(), Window: cfg.Window(), DType: engine.BF16}
		r.Attention[0] = k.AttentionEfficiency(a)
		a.Backward = true
		r.Attention[1] = k.AttentionEfficiency(a)
	}
	for _, p := range plans {
		r.Plans = append(r.Plans, ReportPlan{Plan: p, MemoryTotal: p.Memory.Total()})
	}
	return r
}

// WriteText writes the report for reading: the model, the device and
// their sources, then narrow tables of the plans, their memory, their
// communication and checkpoint, and their step by kernel class.
func (r Report) WriteText(w io.Writer) error {
	d := r.Device
	fmt.Fprintf(w, "model   %s: %s parameters, %s FLOPs a token (6N + 12·L·H·Q·T)\n", r.Model, units.FormatCount(r.Params), units.FormatCount(int64(r.ModelFLOPsPerTok)))
	fmt.Fprintf(w, "gpus    %d × %s (%s)\n", r.GPUs, d.Name, d.Description)
	if d.SharedNode {
		// Totals of one node, which its ranks divide among them.
		fmt.Fprintf(w, "peak    %.1f GFLOP/s a node × step efficiency %.2f = %.1f GFLOP/s, shared by its ranks\n", d.PeakFLOPs/1e9, r.Efficiency, d.PeakFLOPs*r.Efficiency/1e9)
		fmt.Fprintf(w, "memory  %.1f GB a node, %s usable a rank (%.0f%%)\n", float64(d.MemoryBytes)/1e9, units.FormatBytes(r.UsableMemory), 100*DefaultMemoryFraction)
		fmt.Fprintf(w, "links   %.2f GB/s a node of %d ranks, %.0f µs a call; memory %.0f GB/s\n", d.IntraNodeBandwidth/1e9, d.NodeSize, d.Latency*1e6, d.HBMBandwidth/1e9)
	} else {
		if k := d.Kernels; k != nil {
			gemm := k.GEMM
			if r.Efficiency > 0 {
				gemm = r.Efficiency
			}
			fmt.Fprintf(w, "peak    %.1f TFLOP/s dense bf16; %.1f float32 FMA\n", d.PeakFLOPs/1e12, k.FP32FLOPs/1e12)
			fmt.Fprintf(w, "kernels GEMM %.2f of peak (large shapes; %.0f TFLOP/s), flash attention bf16 %.0f / %.0f TFLOP/s forward / backward at %d tokens, float32 %.1f; memory-bound %.2f of HBM\n",
				gemm, d.PeakFLOPs*gemm/1e12, d.PeakFLOPs*r.Attention[0]/1e12, d.PeakFLOPs*r.Attention[1]/1e12, r.SeqLen, k.FP32FLOPs*k.F32AttentionEfficiency()/1e12, k.Memory)
		} else {
			fmt.Fprintf(w, "peak    %.1f TFLOP/s dense bf16 × step efficiency %.2f = %.1f TFLOP/s\n", d.PeakFLOPs/1e12, r.Efficiency, d.PeakFLOPs*r.Efficiency/1e12)
		}
		fmt.Fprintf(w, "memory  %.0f GB a GPU, %s usable (%.0f%%)\n", float64(d.MemoryBytes)/1e9, units.FormatBytes(r.UsableMemory), 100*DefaultMemoryFraction)
		latency := ""
		if d.Latency > 0 {
			latency = fmt.Sprintf(", %.1f µs a call", d.Latency*1e6)
		}
		fmt.Fprintf(w, "links   %.0f GB/s a GPU inside a node of %d, %.1f GB/s across nodes%s; HBM %.2f TB/s\n", d.IntraNodeBandwidth/1e9, d.NodeSize, d.InterNodeBandwidth/1e9, latency, d.HBMBandwidth/1e12)
	}
	overlap := "overlapped (OAG, OAR, ORS)"
	switch {
	case d.SharedNode:
		overlap = "serial (the cores that compute also communicate)"
	case !r.Overlap:
		overlap = "serial"
	}
	fmt.Fprintf(w, "batch   %d tokens a step: %d sequences of %d; communication %s; recompute %s; precision %s\n",
		r.GlobalBatchTokens, r.GlobalBatchTokens/int64(r.SeqLen), r.SeqLen, overlap, r.Recompute, r.Precision)
	fmt.Fprintf(w, "state   %s\n", r.State)
	if len(r.Plans) > 0 {
		what := "float32 weights and AdamW moments), each (x, y, z) position's rank writing its own"
		if r.LoRA > 0 {
			what = "the float32 adapters and their AdamW moments), written by one rank"
		}
		fmt.Fprintf(w, "ckpt    %s (%s; filesystem %.0f GB/s\n", units.FormatBytes(r.Plans[0].Checkpoint.Bytes), what, r.FSBandwidth/1e9)
	}
	src := r.Sources
	fmt.Fprintf(w, "sources peak: %s; memory: %s; links: %s\n", src.Peak, src.Memory, src.Links)
	if k := d.Kernels; k != nil {
		ks := k.Sources
		fmt.Fprintf(w, "        kernels: GEMM %s; attention %s; memory-bound %s; host copies %s\n", ks.GEMM, ks.Attention, ks.Memory, ks.Host)
	} else {
		fmt.Fprintf(w, "        step efficiency %.2f: %s\n", r.Efficiency, src.Efficiency)
	}
	fmt.Fprintf(w, "        memory per GPU: %s\n", src.MemoryPerGPU)
	fmt.Fprintf(w, "        usable %.0f%%: %s\n", 100*DefaultMemoryFraction, src.Usable)
	fmt.Fprintf(w, "        %s\n", src.Predicted)
	fmt.Fprintln(w)

	// Three narrow tables rather than one of 24 columns: the plans, their
	// memory, their communication and checkpoint, each row numbered.
	table := func(title, header string, row func(i int, p ReportPlan) string) error {
		if title != "" {
			fmt.Fprintf(w, "\n%s\n", title)
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, header)
		for i, p := range r.Plans {
			fmt.Fprintln(tw, row(i, p))
		}
		return tw.Flush()
	}
	err := table("", "#\tdp\tx\ty\tz\tmb×n\trecompute\tstep\ttokens/s/GPU\tMFU\tGiB/GPU\t", func(i int, p ReportPlan) string {
		rec := p.Recompute.String()
		g := p.Grid
		return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d×%d\t%s\t%s\t%.0f\t%.1f%%\t%s\t", i+1, g.Data, g.X, g.Y, g.Z, p.MicroBatch, p.MicroBatches, rec,
			seconds(p.StepSeconds), p.TokensPerSecondPerGPU, 100*p.MFU, gib(p.Memory.Total()))
	})
	if err == nil && len(r.Plans) > 0 {
		err = table("memory per GPU, GiB:", "#\ttotal\tweights\tgradients\toptimizer\tactivations\tworkspace\t", func(i int, p ReportPlan) string {
			m := p.Memory
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t", i+1, gib(m.Total()), gib(m.Weights), gib(m.Gradients), gib(m.Optimizer), gib(m.Activations), gib(m.Workspace))
		})
	}
	if err == nil && len(r.Plans) > 0 {
		err = table("communication, seconds a step before overlap, and the checkpoint:", "#\tx\ty\tz\tdata\texposed\tckpt GiB/rank\tfiles\tsave\t", func(i int, p ReportPlan) string {
			g := p.Grid
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t", i+1,
				commSeconds(g.X, p.Comm.X), commSeconds(g.Y, p.Comm.Y), commSeconds(g.Z, p.Comm.Z),
				commSeconds(g.Data*g.Z, p.Comm.Data+p.Comm.DataZ), seconds(p.ExposedCommSeconds),
				gib(p.Checkpoint.BytesPerRank), p.Checkpoint.Files, seconds(p.Checkpoint.SaveSeconds))
		})
	}
	if err != nil {
		return err
	}
	if len(r.Plans) > 0 {
		fmt.Fprintln(w, "\nstep time by kernel class, seconds a step on a rank:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "#\tstep\tgemm\tattention\tmemory\thost\tcomm\tMFU\tsource\t")
		var sources []string
		for i, p := range r.Plans {
			k := p.Kernels
			kind, _, _ := strings.Cut(p.Source, ":")
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f%%\t%s\t\n", i+1, seconds(p.StepSeconds), seconds(k.GEMM), seconds(k.Attention),
				seconds(k.Memory), seconds(k.Host), seconds(k.Collective), 100*p.MFU, kind)
			if !slices.Contains(sources, p.Source) {
				sources = append(sources, p.Source)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, src := range sources {
			fmt.Fprintf(w, "  %s\n", src)
		}
	}
	_, err = fmt.Fprintln(w, "\nmb×n: sequences per micro-batch on each (data, z) rank × micro-batches a step.\n"+
		"communication: each group's total time a step before overlap (data includes the norm gradients'\n"+
		"data-z all-reduce); exposed: what compute does not hide. ckpt GiB/rank: what a writing rank saves;\n"+
		"files: piece files; save: the checkpoint's write time at the filesystem's bandwidth or a writer's\n"+
		"network link, whichever is slower. By kernel class: memory includes the optimizer's update; comm is\n"+
		"the communication compute does not hide.")
	return err
}

func gib(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<30)) }

// seconds writes a duration in s or ms with three significant digits.
func seconds(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}

// commSeconds is "-" for a group of one rank, which communicates nothing.
func commSeconds(size int, s float64) string {
	if size == 1 {
		return "-"
	}
	return seconds(s)
}
