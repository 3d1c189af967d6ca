package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/units"
)

// maxPlanGPUs bounds --gpus: a million, 16 times the largest training
// clusters, so that the grid search stays a search.
const maxPlanGPUs = 1 << 20

// maxPlanBatchTokens bounds --global-batch-tokens: 2⁴⁰, some 65,000 times
// the largest batches trained (16M tokens).
const maxPlanBatchTokens = 1 << 40

type planFlags struct {
	model       string
	gpus        int
	gpu         string
	batchTokens int64
	seqLen      int
	top         int
	json        bool
	recompute   string
	overlap     bool
	efficiency  float64
	deviceJSON  string
	peak        float64 // GFLOP/s
	bandwidth   float64 // GB/s
	latency     float64 // µs
	latencySet  bool    // --latency given (0 is a latency)
	microBatch  int
	zero        int
	fsBandwidth float64 // GB/s
	precision   string
	measured    string // bench step JSON lines
}

// planReport is what `plan --json` prints.
type planReport struct {
	Model            string           `json:"model"`
	Params           int64            `json:"params"`
	ModelFLOPsPerTok float64          `json:"model_flops_per_token"`
	GPUs             int              `json:"gpus"`
	Device           perfmodel.Device `json:"device"`
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
	FSBandwidth       float64    `json:"fs_bandwidth"` // bytes/s
	// Sources say which numbers are the device's (Device.Sources),
	// which the engine's accounting and which the model's predictions.
	Sources planSources `json:"sources"`
	Plans   []planRow   `json:"plans"`
}

// planSources say where plan's numbers come from.
type planSources struct {
	perfmodel.Sources
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

// planRow is one ranked grid.
type planRow struct {
	perfmodel.Plan
	MemoryTotal int64 `json:"memory_total"`
}

func newPlanCmd() *cobra.Command {
	var f planFlags
	var devices []string
	for _, d := range perfmodel.Devices() {
		devices = append(devices, fmt.Sprintf("  %-7s %s: %.1f TFLOP/s dense bf16, %.0f GB", d.Name, d.Description, d.PeakFLOPs/1e12, float64(d.MemoryBytes)/1e9))
	}
	cmd := &cobra.Command{
		Use:   "plan --model PRESET|DIR --gpus N --gpu NAME",
		Short: "Rank 4D-parallel grids for a model on N GPUs by predicted step time",
		Long: `plan predicts, for every Data × X × Y × Z grid of --gpus ranks that divides the
model, the memory per GPU (weights, gradients, AdamW state, activations,
gathered-weight workspace), the communication of each group and the step time,
drops what does not fit, and prints the fastest grids with their micro-batch
and activation-recomputation choice, tokens/s per GPU and MFU. The model is
AxoNN's for communication — ring collectives over NVLink inside a node and
the network across nodes, overlapped with compute (--overlap=false
serialises them) — and memtrain's own for compute: the step's kernel list
(every GEMM, attention, norm, loss and optimizer kernel one rank launches),
each kernel at its modelled rate on the device — cuBLAS's GEMM efficiency
with its falloff for small shapes, the flash attention kernel's from the
GPU's pipes, memory-bound kernels at a share of the HBM bandwidth. A second
table breaks each plan's step into GEMM, attention, memory-bound and exposed
communication seconds; --efficiency overrides the large GEMMs' share of the
peak.

--device-json FILE plans for a device described in JSON (perfmodel.Device's
fields; ` + "`memtrain bench comm --device FILE`" + ` writes one for this machine from
measured bandwidth, latency, peak and efficiency: a "shared_node" device whose
ranks share the node's cores, so that a grid of r ranks gives each 1/r of its
compute and bandwidth, and communication hides behind nothing). --peak,
--bandwidth and --latency override the device's peak, intra-node bandwidth and
per-call latency. --micro-batch fixes the sequences per micro-batch over the
whole grid, as finetune's micro_batch, instead of trying every size.

--measured FILE reads ` + "`memtrain bench step --device cuda`" + `'s JSON lines: a step whose
rank does what one of them measured (a model of that size, a grid that splits
nothing of it, that micro-batch, sequence length, recomputation and precision)
takes the measured time instead of the modelled one, labelled measured.

Devices:
` + strings.Join(devices, "\n"),
		Example: `  memtrain plan --model llama3.1-405b --gpus 8192 --gpu h100
  memtrain plan --model llama3.1-8b --gpus 8 --gpu h100 --seq-len 8192 --json
  memtrain plan --model ./my-checkpoint --gpus 16 --gpu a100 --recompute on
  memtrain plan --model ./tiny --gpus 8 --device-json cpu-8.json --seq-len 128 --global-batch-tokens 2048 --micro-batch 16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.latencySet = cmd.Flags().Changed("latency")
			return runPlan(cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "a preset name or a checkpoint folder (its config.json)")
	fl.IntVar(&f.gpus, "gpus", 0, "number of GPUs (GCDs for mi250x)")
	fl.StringVar(&f.gpu, "gpu", "h100", "device: h100, h200, a100 or mi250x")
	fl.Int64Var(&f.batchTokens, "global-batch-tokens", 0, "tokens per optimizer step (default one sequence per GPU: gpus × seq-len)")
	fl.IntVar(&f.seqLen, "seq-len", 0, "tokens per sequence (default min(2048, max_position_embeddings))")
	fl.IntVar(&f.top, "top", 10, "print the K fastest grids (0: all)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of a table")
	fl.StringVar(&f.recompute, "recompute", "auto", "activation recomputation: auto (whichever is faster and fits), on or off")
	fl.BoolVar(&f.overlap, "overlap", true, "overlap communication with compute (AxoNN's OAG, OAR, ORS)")
	fl.Float64Var(&f.efficiency, "efficiency", 0, "fraction of the peak large GEMMs reach, overriding the device's (on a device described by a measured step efficiency: that)")
	fl.StringVar(&f.deviceJSON, "device-json", "", "plan for the device described in this JSON file (e.g. from 'memtrain bench comm --device') instead of --gpu")
	fl.Float64Var(&f.peak, "peak", 0, "override the device's dense peak, GFLOP/s (a shared-node device: the node's)")
	fl.Float64Var(&f.bandwidth, "bandwidth", 0, "override the device's intra-node link bandwidth, GB/s per direction (a shared-node device: the node's total)")
	fl.Float64Var(&f.latency, "latency", 0, "override the device's latency of a collective call, µs (0 or more)")
	fl.Float64Var(&f.fsBandwidth, "fs-bandwidth", perfmodel.DefaultFSBandwidth/1e9, "the shared filesystem's aggregate write bandwidth, GB/s, for the checkpoint's save time")
	fl.IntVar(&f.microBatch, "micro-batch", 0, "sequences per micro-batch over the whole grid, as finetune's micro_batch (default: try every size)")
	fl.IntVar(&f.zero, "zero", 0, "the ZeRO stage, as finetune's zero: 0 (none) or 1 (AdamW's moments sharded over the data ranks)")
	fl.StringVar(&f.precision, "precision", "f32", "the engine's precision, as finetune's precision: f32, or bf16 (mixed)")
	fl.StringVar(&f.measured, "measured", "", "'memtrain bench step' results (JSON lines) whose measured steps replace the modelled ones they match")
	return cmd
}

// planDevice is the device to plan for: --device-json or --gpu, with
// --peak, --bandwidth and --latency applied.
func planDevice(f planFlags) (perfmodel.Device, error) {
	var dev perfmodel.Device
	var err error
	if f.deviceJSON != "" {
		if dev, err = perfmodel.ReadDevice(f.deviceJSON); err != nil {
			return dev, fmt.Errorf("plan: --device-json: %w", err)
		}
	} else if dev, err = perfmodel.LookupDevice(f.gpu); err != nil {
		return dev, fmt.Errorf("plan: --gpu: %w", err)
	}
	if f.peak > 0 {
		dev.PeakFLOPs = f.peak * 1e9
		dev.Sources.Peak = "given (--peak)"
	}
	if f.bandwidth > 0 {
		dev.IntraNodeBandwidth = f.bandwidth * 1e9
		dev.Sources.Links += "; intra-node bandwidth given (--bandwidth)"
	}
	if f.latencySet {
		dev.Latency = f.latency * 1e-6
		dev.Sources.Links += "; latency given (--latency)"
	}
	if f.efficiency > 0 {
		if dev.Kernels != nil {
			dev.Kernels.Sources.GEMM = "given (--efficiency) for large GEMMs; tile and wave quantisation below"
		} else {
			dev.Sources.Efficiency = "given (--efficiency)"
		}
	}
	if err := dev.Validate(); err != nil {
		return dev, fmt.Errorf("plan: %w", err)
	}
	return dev, nil
}

func runPlan(out io.Writer, f planFlags) error {
	switch {
	case f.model == "":
		return errors.New("plan: --model is required (a preset name or a checkpoint folder)")
	case f.gpus <= 0:
		return fmt.Errorf("plan: --gpus must be positive, got %d", f.gpus)
	case f.gpus > maxPlanGPUs:
		return fmt.Errorf("plan: --gpus %d: want at most %d", f.gpus, maxPlanGPUs)
	case f.seqLen < 0:
		return fmt.Errorf("plan: --seq-len must be positive, got %d", f.seqLen)
	case f.batchTokens < 0:
		return fmt.Errorf("plan: --global-batch-tokens must be positive, got %d", f.batchTokens)
	case f.top < 0:
		return fmt.Errorf("plan: --top must not be negative, got %d", f.top)
	case !(f.efficiency >= 0 && f.efficiency <= 1):
		return fmt.Errorf("plan: --efficiency must lie in (0, 1], got %g", f.efficiency)
	case !(f.fsBandwidth > 0) || math.IsInf(f.fsBandwidth, 1):
		return fmt.Errorf("plan: --fs-bandwidth must be a positive number of GB/s, got %g", f.fsBandwidth)
	case !(f.peak >= 0) || math.IsInf(f.peak, 1) || !(f.bandwidth >= 0) || math.IsInf(f.bandwidth, 1):
		return fmt.Errorf("plan: --peak and --bandwidth must be positive numbers, got %g and %g", f.peak, f.bandwidth)
	case f.latencySet && (!(f.latency >= 0) || math.IsInf(f.latency, 1)):
		return fmt.Errorf("plan: --latency must be 0 or more µs, got %g", f.latency)
	case f.microBatch < 0:
		return fmt.Errorf("plan: --micro-batch must be positive, got %d", f.microBatch)
	case f.seqLen > checkpoints.MaxPositions:
		return fmt.Errorf("plan: --seq-len %d: want 1 to %d (0: the default; no model has more positions)", f.seqLen, checkpoints.MaxPositions)
	case f.batchTokens > maxPlanBatchTokens:
		return fmt.Errorf("plan: --global-batch-tokens %d: want 1 to %d", f.batchTokens, int64(maxPlanBatchTokens))
	case f.top > units.MaxCount:
		return fmt.Errorf("plan: --top %d: want 0 (all) to %d", f.top, units.MaxCount)
	case f.zero != 0 && f.zero != 1:
		return fmt.Errorf("plan: --zero %d: want 0 or 1", f.zero)
	case f.microBatch > units.MaxCount:
		return fmt.Errorf("plan: --micro-batch %d: want 1 to %d", f.microBatch, units.MaxCount)
	}
	dev, err := planDevice(f)
	if err != nil {
		return err
	}
	rec, err := perfmodel.ParseRecompute(f.recompute)
	if err != nil {
		return fmt.Errorf("plan: --recompute: %w", err)
	}
	prec, err := engine.ParsePrecision(f.precision)
	if err != nil {
		return fmt.Errorf("plan: --precision: %w", err)
	}
	cfg, err := checkpoints.LookupConfig(f.model)
	if err != nil {
		return fmt.Errorf("plan: --model: %w", err)
	}
	seq := f.seqLen
	if seq == 0 {
		seq = cfg.DefaultSeqLen()
	}
	if seq > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("plan: --seq-len %d exceeds %s's max_position_embeddings %d", seq, f.model, cfg.MaxPositionEmbeddings)
	}
	batch := f.batchTokens
	if batch == 0 {
		batch = int64(f.gpus) * int64(seq)
	}
	opt := perfmodel.Options{Precision: prec, Recompute: rec, NoOverlap: !f.overlap, Efficiency: f.efficiency, TopK: f.top, MicroBatch: f.microBatch, FSBandwidth: f.fsBandwidth * 1e9, Zero: f.zero}
	if f.measured != "" {
		if opt.Measured, err = perfmodel.ReadMeasurements(f.measured); err != nil {
			return fmt.Errorf("plan: --measured: %w", err)
		}
	}
	plans, err := perfmodel.Search(perfmodel.Job{Config: cfg, Device: dev, GPUs: f.gpus, SeqLen: seq, GlobalBatchTokens: batch}, opt)
	if err != nil {
		return fmt.Errorf("plan: %s on %d %s: %w", f.model, f.gpus, dev.Name, err)
	}
	rep := planReport{
		Model: f.model, Params: cfg.Params().Total, ModelFLOPsPerTok: engine.ModelFLOPsPerToken(cfg, seq),
		GPUs: f.gpus, Device: dev, Efficiency: dev.Efficiency, UsableMemory: opt.UsableMemory(dev, f.gpus),
		SeqLen: seq, GlobalBatchTokens: batch, Overlap: opt.Overlaps(dev), Recompute: rec.String(), Precision: prec.String(), FSBandwidth: opt.FSBandwidth,
		Sources: planSources{Sources: dev.Sources, MemoryPerGPU: memoryPerGPUSource(prec), Usable: usableSource, Predicted: predictedSource},
	}
	if f.efficiency > 0 {
		rep.Efficiency = f.efficiency
	}
	if k := dev.Kernels; k != nil {
		a := engine.AttentionShape{B: 1, T: seq, Heads: cfg.NumAttentionHeads, KVHeads: cfg.NumKeyValueHeads, D: cfg.HeadDimension(), DType: engine.BF16}
		rep.Attention[0] = k.AttentionEfficiency(a)
		a.Backward = true
		rep.Attention[1] = k.AttentionEfficiency(a)
	}
	for _, p := range plans {
		rep.Plans = append(rep.Plans, planRow{Plan: p, MemoryTotal: p.Memory.Total()})
	}
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printPlan(out, rep)
}

func printPlan(w io.Writer, r planReport) error {
	d := r.Device
	fmt.Fprintf(w, "model   %s: %s parameters, %s FLOPs a token (6N + 12·L·H·Q·T)\n", r.Model, units.FormatCount(r.Params), units.FormatCount(int64(r.ModelFLOPsPerTok)))
	fmt.Fprintf(w, "gpus    %d × %s (%s)\n", r.GPUs, d.Name, d.Description)
	if d.SharedNode {
		// Totals of one node, which its ranks divide among them.
		fmt.Fprintf(w, "peak    %.1f GFLOP/s a node × step efficiency %.2f = %.1f GFLOP/s, shared by its ranks\n", d.PeakFLOPs/1e9, r.Efficiency, d.PeakFLOPs*r.Efficiency/1e9)
		fmt.Fprintf(w, "memory  %.1f GB a node, %s usable a rank (%.0f%%)\n", float64(d.MemoryBytes)/1e9, units.FormatBytes(r.UsableMemory), 100*perfmodel.DefaultMemoryFraction)
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
		fmt.Fprintf(w, "memory  %.0f GB a GPU, %s usable (%.0f%%)\n", float64(d.MemoryBytes)/1e9, units.FormatBytes(r.UsableMemory), 100*perfmodel.DefaultMemoryFraction)
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
	if len(r.Plans) > 0 {
		fmt.Fprintf(w, "ckpt    %s (float32 weights and AdamW moments), each (x, y, z) position's rank writing its own; filesystem %.0f GB/s\n",
			units.FormatBytes(r.Plans[0].Checkpoint.Bytes), r.FSBandwidth/1e9)
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
	fmt.Fprintf(w, "        usable %.0f%%: %s\n", 100*perfmodel.DefaultMemoryFraction, src.Usable)
	fmt.Fprintf(w, "        %s\n", src.Predicted)
	fmt.Fprintln(w)

	// Three narrow tables rather than one of 24 columns: the plans, their
	// memory, their communication and checkpoint, each row numbered.
	table := func(title, header string, row func(i int, p planRow) string) error {
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
	err := table("", "#\tdp\tx\ty\tz\tmb×n\trecompute\tstep\ttokens/s/GPU\tMFU\tGiB/GPU\t", func(i int, p planRow) string {
		rec := "off"
		if p.Recompute {
			rec = "on"
		}
		g := p.Grid
		return fmt.Sprintf("%d\t%d\t%d\t%d\t%d\t%d×%d\t%s\t%s\t%.0f\t%.1f%%\t%s\t", i+1, g.Data, g.X, g.Y, g.Z, p.MicroBatch, p.MicroBatches, rec,
			seconds(p.StepSeconds), p.TokensPerSecondPerGPU, 100*p.MFU, gib(p.Memory.Total()))
	})
	if err == nil && len(r.Plans) > 0 {
		err = table("memory per GPU, GiB:", "#\ttotal\tweights\tgradients\toptimizer\tactivations\tworkspace\t", func(i int, p planRow) string {
			m := p.Memory
			return fmt.Sprintf("%d\t%s\t%s\t%s\t%s\t%s\t%s\t", i+1, gib(m.Total()), gib(m.Weights), gib(m.Gradients), gib(m.Optimizer), gib(m.Activations), gib(m.Workspace))
		})
	}
	if err == nil && len(r.Plans) > 0 {
		err = table("communication, seconds a step before overlap, and the checkpoint:", "#\tx\ty\tz\tdata\texposed\tckpt GiB/rank\tfiles\tsave\t", func(i int, p planRow) string {
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
