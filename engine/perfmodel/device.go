package perfmodel

import (
	"fmt"
	"sort"
	"strings"
)

// DefaultEfficiency is the fraction of the dense bf16 peak that a whole
// training step's compute reaches: the GEMMs (which alone reach about
// 0.6–0.75 of peak at these sizes) together with the memory-bound kernels
// between them (attention softmax, norms, SwiGLU, casts) and launch gaps.
// It is one constant for every device and model, chosen from published
// end-to-end measurements rather than fitted to one case: torchtitan's
// Llama 3.1 8B on 8 H100 (5,762 tokens/s/GPU, 34% MFU), Llama 3 405B
// training (38–43% MFU) and Megatron-LM on H100 (41–48% MFU) — 0.40 is in
// the middle. AMD's MI250X reaches less in practice (AxoNN's Frontier run
// is ≈ 22% of peak); pass an explicit efficiency to model that.
const DefaultEfficiency = 0.40

// DefaultMemoryFraction is the share of a device's memory the planner lets
// a rank use: the rest is the CUDA/ROCm context, NCCL/RCCL buffers, the
// allocator's fragmentation and transient buffers the model does not list
// (all-reduce outputs, GEMM workspaces).
const DefaultMemoryFraction = 0.90

// A Device is one accelerator as the planner sees it. "GPU" means one
// schedulable device: an MI250X card holds two GCDs, each its own device.
// Bandwidths are per device and per direction, in bytes per second.
type Device struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// PeakFLOPs is the dense (not sparse) bf16 tensor-core peak, FLOP/s.
	PeakFLOPs float64 `json:"peak_flops"`
	// MemoryBytes is the device memory as the datasheet prints it
	// (decimal GB), a little less than the driver reports.
	MemoryBytes int64 `json:"memory_bytes"`
	// HBMBandwidth is the memory bandwidth, for the memory-bound AdamW
	// update.
	HBMBandwidth float64 `json:"hbm_bandwidth"`
	// NodeSize is the number of devices that share the intra-node fabric.
	NodeSize int `json:"node_size"`
	// IntraNodeBandwidth is what one device can send to its node peers
	// (NVLink through NVSwitch; Infinity Fabric).
	IntraNodeBandwidth float64 `json:"intra_node_bandwidth"`
	// InterNodeBandwidth is one device's share of its node's network
	// injection bandwidth (InfiniBand; Slingshot).
	InterNodeBandwidth float64 `json:"inter_node_bandwidth"`
	// Efficiency is the default compute efficiency (DefaultEfficiency).
	Efficiency float64 `json:"efficiency"`
}

// devices is read-only after package initialisation. Sources:
//   - H100 SXM5: NVIDIA H100 datasheet, 989.4 TFLOP/s dense bf16 (1,979
//     with sparsity), 80 GB HBM3 at 3.35 TB/s; NVLink 4 is 18 links × 25
//     GB/s per direction = 450 GB/s (the datasheet's 900 GB/s counts both
//     directions); DGX H100 has one 400 Gb/s ConnectX-7 NDR port per GPU =
//     50 GB/s.
//   - H200 SXM: the same compute and fabric as H100 (NVIDIA H200 datasheet:
//     989 TFLOP/s dense bf16), 141 GB HBM3e at 4.8 TB/s; HGX H200 systems
//     pair each GPU with a 400 Gb/s NIC.
//   - A100 SXM4 80 GB: 312 TFLOP/s dense bf16, 2.039 TB/s; NVLink 3 is 12
//     links × 25 GB/s per direction = 300 GB/s; DGX A100 has one 200 Gb/s
//     ConnectX-6 HDR port per GPU = 25 GB/s.
//   - MI250X: 383 TFLOP/s dense bf16 per card, 191.5 per GCD; 128 GB HBM2e
//     at 3.2768 TB/s per card, half per GCD. A Frontier node has 4 cards = 8
//     GCDs; the two GCDs of a card share 4 Infinity Fabric links (200 GB/s
//     per direction) but GCDs on different cards are joined by 1–2 links of
//     50 GB/s per direction (OLCF Frontier user guide), so a ring over the
//     node runs at the single-link 50 GB/s. Four Slingshot-11 NICs of 25
//     GB/s serve the node: 12.5 GB/s per GCD.
//
// Node size is 8 for all (DGX/HGX; Frontier's 8 GCDs); Perlmutter's 4-GPU
// A100 nodes would need their own entry.
var devices = []Device{
	{
		Name: "h100", Description: "NVIDIA H100 SXM5 80 GB, NVLink 4 + 400 Gb/s InfiniBand per GPU",
		PeakFLOPs: 989e12, MemoryBytes: 80e9, HBMBandwidth: 3.35e12,
		NodeSize: 8, IntraNodeBandwidth: 450e9, InterNodeBandwidth: 50e9, Efficiency: DefaultEfficiency,
	},
	{
		Name: "h200", Description: "NVIDIA H200 SXM 141 GB, NVLink 4 + 400 Gb/s InfiniBand per GPU",
		PeakFLOPs: 989e12, MemoryBytes: 141e9, HBMBandwidth: 4.8e12,
		NodeSize: 8, IntraNodeBandwidth: 450e9, InterNodeBandwidth: 50e9, Efficiency: DefaultEfficiency,
	},
	{
		Name: "a100", Description: "NVIDIA A100 SXM4 80 GB, NVLink 3 + 200 Gb/s InfiniBand per GPU",
		PeakFLOPs: 312e12, MemoryBytes: 80e9, HBMBandwidth: 2.039e12,
		NodeSize: 8, IntraNodeBandwidth: 300e9, InterNodeBandwidth: 25e9, Efficiency: DefaultEfficiency,
	},
	{
		Name: "mi250x", Description: "AMD MI250X, one GCD (half a card), Infinity Fabric + Slingshot-11 (Frontier node)",
		PeakFLOPs: 191.5e12, MemoryBytes: 64e9, HBMBandwidth: 1.6384e12,
		NodeSize: 8, IntraNodeBandwidth: 50e9, InterNodeBandwidth: 12.5e9, Efficiency: DefaultEfficiency,
	},
}

// Devices lists the known devices.
func Devices() []Device { return append([]Device(nil), devices...) }

// LookupDevice returns the named device (case-insensitive).
func LookupDevice(name string) (Device, error) {
	for _, d := range devices {
		if strings.EqualFold(d.Name, name) {
			return d, nil
		}
	}
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.Name
	}
	sort.Strings(names)
	return Device{}, fmt.Errorf("perfmodel: unknown gpu %q (want one of %s)", name, strings.Join(names, ", "))
}

func (d Device) validate() error {
	if d.PeakFLOPs <= 0 || d.MemoryBytes <= 0 || d.NodeSize < 1 || d.IntraNodeBandwidth <= 0 || d.InterNodeBandwidth <= 0 || d.HBMBandwidth <= 0 {
		return fmt.Errorf("perfmodel: device %q lacks a peak, memory, node size or bandwidth", d.Name)
	}
	return nil
}

// bandwidth is the per-direction bandwidth of the link a group spans.
func (d Device) bandwidth(interNode bool) float64 {
	if interNode {
		return d.InterNodeBandwidth
	}
	return d.IntraNodeBandwidth
}
