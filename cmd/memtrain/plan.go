package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/options"
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
	fused       bool
	lora        int // LoRA rank, 0: full fine-tuning
	cheapest    bool
	fsBandwidth float64 // GB/s
	precision   string
	measured    string // bench step JSON lines
}

// planReport is what `plan --json` prints.
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
	options.IntRange(fl, &f.gpus, "gpus", 0, 1, maxPlanGPUs, "", "number of GPUs (GCDs for mi250x)")
	fl.StringVar(&f.gpu, "gpu", "h100", "device: h100, h200, a100 or mi250x")
	fl.Int64Var(&f.batchTokens, "global-batch-tokens", 0, "tokens per optimizer step (default one sequence per GPU: gpus × seq-len)")
	options.IntRange(fl, &f.seqLen, "seq-len", 0, 1, checkpoints.MaxPositions, "the default", "tokens per sequence (default min(2048, max_position_embeddings))")
	options.IntRange(fl, &f.top, "top", 10, 1, units.MaxCount, "all", "print the K fastest grids (0: all)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of a table")
	fl.StringVar(&f.recompute, "recompute", "auto", "activation recomputation: auto (whichever of none, selective and full is fastest and fits), on (full), off or selective")
	fl.BoolVar(&f.overlap, "overlap", true, "overlap communication with compute (AxoNN's OAG, OAR, ORS)")
	fl.Float64Var(&f.efficiency, "efficiency", 0, "fraction of the peak large GEMMs reach, overriding the device's (on a device described by a measured step efficiency: that)")
	fl.StringVar(&f.deviceJSON, "device-json", "", "plan for the device described in this JSON file (e.g. from 'memtrain bench comm --device') instead of --gpu")
	fl.Float64Var(&f.peak, "peak", 0, "override the device's dense peak, GFLOP/s (a shared-node device: the node's)")
	fl.Float64Var(&f.bandwidth, "bandwidth", 0, "override the device's intra-node link bandwidth, GB/s per direction (a shared-node device: the node's total)")
	fl.Float64Var(&f.latency, "latency", 0, "override the device's latency of a collective call, µs (0 or more)")
	fl.Float64Var(&f.fsBandwidth, "fs-bandwidth", perfmodel.DefaultFSBandwidth/1e9, "the shared filesystem's aggregate write bandwidth, GB/s, for the checkpoint's save time")
	options.IntRange(fl, &f.microBatch, "micro-batch", 0, 1, units.MaxCount, "try every size", "sequences per micro-batch over the whole grid, as finetune's micro_batch (default: try every size)")
	options.IntRange(fl, &f.zero, "zero", 0, 0, 1, "", "the ZeRO stage, as finetune's zero: 0 (none) or 1 (AdamW's moments sharded over the data ranks)")
	fl.BoolVar(&f.fused, "fused", false, "plan with AdamW fused into the backward, as finetune's optimizer.fused: no whole-model gradient; one micro-batch a step, a norm-only pass first (clip 1)")
	fl.StringVar(&f.precision, "precision", "f32", "the engine's precision, as finetune's precision: f32, or bf16 (mixed)")
	options.IntRange(fl, &f.lora, "lora", 0, 1, checkpoints.MaxLoRARank, "full fine-tuning", "plan a LoRA fine-tune of this rank on q, k, v and o_proj, the base frozen in bf16 (0: full fine-tuning)")
	fl.BoolVar(&f.cheapest, "cheapest", false, "search the optimizer state too (zero 0/1, master fp32/split, moments fp32/bf16/int8, optimizer fused or not) and up to --gpus GPUs: print the fewest GPUs that fit, exact options first, then the fastest")
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
	case f.gpus == 0:
		return errors.New("plan: --gpus is required (the number of GPUs)")
	case f.batchTokens < 0:
		return fmt.Errorf("plan: --global-batch-tokens must be positive, got %d", f.batchTokens)
	case !(f.efficiency >= 0 && f.efficiency <= 1):
		return fmt.Errorf("plan: --efficiency must lie in (0, 1], got %g", f.efficiency)
	case !(f.fsBandwidth > 0) || math.IsInf(f.fsBandwidth, 1):
		return fmt.Errorf("plan: --fs-bandwidth must be a positive number of GB/s, got %g", f.fsBandwidth)
	case !(f.peak >= 0) || math.IsInf(f.peak, 1) || !(f.bandwidth >= 0) || math.IsInf(f.bandwidth, 1):
		return fmt.Errorf("plan: --peak and --bandwidth must be positive numbers, got %g and %g", f.peak, f.bandwidth)
	case f.latencySet && (!(f.latency >= 0) || math.IsInf(f.latency, 1)):
		return fmt.Errorf("plan: --latency must be 0 or more µs, got %g", f.latency)
	case f.batchTokens > maxPlanBatchTokens:
		return fmt.Errorf("plan: --global-batch-tokens %d: want 1 to %d", f.batchTokens, int64(maxPlanBatchTokens))
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
	seq, err := cfg.SeqLen(f.seqLen)
	if err != nil {
		return fmt.Errorf("plan: %s: --seq-len %w", f.model, err)
	}
	opt := perfmodel.Options{Precision: prec, Recompute: rec, NoOverlap: !f.overlap, Efficiency: f.efficiency, TopK: f.top, MicroBatch: f.microBatch, FSBandwidth: f.fsBandwidth * 1e9, Zero: f.zero, Fused: f.fused, LoRA: f.lora, Cheapest: f.cheapest}
	if f.measured != "" {
		if opt.Measured, err = perfmodel.ReadMeasurements(f.measured); err != nil {
			return fmt.Errorf("plan: --measured: %w", err)
		}
	}
	ch, err := perfmodel.Choose(perfmodel.Job{Config: cfg, Device: dev, GPUs: f.gpus, SeqLen: seq, GlobalBatchTokens: f.batchTokens}, opt)
	if err != nil {
		return fmt.Errorf("plan: %s on %d %s: %w", f.model, f.gpus, dev.Name, err)
	}
	rep := perfmodel.NewReport(f.model, cfg, ch.Job, ch.Options, ch.Plans)
	if f.efficiency > 0 {
		rep.Efficiency = f.efficiency
	}
	if f.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(out)
}
