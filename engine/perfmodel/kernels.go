package perfmodel

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// KernelRates are what a GPU's kernels reach, kernel class by class, for
// the time of a step's kernel list (llama.Kernels): no one efficiency for
// the step, but cuBLAS's for the GEMMs, the flash attention kernel's
// modelled from the GPU's pipes, and the memory-bound kernels' at a share
// of the memory bandwidth. Sources says where each comes from.
type KernelRates struct {
	// GEMM is the fraction of PeakFLOPs cuBLAS reaches on a large GEMM
	// (M, N, K of thousands) on bf16 tensor cores — the engine's GEMMs of
	// bf16 and, at the CUDA backend's default GEMM precision (bf16 tensor
	// cores, float32 accumulation), of float32 operands alike. Smaller
	// shapes lose to tile and wave quantisation (gemmEfficiency).
	GEMM float64 `json:"gemm"`
	// SMs is the number of streaming multiprocessors (compute units),
	// for the GEMMs' wave quantisation.
	SMs int `json:"sms"`
	// FP32FLOPs is the CUDA-core float32 FMA peak, FLOP/s: what the
	// float32 attention kernels (scalar FMA) compute with.
	FP32FLOPs float64 `json:"fp32_flops"`
	// Per SM and clock at the clock of PeakFLOPs: Tensor is the dense
	// bf16 tensor FLOPs (PeakFLOPs / SMs / clock); MMA the fraction of it
	// the attention kernel's MMA instruction (mma.sync m16n8k16) issues
	// at; FP32 the float32 lanes (add, multiply, FMA results); MUFU the
	// special-function results (exp2); Shared the shared-memory bytes; L2
	// an SM's share of the L2 bandwidth in bytes, and L2Latency an L2
	// round trip in clocks.
	Tensor    float64 `json:"tensor_per_clock"`
	MMA       float64 `json:"mma"`
	FP32      float64 `json:"fp32_per_clock"`
	MUFU      float64 `json:"mufu_per_clock"`
	Shared    float64 `json:"shared_bytes_per_clock"`
	L2        float64 `json:"l2_bytes_per_clock"`
	L2Latency float64 `json:"l2_latency_clocks"`
	// Memory is the fraction of HBMBandwidth a memory-bound kernel's
	// 16-byte vectorised stream reaches.
	Memory float64 `json:"memory"`
	// HostBandwidth is the host link's bandwidth per direction, bytes/s,
	// for the batch's uploads and the step's reads.
	HostBandwidth float64 `json:"host_bandwidth"`
	// Sources say where the figures come from.
	Sources KernelSources `json:"sources"`
}

// KernelSources say where each of KernelRates' figures comes from.
type KernelSources struct {
	GEMM      string `json:"gemm"`
	Attention string `json:"attention"`
	Memory    string `json:"memory"`
	Host      string `json:"host"`
}

// Kernel time constants, each an assumption the comment sources.
const (
	// kernelFloor is the least time a kernel takes: a launch queued
	// behind others still costs the GPU a gap of a microsecond or two
	// between kernels (the launch's own work, the grid's ramp-up and
	// drain); 2 µs is assumed.
	kernelFloor = 2e-6
	// hostLatency is a host copy's fixed cost (cudaMemcpy of pageable
	// memory: a staging copy and a synchronisation, some 10 µs), assumed.
	hostLatency = 10e-6
	// GEMM tiles: cuBLAS's bf16 kernels on Ampere and Hopper tile the
	// output 128 × 256 per thread block (CUTLASS's default large tile;
	// cuBLAS's heuristics pick it or 256 × 128 for large shapes).
	gemmTileM, gemmTileN = 128, 256
	// gemmK0 is the K-equivalent of a tile's fixed work (the pipeline's
	// fill and the epilogue's write of the tile): with 64-deep K steps
	// and a 3–4-stage pipeline, about two steps' worth.
	gemmK0 = 128
	// gemmLargeK is the K at which KernelRates.GEMM is quoted.
	gemmLargeK = 8192
	// Attention tiles, as the kernel (FlashAttention-2 on mma.sync
	// m16n8k16) takes them: the forward 128 query rows a block against
	// key/value tiles of 64; the backward a block a key/value tile of 64
	// against query tiles of 64; two blocks resident on an SM.
	attnFwdRows, attnKeys, attnBwdRows = 128, 64, 64
	attnResident                       = 2
)

// Table rates. The GPU figures per SM and clock are from the
// architecture whitepapers and the CUDA C Programming Guide's throughput
// table (compute capability 8.0 and 9.0: 64 and 128 float32 results per
// clock per SM, 16 special-function results, 128 bytes of shared memory);
// the dense bf16 tensor rate per SM and clock is the datasheet peak over
// SMs × boost clock (H100 SXM: 989.4 TFLOP/s / (132 × 1.83 GHz) = 4096;
// A100: 312 / (108 × 1.41) = 2048). Hopper's peak is its wgmma
// instruction's; the legacy mma.sync m16n8k16 that the attention kernel
// uses issues at about two thirds of it (MMA 0.66: the rate microbenchmark
// dissections of Hopper report for mma.sync, and why FlashAttention-2
// stays near 35% of H100's peak in FlashAttention-3's measurements);
// on Ampere mma.sync is the native instruction (MMA 1). L2: H100's about
// 5.5 TB/s shared by 132 SMs at 1.83 GHz is 22.8 bytes per clock per SM,
// its round trip about 260 clocks (microbenchmarks); A100's about 4.8
// TB/s over 108 SMs at 1.41 GHz is 31.5.
//
// GEMM: cuBLAS's large bf16 GEMMs reach about 0.70–0.75 of H100 SXM's
// dense peak in NVIDIA's published cuBLAS 12 measurements (700–750
// TFLOP/s), 0.72 taken; A100's about 0.8 (250 TFLOP/s of 312); H200 has
// H100's SMs and clocks. Memory: STREAM-type copy kernels reach 85–90% of
// the HBM datasheet bandwidth on A100 and H100 (BabelStream), 0.85 taken.
// Host: PCIe 5.0 x16 (H100, H200) moves 64 GB/s a direction, PCIe 4.0
// x16 (A100, MI250X) 32; the copies here are a few kilobytes, where the
// latency dominates.
var (
	hopperRates = KernelRates{
		GEMM: 0.72, SMs: 132, FP32FLOPs: 67e12,
		Tensor: 4096, MMA: 0.66, FP32: 128, MUFU: 16, Shared: 128, L2: 22.8, L2Latency: 260,
		Memory: 0.85, HostBandwidth: 64e9, Sources: kernelSources,
	}
	ampereRates = KernelRates{
		GEMM: 0.80, SMs: 108, FP32FLOPs: 19.5e12,
		Tensor: 2048, MMA: 1, FP32: 64, MUFU: 16, Shared: 128, L2: 31.5, L2Latency: 200,
		Memory: 0.85, HostBandwidth: 32e9, Sources: kernelSources,
	}
	// MI250X (one GCD: 110 CUs at 1.7 GHz, 383/2 TFLOP/s dense bf16 =
	// 1024 a CU and clock): the engine's kernels are CUDA's, so this is
	// the model of a HIP port on CDNA2's MFMA (native, MMA 1), 128 packed
	// float32 results and 16 transcendental ones a CU and clock, about
	// 3.5 TB/s of L2 a GCD (18.7 a CU and clock); rocBLAS's large bf16
	// GEMMs reach about 0.6 of the peak.
	cdna2Rates = KernelRates{
		GEMM: 0.60, SMs: 110, FP32FLOPs: 23.95e12,
		Tensor: 1024, MMA: 1, FP32: 128, MUFU: 16, Shared: 128, L2: 18.7, L2Latency: 300,
		Memory: 0.85, HostBandwidth: 32e9, Sources: KernelSources{
			GEMM: "modelled: rocBLAS's large bf16 GEMMs (≈ 0.6 of peak), tile and wave quantisation", Attention: kernelSources.Attention + " (a HIP port's, on CDNA2's pipes)",
			Memory: kernelSources.Memory, Host: kernelSources.Host,
		},
	}
	kernelSources = KernelSources{
		GEMM:      "modelled: cuBLAS's large bf16 GEMM (published), tile and wave quantisation below",
		Attention: "modelled: FlashAttention-2 on mma.sync from the GPU's pipes (tensor, FP32, exp2, L2)",
		Memory:    "modelled: 0.85 of the datasheet bandwidth (STREAM-type kernels)",
		Host:      "modelled: the datasheet's PCIe bandwidth and 10 µs a copy",
	}
)

// Validate reports rates the model cannot use.
func (r KernelRates) Validate() error {
	frac := func(x float64) bool { return x > 0 && x <= 1 }
	pos := func(x float64) bool { return x > 0 && !math.IsInf(x, 1) }
	if !frac(r.GEMM) || !frac(r.MMA) || !frac(r.Memory) || r.SMs < 1 || !pos(r.FP32FLOPs) || !pos(r.Tensor) ||
		!pos(r.FP32) || !pos(r.MUFU) || !pos(r.Shared) || !pos(r.L2) || !(r.L2Latency >= 0) || !pos(r.HostBandwidth) {
		return fmt.Errorf("perfmodel: kernel rates %+v: want fractions in (0, 1] and positive rates", r)
	}
	return nil
}

// gemmEfficiency is the fraction of PeakFLOPs a GEMM of shape s reaches:
// large, r.GEMM (or the user's override); smaller, less by
//
//   - tile quantisation: the output is computed in whole 128 × 256
//     tiles, so M·N / (⌈M/128⌉·128 · ⌈N/256⌉·256) of the work is useful;
//   - wave quantisation: t tiles (× the batch) run on SMs in ⌈t/SMs⌉
//     waves, the last one partly idle: t / (⌈t/SMs⌉·SMs);
//   - K: each tile's fixed work (pipeline fill, epilogue) is gemmK0 of
//     K's worth, so K/(K + 128), relative to the K = 8192 the large
//     figure is quoted at.
//
// For Llama 3.1 8B at 8192 tokens q_proj's GEMM is M = 8192, N = 4096,
// K = 4096 on H100: 64 × 16 = 1024 whole tiles in 7.76 waves of 132
// (0.970), K 0.985 of 8192's: 0.72 × 0.955 = 0.688.
func (r KernelRates) gemmEfficiency(s engine.GEMMShape, large float64) float64 {
	ceil := func(a, b int) int { return (a + b - 1) / b }
	tm, tn := ceil(s.M, gemmTileM), ceil(s.N, gemmTileN)
	tile := float64(s.M) * float64(s.N) / (float64(tm*gemmTileM) * float64(tn*gemmTileN))
	tiles := tm * tn * s.Batch
	wave := float64(tiles) / float64(ceil(tiles, r.SMs)*r.SMs)
	k := float64(s.K) / float64(s.K+gemmK0) / (gemmLargeK / float64(gemmLargeK+gemmK0))
	return large * tile * wave * math.Min(1, k)
}

// AttentionEfficiency is the fraction of PeakFLOPs the bf16 flash
// attention kernel reaches on the useful (causal) FLOPs of shape a,
// from the GPU's pipes per SM and clock. Per score (a query–key pair)
// of head dimension D:
//
// Forward. The tensor pipe does 4·D FLOPs (S = QKᵀ, O += PV). The FP32
// pipe does the online softmax: the scaled, shifted exponent (1 FFMA),
// the row maximum (1 FMNMX, at half rate: 2), the row sum (1 FADD), P's
// conversion to bf16 (½: two a cvt), and the output's rescaling by
// e^(m−m'), D/64 multiplies a score for 64-key tiles (2 at D = 128):
// 6.5 slots. The special-function pipe does 1 exp2. Within a warp the
// softmax of a tile waits for its S and the next PV for the softmax, and
// FlashAttention-2 interleaves nothing else, so the three pipes' times
// add up: the tensor pipe is busy t/(t + f + e) of the time. On H100
// at D = 128: t = 512/(0.66·4096) = 0.189 clock, f = 6.5/128 = 0.051,
// e = 1/16 = 0.0625: 0.626, × MMA 0.66 = 0.413 of the peak.
//
// Backward. Per score, 10·D tensor FLOPs (S again, dP = dO·Vᵀ, dV += PᵀdO,
// dK += dSᵀQ, dQ += dS·K: 2.5× the forward's), 4 FP32 slots (P's
// exponent, dS = P ⊙ (dP − Δ) a subtraction and a multiply, the two bf16
// conversions) and 1 exp2: on H100 t = 0.473, f = 0.031, e = 0.0625,
// 0.835 × 0.66 = 0.551. The dQ sums are deterministic: each block (a
// key/value tile) adds its 64 × D float32 dQ part to the query tile's
// in key order, waiting for the previous block's, so each step exposes
// the read of that part through L2 (64·D·4 bytes at an SM's share of L2
// bandwidth, 32 KB / 22.8 B = 1437 clocks on H100) and a semaphore's
// round trip (2 × 260), of which the other resident block's compute
// hides half; against the step's 10·D·64·64 FLOPs at 0.551 × 4096 a
// clock (2322 clocks): 2322/(2322 + 979) = 0.70. The backward reaches
// 0.551 × 0.70 = 0.387 of the peak.
//
// Causal. Blocks visit only tiles on or below the diagonal (and, with a
// sliding window, from the one its first query's window starts in); the
// tiles the diagonal or the window's edge crosses are partly masked,
// computed whole: the useful share is the pairs T(T+1)/2 (AttentionShape.
// Pairs) over the computed tiles' (T = 8192: 0.985 forward with 128 × 64
// tiles, 0.992 backward with 64 × 64).
func (r KernelRates) AttentionEfficiency(a engine.AttentionShape) float64 {
	D := float64(a.D)
	busy := func(tensor, fp32, exp float64) (fraction, clocks float64) {
		t := tensor / (r.MMA * r.Tensor)
		f, e := fp32/r.FP32, exp/r.MUFU
		return t / (t + f + e), t
	}
	var eff float64
	rows := attnFwdRows
	if !a.Backward {
		b, _ := busy(4*D, 4.5+D/attnKeys, 1)
		eff = r.MMA * b
	} else {
		rows = attnBwdRows
		b, _ := busy(10*D, 4, 1)
		eff = r.MMA * b
		step := 10 * D * attnBwdRows * attnKeys / (eff * r.Tensor)
		exposed := attnBwdRows*D*4/r.L2 + 2*r.L2Latency
		eff *= step / (step + exposed/attnResident)
	}
	return eff * causalUseful(a.T, a.Window, rows, attnKeys)
}

// causalUseful is the share of the computed tiles' pairs that are
// causal ones (within the sliding window W, 0 for none), for query tiles
// of rows and key tiles of keys: a query tile computes the key tiles
// from the one holding its first query's oldest key to its diagonal.
func causalUseful(T, W, rows, keys int) float64 {
	if W <= 0 || W > T {
		W = T
	}
	computed := 0.0
	for q0 := 0; q0 < T; q0 += rows {
		last := min(T, q0+rows) - 1 // the tile's last query sees keys ≤ last
		first := max(0, q0-W+1) / keys * keys
		n := min(T, q0+rows) - q0
		computed += float64(n) * float64(min(T, (last/keys+1)*keys)-first)
	}
	return engine.AttentionShape{B: 1, T: T, Heads: 1, Window: W}.Pairs() / computed
}

// F32AttentionEfficiency is the fraction of FP32FLOPs the float32
// attention kernels (scalar FMA, engine/cuda/kernels/attention.cu's
// fa_dots) reach: each FMA reads both operands from shared memory (no
// register blocking), 8 bytes, so shared-memory bandwidth bounds them to
// Shared/8 FMAs a clock against FP32 lanes (H100: 16 of 128, 0.125;
// A100: 16 of 64, 0.25); × 0.8 for the online softmax's per-row work
// and the barriers between tiles, assumed.
func (r KernelRates) F32AttentionEfficiency() float64 {
	return math.Min(1, r.Shared/8/r.FP32) * 0.8
}

// kernelSeconds is the time of one kernel of cost c on d, with o's
// overrides: by the kernel rates on a GPU (d.Kernels), or on a device
// described by its measured step efficiency (d.Efficiency, a CPU node
// from memtrain's benchmarks) its FLOPs at that share of the peak, the
// memory-bound kernels inside that efficiency.
//
// share is the number of ranks sharing the device's resources
// (Device.share).
func (d Device) kernelSeconds(c engine.Cost, o Options, share float64) float64 {
	if d.Kernels == nil {
		eff := d.Efficiency
		if o.Efficiency > 0 {
			eff = o.Efficiency
		}
		return c.FLOPs / (d.PeakFLOPs * eff / share)
	}
	r := d.Kernels
	memory := c.Bytes / (d.HBMBandwidth * r.Memory / share)
	var t float64
	switch c.Class {
	case engine.ClassGEMM:
		if c.GEMM.M == 1 || c.GEMM.N == 1 {
			// grid.go's row dots and row scalings: batched GEMVs,
			// memory-bound.
			t = memory
			break
		}
		large := r.GEMM
		if o.Efficiency > 0 {
			large = o.Efficiency
		}
		t = math.Max(c.FLOPs/(d.PeakFLOPs*r.gemmEfficiency(c.GEMM, large)/share), memory)
	case engine.ClassAttention:
		if c.Attention.DType == engine.BF16 {
			t = c.FLOPs / (d.PeakFLOPs * r.AttentionEfficiency(c.Attention) / share)
		} else {
			t = c.FLOPs / (r.FP32FLOPs * r.F32AttentionEfficiency() / share)
		}
	case engine.ClassMemory:
		t = memory
	case engine.ClassHost:
		return hostLatency + c.Bytes/r.HostBandwidth
	}
	return math.Max(t, kernelFloor)
}

// KernelSeconds is a step's time by kernel class: the kernel list's
// GEMMs, attention, memory-bound kernels (the optimizer's included) and
// host copies, and the communication that compute does not hide.
type KernelSeconds struct {
	GEMM       float64 `json:"gemm"`
	Attention  float64 `json:"attention"`
	Memory     float64 `json:"memory"`
	Host       float64 `json:"host"`
	Collective float64 `json:"collective"`
}

// Total is the kernels' time, the collectives' left out.
func (k KernelSeconds) Total() float64 { return k.GEMM + k.Attention + k.Memory + k.Host }

// stepTimes is a step's kernel list timed.
type stepTimes struct {
	byClass KernelSeconds
	// pass is one micro-batch's passes' time by class; optimizer the
	// AdamWStep's; lastBackward the last micro-batch's head, loss and
	// backward's.
	pass                    KernelSeconds
	optimizer, lastBackward float64
	source                  string
}

// add is s + f·(o − s) field by field: the linear extrapolation that
// stepTime makes.
func (s stepTimes) extrapolate(o stepTimes, f float64) stepTimes {
	lin := func(a, b float64) float64 { return a + f*(b-a) }
	k := func(a, b KernelSeconds) KernelSeconds {
		return KernelSeconds{GEMM: lin(a.GEMM, b.GEMM), Attention: lin(a.Attention, b.Attention), Memory: lin(a.Memory, b.Memory),
			Host: lin(a.Host, b.Host), Collective: lin(a.Collective, b.Collective)}
	}
	return stepTimes{byClass: k(s.byClass, o.byClass), pass: k(s.pass, o.pass), optimizer: lin(s.optimizer, o.optimizer),
		lastBackward: lin(s.lastBackward, o.lastBackward), source: s.source}
}

// stepTime times the kernel list of step s (llama.StepKernelsOf) on a
// rank of d (share ranks to a device's resources). The list grows
// linearly with the layers and the micro-batches, each adding the same
// kernels, so it is timed for one micro-batch of a model of one layer and
// of two, and extrapolated: t(L, m) = t(1, 1) + (L−1)·(t(2, 1) − t(1, 1))
// + (m−1)·pass(L), exactly the whole list's sum (a test holds it) as
// long as the few kernels whose size grows with L or m rather than
// repeating — the optimizer's and the gradient norm's, one each, and the
// step's loss sums over m values — are timed linearly in their bytes,
// which they are above the kernel floor (the optimizer's and the norm's
// for any model of a layer or more; the sums floored alike for any m
// below millions). A list of a 405B model's step, thousands of
// micro-batches of 126 layers, would take seconds to build for each of
// Search's candidates.
func stepTime(cfg *checkpoints.Config, d Device, s Step, o Options, share float64) (stepTimes, error) {
	one := s
	one.MicroBatches = 1
	layers := func(L int) (stepTimes, error) {
		c := cfg
		if L != cfg.NumHiddenLayers {
			c = cfg.Clone()
			c.NumHiddenLayers = L
		}
		return timeList(c, d, one, o, share)
	}
	L := cfg.NumHiddenLayers
	st, err := layers(min(L, 1))
	if err != nil {
		return stepTimes{}, err
	}
	if L > 1 {
		two, err := layers(2)
		if err != nil {
			return stepTimes{}, err
		}
		st = st.extrapolate(two, float64(L-1))
	}
	m := float64(s.MicroBatches - 1)
	p := st.pass
	st.byClass.GEMM += m * p.GEMM
	st.byClass.Attention += m * p.Attention
	st.byClass.Memory += m * p.Memory
	st.byClass.Host += m * p.Host
	return st, nil
}

// timeList times the whole kernel list of step s.
func timeList(cfg *checkpoints.Config, d Device, s Step, o Options, share float64) (stepTimes, error) {
	w := s.Work(o)
	// A LoRA step is timed as the full fine-tune's (Options.LoRA).
	w.LoRA, w.BaseDType = nil, engine.F32
	sk, err := llama.StepKernelsOf(cfg, w)
	if err != nil {
		return stepTimes{}, fmt.Errorf("perfmodel: %w", err)
	}
	var st stepTimes
	first, last := sk.Passes[0], sk.Passes[len(sk.Passes)-1]
	for i, k := range sk.List {
		c := k.Cost()
		t := d.kernelSeconds(c, o, share)
		add := func(ks *KernelSeconds) {
			switch c.Class {
			case engine.ClassGEMM:
				ks.GEMM += t
			case engine.ClassAttention:
				ks.Attention += t
			case engine.ClassMemory:
				ks.Memory += t
			case engine.ClassHost:
				ks.Host += t
			}
		}
		add(&st.byClass)
		if i >= first[0] && i < first[2] {
			add(&st.pass)
		}
		if k.Op == "AdamWStep" {
			st.optimizer += t
		}
		if i >= last[1] && i < last[2] {
			st.lastBackward += t
		}
	}
	st.source = "modelled: the step's kernel list, each kernel at its class's modelled rate"
	if d.Kernels == nil {
		st.source = "modelled: the step's kernel list's FLOPs at the device's measured step efficiency"
	}
	return st, nil
}
