package perfmodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/internal/choice"
	"github.com/memtrain/memtrain/internal/inputfile"
)

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
	// HBMBandwidth is the memory bandwidth, for the memory-bound
	// kernels (norms, elementwise, the loss, the AdamW update).
	HBMBandwidth float64 `json:"hbm_bandwidth"`
	// NodeSize is the number of devices that share the intra-node fabric.
	NodeSize int `json:"node_size"`
	// IntraNodeBandwidth is what one device can send to its node peers
	// (NVLink through NVSwitch; Infinity Fabric).
	IntraNodeBandwidth float64 `json:"intra_node_bandwidth"`
	// InterNodeBandwidth is one device's share of its node's network
	// injection bandwidth (InfiniBand; Slingshot).
	InterNodeBandwidth float64 `json:"inter_node_bandwidth"`
	// Kernels, on a GPU, are what its kernels reach (KernelRates): the
	// step's time is its kernel list's, each kernel at its class's rate.
	Kernels *KernelRates `json:"kernels,omitempty"`
	// Efficiency, for a device without Kernels, is the share of
	// PeakFLOPs a whole training step reaches as measured there (`memtrain
	// bench step`: its achieved FLOP/s over `bench gemm`'s): the kernel
	// list's FLOPs are timed at that rate, its memory-bound kernels
	// inside it. It is how MeasuredDevice describes a CPU node, whose
	// kernels no rates model.
	Efficiency float64 `json:"efficiency,omitempty"`
	// Latency is what a collective call costs beyond its bytes, in
	// seconds: the α of time = α + bytes/β. The GPU table leaves it zero
	// (a large model's calls carry megabytes, and NCCL's few microseconds
	// do not change the ranking); a CPU machine, whose ranks pass a
	// collective only when the scheduler runs all of them, needs it.
	Latency float64 `json:"latency,omitempty"`
	// SharedNode says that the ranks placed on a node share one pool of
	// compute, memory and bandwidth: CPU ranks (processes or goroutines)
	// on one machine, where the cores that compute also copy the
	// collectives' data. PeakFLOPs, MemoryBytes, HBMBandwidth and both
	// link bandwidths are then the node's totals; each rank of a grid
	// gets 1/r of them, r = the grid's ranks on a node (min(size,
	// NodeSize)), and communication hides behind no compute.
	SharedNode bool `json:"shared_node,omitempty"`
	// WireBytes is the size of an activation or weight element in the
	// collectives: 0 means float32's 4, as both of memtrain's backends
	// send them; 2 models an engine that sends bf16. Statistics and
	// gradients travel in fp32 whatever it says.
	WireBytes int `json:"wire_bytes,omitempty"`
	// LogitBytes, when positive, adds the loss work that a grid adds to
	// one rank's (lossSeconds): the bytes of memory traffic of one pass
	// of the cross-entropy kernel over one logit element, at HBMBandwidth.
	// It applies to a device described by its measured step efficiency
	// (no Kernels): the kernel list's loss kernels are timed on a GPU,
	// and the efficiency measured on one rank leaves out what a grid
	// adds. On a CPU they are a tenth of a one-rank step,
	// and a grid can multiply them (MeasuredDevice sets 8: a float32 read
	// and written).
	LogitBytes float64 `json:"logit_bytes,omitempty"`
	// Sources say where the numbers above come from (plan prints them):
	// a table device's are its datasheet's, its kernel rates' in Kernels.
	Sources Sources `json:"sources"`
	// Timings, when present, are measured collective calls (`memtrain
	// bench comm --device`) that replace the bandwidths and Latency for
	// the operations they cover: a call's time is interpolated from those
	// of its operation at the nearest measured group size (CallSeconds).
	// A machine whose bandwidth depends on the message size — caches,
	// MPI switching algorithms — is described better by its curve than
	// by one bandwidth.
	Timings []Timing `json:"timings,omitempty"`
}

// Sources say where each of a Device's numbers comes from: "datasheet",
// "measured …", "given …", "modelled …" or "assumed …", with what
// measured, gave, modelled or assumed it. Kernels carries its own.
type Sources struct {
	// Peak is PeakFLOPs'.
	Peak string `json:"peak"`
	// Memory is MemoryBytes' and HBMBandwidth's.
	Memory string `json:"memory"`
	// Links is the bandwidths', Latency's and Timings'.
	Links string `json:"links"`
	// Efficiency is Efficiency's (empty without one).
	Efficiency string `json:"efficiency,omitempty"`
}

// datasheet are the table's sources; the kernels' are in KernelRates.
var datasheet = Sources{Peak: "datasheet", Memory: "datasheet", Links: "datasheet"}

// A Timing is one measured collective: Seconds a call of Op over Ranks
// ranks on a buffer of Bytes (the full buffer, as Collective.Elements
// counts it), with every group of the machine's ranks busy at once.
type Timing struct {
	Op      string  `json:"op"`
	Ranks   int     `json:"ranks"`
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

// devices is read-only after package initialisation. Sources:
//   - H100 SXM5: NVIDIA H100 datasheet, 989.4 TFLOP/s dense bf16 (1,979
//     with sparsity), 80 GB HBM3 at 3.35 TB/s; NVLink 4 is 18 links × 25
//     GB/s per direction = 450 GB/s (the datasheet's 900 GB/s counts both
//     directions); DGX H100 has one 400 Gb/s ConnectX-7 NDR port per GPU =
//     50 GB/s.
//   - H200 SXM: the same compute and fabric as H100 (NVIDIA H200 datasheet:
//     989 TFLOP/s dense bf16), HBM3e at 4.8 TB/s; HGX H200 systems pair each
//     GPU with a 400 Gb/s NIC. Memory as the device reports it, not the
//     datasheet's rounded "141 GB": 143,771 MiB (cuMemGetInfo's total and
//     nvidia-smi on an H200 SXM), 140.4 GiB.
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
		NodeSize: 8, IntraNodeBandwidth: 450e9, InterNodeBandwidth: 50e9, Kernels: &hopperRates,
		Sources: datasheet,
	},
	{
		Name: "h200", Description: "NVIDIA H200 SXM 141 GB, NVLink 4 + 400 Gb/s InfiniBand per GPU",
		PeakFLOPs: 989e12, MemoryBytes: 143771 << 20, HBMBandwidth: 4.8e12,
		NodeSize: 8, IntraNodeBandwidth: 450e9, InterNodeBandwidth: 50e9, Kernels: &hopperRates,
		Sources: Sources{Peak: "datasheet", Memory: "as the device reports it (143,771 MiB)", Links: "datasheet"},
	},
	{
		Name: "a100", Description: "NVIDIA A100 SXM4 80 GB, NVLink 3 + 200 Gb/s InfiniBand per GPU",
		PeakFLOPs: 312e12, MemoryBytes: 80e9, HBMBandwidth: 2.039e12,
		NodeSize: 8, IntraNodeBandwidth: 300e9, InterNodeBandwidth: 25e9, Kernels: &ampereRates,
		Sources: datasheet,
	},
	{
		Name: "mi250x", Description: "AMD MI250X, one GCD (half a card), Infinity Fabric + Slingshot-11 (Frontier node)",
		PeakFLOPs: 191.5e12, MemoryBytes: 64e9, HBMBandwidth: 1.6384e12,
		NodeSize: 8, IntraNodeBandwidth: 50e9, InterNodeBandwidth: 12.5e9, Kernels: &cdna2Rates,
		Sources: datasheet,
	},
}

// Devices lists the known devices.
func Devices() []Device {
	out := append([]Device(nil), devices...)
	for i := range out {
		out[i] = out[i].clone()
	}
	return out
}

// clone is d with its own copy of Kernels, so that a caller's changes
// do not reach the table.
func (d Device) clone() Device {
	if d.Kernels != nil {
		k := *d.Kernels
		d.Kernels = &k
	}
	return d
}

// LookupDevice returns the named device (case-insensitive).
func LookupDevice(name string) (Device, error) {
	for _, d := range devices {
		if strings.EqualFold(d.Name, name) {
			return d.clone(), nil
		}
	}
	names := make([]string, len(devices))
	for i, d := range devices {
		names[i] = d.Name
	}
	return Device{}, &choice.UnknownError{What: "gpu", Name: name, Known: names}
}

// ReadDevice reads a device described in JSON, Device's fields (an
// unknown field is an error), as `memtrain bench comm --device` writes
// one; a device without a name is "custom". It does not Validate it, so
// that the caller may adjust it first.
func ReadDevice(path string) (Device, error) {
	raw, err := inputfile.ReadFile(path)
	if err != nil {
		return Device{}, fmt.Errorf("perfmodel: %w", err)
	}
	var d Device
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Device{}, fmt.Errorf("perfmodel: %s: %w", path, err)
	}
	if d.Name == "" {
		d.Name = "custom"
	}
	// A hand-written file's numbers are its author's.
	given := "given in " + path
	fs := []*string{&d.Sources.Peak, &d.Sources.Memory, &d.Sources.Links}
	if d.Efficiency != 0 {
		fs = append(fs, &d.Sources.Efficiency)
	}
	if k := d.Kernels; k != nil {
		fs = append(fs, &k.Sources.GEMM, &k.Sources.Attention, &k.Sources.Memory, &k.Sources.Host)
	}
	for _, f := range fs {
		if *f == "" {
			*f = given
		}
	}
	return d, nil
}

// Validate reports a device that the model cannot use: a missing peak,
// memory, node size or bandwidth, or an efficiency or latency out of
// range.
func (d Device) Validate() error {
	// NaN fails every comparison, so each test is written to fail on it.
	positive := func(x float64) bool { return x > 0 && !math.IsInf(x, 1) }
	nonNegative := func(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
	if !positive(d.PeakFLOPs) || d.MemoryBytes <= 0 || d.NodeSize < 1 || !positive(d.IntraNodeBandwidth) || !positive(d.InterNodeBandwidth) || !positive(d.HBMBandwidth) {
		return fmt.Errorf("perfmodel: device %q lacks a finite positive peak (%g), memory, node size or bandwidth (%g, %g, %g)",
			d.Name, d.PeakFLOPs, d.IntraNodeBandwidth, d.InterNodeBandwidth, d.HBMBandwidth)
	}
	if !(d.Efficiency >= 0 && d.Efficiency <= 1) || !nonNegative(d.Latency) || !nonNegative(d.LogitBytes) {
		return fmt.Errorf("perfmodel: device %q: efficiency %g outside [0, 1], or negative latency %g or logit bytes %g", d.Name, d.Efficiency, d.Latency, d.LogitBytes)
	}
	if d.Kernels != nil {
		if err := d.Kernels.Validate(); err != nil {
			return fmt.Errorf("perfmodel: device %q: %w", d.Name, err)
		}
	} else if d.Efficiency == 0 {
		return fmt.Errorf("perfmodel: device %q has neither kernel rates (kernels) nor a measured step efficiency (efficiency): its step time cannot be modelled", d.Name)
	}
	if d.WireBytes != 0 && d.WireBytes != 2 && d.WireBytes != 4 {
		return fmt.Errorf("perfmodel: device %q: wire_bytes %d is neither 2 (bf16) nor 4 (float32)", d.Name, d.WireBytes)
	}
	for _, t := range d.Timings {
		if (t.Op != OpAllReduce && t.Op != OpAllGather && t.Op != OpReduceScatter) || t.Ranks < 2 || t.Bytes < 1 || !(t.Seconds > 0) {
			return fmt.Errorf("perfmodel: device %q: timing %+v: want an all-reduce, all-gather or reduce-scatter over 2 or more ranks of a positive size and time", d.Name, t)
		}
	}
	return nil
}

// elementBytes is the size on the wire of an element of c on this
// device: activations and weights travel at WireBytes when it is set.
func (d Device) elementBytes(c Collective) int {
	if c.payload && d.WireBytes != 0 {
		return d.WireBytes
	}
	return c.Bytes
}

// CallSeconds is the measured time of one call of op over p ranks on a
// buffer of bytes, from the device's Timings, and false when none covers
// op. The timings of the group size nearest p (in ratio; the larger on a
// tie) are used, at the same bytes sent per rank (bytes × the ring
// factors' ratio), and interpolated linearly in bytes between the measured
// sizes: below the smallest a call costs the smallest's time (latency
// bound), above the largest it grows at the largest's bandwidth.
func (d Device) CallSeconds(op string, p int, bytes float64) (float64, bool) {
	nearest := 0
	for _, t := range d.Timings {
		if t.Op != op {
			continue
		}
		dt, dn := math.Abs(math.Log(float64(t.Ranks)/float64(p))), math.Abs(math.Log(float64(nearest)/float64(p)))
		if nearest == 0 || dt < dn || dt == dn && t.Ranks > nearest {
			nearest = t.Ranks
		}
	}
	if nearest == 0 {
		return 0, false
	}
	var pts []Timing
	for _, t := range d.Timings {
		if t.Op == op && t.Ranks == nearest {
			pts = append(pts, t)
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].Bytes < pts[j].Bytes })
	x := bytes * RingFactor(op, p) / RingFactor(op, nearest)
	first, last := pts[0], pts[len(pts)-1]
	switch {
	case x <= float64(first.Bytes):
		return first.Seconds, true
	case x >= float64(last.Bytes):
		return last.Seconds * x / float64(last.Bytes), true
	}
	i := sort.Search(len(pts), func(i int) bool { return float64(pts[i].Bytes) >= x })
	a, b := pts[i-1], pts[i]
	f := (x - float64(a.Bytes)) / float64(b.Bytes-a.Bytes)
	return a.Seconds + f*(b.Seconds-a.Seconds), true
}

// commSeconds is the time of all the calls of c on grid g: measured
// (Timings) when the device has them for c's operation, else bytes sent
// over the bandwidth of the link the group spans plus Latency a call. On
// a shared node both are for the node's ranks all busy; a grid with fewer
// ranks on the node (share) has the node to fewer of them: the measured
// times scale by share ÷ NodeSize, the bandwidth by 1/share.
func (d Device) commSeconds(c Collective, g Grid, interNode bool) float64 {
	share := d.share(g)
	bytes := float64(c.Elements) * float64(d.elementBytes(c))
	if t, ok := d.CallSeconds(c.Op, c.GroupSize, bytes); ok {
		if d.SharedNode {
			t *= share / float64(d.NodeSize)
		}
		return float64(c.Calls) * t
	}
	return c.SentElements()*float64(d.elementBytes(c))/(d.bandwidth(interNode)/share) + float64(c.Calls)*d.Latency
}

// share is the number of ranks of grid g that divide one node's resources
// among them: 1, unless the device is a SharedNode.
func (d Device) share(g Grid) float64 { return d.shareOf(g.Size()) }

// shareOf is share for a grid of ranks ranks.
func (d Device) shareOf(ranks int) float64 {
	if !d.SharedNode {
		return 1
	}
	return float64(min(ranks, d.NodeSize))
}

// bandwidth is the per-direction bandwidth of the link a group spans.
func (d Device) bandwidth(interNode bool) float64 {
	if interNode {
		return d.InterNodeBandwidth
	}
	return d.IntraNodeBandwidth
}

// DefaultCPUMemoryBandwidth is the memory bandwidth MeasuredDevice
// assumes when none is given: what a few cores of a desktop or cloud
// machine stream (STREAM triad on two Zen cores is 20–30 GB/s). It only
// times the AdamW update, a few percent of a CPU step.
const DefaultCPUMemoryBandwidth = 20e9

// Measured is a machine as memtrain's benchmarks measure it, for
// MeasuredDevice.
type Measured struct {
	Name string
	// PeakFLOPs is the node's compute rate with every core busy, FLOP/s
	// (`memtrain bench gemm` on all threads), and Efficiency the share of
	// it a training step reaches (`memtrain bench step`).
	PeakFLOPs, Efficiency float64
	// BusBandwidth (bytes/s) and Latency (s) are one rank's, fitted by
	// `memtrain bench comm` to time = Latency + bytes × ring factor ÷
	// BusBandwidth, with Ranks ranks all communicating at once.
	BusBandwidth, Latency float64
	Ranks                 int
	// MemoryBytes is the node's memory; MemoryBandwidth its bandwidth
	// (0: DefaultCPUMemoryBandwidth).
	MemoryBytes     int64
	MemoryBandwidth float64
	// Timings are the measured calls behind the fit (Device.Timings).
	Timings []Timing
}

// MeasuredDevice is a node of CPU ranks as the model sees it: one device
// is one rank, the Ranks ranks measured share the node (SharedNode), and
// activations and weights travel in float32 (WireBytes 4), as the CPU
// engine computes.
// The measured per-rank bus bandwidth times Ranks is the node's total,
// which a grid of r ranks divides r ways; the latency is a call's at
// Ranks ranks; the timings, when given, take precedence over both for
// the operations they cover. Nothing crosses nodes: the node holds Ranks ranks and the
// network is given the node's own bandwidth.
func MeasuredDevice(m Measured) (Device, error) {
	if m.Ranks < 1 || m.BusBandwidth <= 0 || m.Latency < 0 || m.PeakFLOPs <= 0 || m.Efficiency <= 0 || m.Efficiency > 1 || m.MemoryBytes <= 0 || m.MemoryBandwidth < 0 {
		return Device{}, fmt.Errorf("perfmodel: measured device %q: want positive ranks, bus bandwidth, peak and memory, efficiency in (0, 1] and a latency ≥ 0 (got %+v)", m.Name, m)
	}
	if m.Name == "" {
		m.Name = "measured"
	}
	memory := "measured (the machine's memory and bandwidth)"
	if m.MemoryBandwidth == 0 {
		m.MemoryBandwidth = DefaultCPUMemoryBandwidth
		memory = "measured (the machine's memory); bandwidth assumed (20 GB/s)"
	}
	node := m.BusBandwidth * float64(m.Ranks)
	d := Device{
		Name: m.Name,
		Description: fmt.Sprintf("measured node of %d CPU ranks: %.1f GFLOP/s, %.2f GB/s a rank, %.0f µs a call",
			m.Ranks, m.PeakFLOPs/1e9, m.BusBandwidth/1e9, m.Latency*1e6),
		PeakFLOPs: m.PeakFLOPs, MemoryBytes: m.MemoryBytes, HBMBandwidth: m.MemoryBandwidth,
		NodeSize: m.Ranks, IntraNodeBandwidth: node, InterNodeBandwidth: node,
		Efficiency: m.Efficiency, Latency: m.Latency, SharedNode: true, WireBytes: 4, LogitBytes: 8,
		Timings: append([]Timing(nil), m.Timings...),
		Sources: Sources{
			Peak: "given to memtrain bench comm (from memtrain bench gemm)", Memory: memory,
			Links: "measured by memtrain bench comm", Efficiency: "given to memtrain bench comm (from memtrain bench step)",
		},
	}
	return d, d.Validate()
}
