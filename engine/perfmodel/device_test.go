package perfmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestMeasuredDevice(t *testing.T) {
	m := Measured{PeakFLOPs: 200e9, Efficiency: 0.5, BusBandwidth: 1e9, Latency: 2e-4, Ranks: 4, MemoryBytes: 16e9,
		Timings: []Timing{{OpAllReduce, 2, 1 << 20, 1e-3}}}
	d, err := MeasuredDevice(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "measured" || !d.SharedNode || d.NodeSize != 4 || d.IntraNodeBandwidth != 4e9 || d.InterNodeBandwidth != 4e9 ||
		d.HBMBandwidth != DefaultCPUMemoryBandwidth || d.WireBytes != 4 || d.LogitBytes != 8 || d.Latency != 2e-4 || len(d.Timings) != 1 {
		t.Errorf("MeasuredDevice = %+v", d)
	}
	if s := d.Sources; !strings.HasPrefix(s.Links, "measured") || !strings.HasPrefix(s.Memory, "measured") ||
		!strings.HasPrefix(s.Peak, "given") || !strings.HasPrefix(s.Efficiency, "given") {
		t.Errorf("measured device's sources: %+v", s)
	}
	for _, bad := range []func(*Measured){
		func(m *Measured) { m.Ranks = 0 },
		func(m *Measured) { m.BusBandwidth = 0 },
		func(m *Measured) { m.Efficiency = 1.5 },
		func(m *Measured) { m.Latency = -1 },
		func(m *Measured) { m.Timings = []Timing{{"broadcast", 2, 4, 1}} },
		func(m *Measured) { m.Timings = []Timing{{OpAllGather, 1, 4, 1}} },
	} {
		b := m
		bad(&b)
		if _, err := MeasuredDevice(b); err == nil {
			t.Errorf("MeasuredDevice(%+v): no error", b)
		}
	}
}

// TestCallSeconds checks the interpolation of measured timings by hand.
func TestCallSeconds(t *testing.T) {
	d := Device{Timings: []Timing{
		{OpAllReduce, 2, 1000, 1e-3},
		{OpAllReduce, 2, 3000, 2e-3},
		{OpAllReduce, 8, 1000, 5e-3},
		{OpAllGather, 4, 2000, 4e-3},
	}}
	for _, c := range []struct {
		op    string
		p     int
		bytes float64
		want  float64
		ok    bool
	}{
		{OpAllReduce, 2, 10, 1e-3, true},     // below the smallest: latency bound
		{OpAllReduce, 2, 1000, 1e-3, true},   // a measured point
		{OpAllReduce, 2, 2000, 1.5e-3, true}, // halfway
		{OpAllReduce, 2, 6000, 4e-3, true},   // beyond: the largest's bandwidth
		// p = 3 is nearer 2 than 8 (ratio 1.5 against 2.7); it sends
		// (4/3)/(1) times more per byte than p = 2: 1500 bytes → 2000.
		{OpAllReduce, 3, 1500, 1.5e-3, true},
		// p = 4 is as near 2 as 8 in ratio: the larger wins, and sends
		// (3/2)/(7/4) as much per byte: 7000 bytes → 6000 at p = 8.
		{OpAllReduce, 4, 7000, 5e-3 * 6, true},
		{OpAllGather, 4, 1000, 4e-3, true},
		{OpReduceScatter, 4, 1000, 0, false},
	} {
		got, ok := d.CallSeconds(c.op, c.p, c.bytes)
		if ok != c.ok {
			t.Errorf("CallSeconds(%s, %d, %g) = %g, %v; want %g, %v", c.op, c.p, c.bytes, got, ok, c.want, c.ok)
		}
		if err := numtest.Scalar(got, c.want, numtest.Tol{Abs: 1e-15}); err != nil {
			t.Errorf("CallSeconds(%s, %d, %g): %v", c.op, c.p, c.bytes, err)
		}
	}
}

// sharedDevice is a node of 4 CPU ranks with round numbers.
func sharedDevice() Device {
	return Device{Name: "node", PeakFLOPs: 1e12, MemoryBytes: 4e9, HBMBandwidth: 1e11, NodeSize: 4,
		IntraNodeBandwidth: 4e9, InterNodeBandwidth: 4e9, Efficiency: 0.5, Latency: 1e-4, SharedNode: true, WireBytes: 4}
}

// TestSharedNode: the ranks of a grid divide the node's compute, memory
// and bandwidth; activations travel in float32; every call pays the
// latency; nothing overlaps.
func TestSharedNode(t *testing.T) {
	cfg := smallConfig(t)
	s := Step{Grid: Grid{Data: 1, X: 2, Y: 1, Z: 2}, SeqLen: 8, MicroBatch: 1, MicroBatches: 2}
	shared := sharedDevice()
	alone := shared
	alone.SharedNode = false
	ps, err := Estimate(cfg, shared, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pa, err := Estimate(cfg, alone, s, Options{NoOverlap: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Scalar(ps.ComputeSeconds/pa.ComputeSeconds, 4, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("compute on a node shared by 4 ranks, in one rank's: %v", err)
	}
	if err := numtest.Scalar(ps.OptimizerSeconds/pa.OptimizerSeconds, 4, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("optimizer on a node shared by 4 ranks, in one rank's: %v", err)
	}
	var want float64
	for _, c := range ps.Collectives {
		b := c.Bytes
		if b == 2 {
			b = 4
		}
		want += c.SentElements()*float64(b)/(4e9/4) + float64(c.Calls)*1e-4
	}
	got := ps.Comm.X + ps.Comm.Y + ps.Comm.Z + ps.Comm.Data + ps.Comm.DataZ
	if err := numtest.Scalar(got, want, numtest.Tol{Rel: 1e-12}); err != nil {
		t.Errorf("comm seconds: %v", err)
	}
	if ps.ExposedCommSeconds != got {
		t.Errorf("comm %g s, exposed %g: want all exposed", got, ps.ExposedCommSeconds)
	}
	// Memory: a rank may use 90% of a quarter of the node.
	if got, want := (Options{}).usable(shared, s.Grid), int64(0.9*4e9/4); got != want {
		t.Errorf("usable %d, want %d", got, want)
	}
	// A grid of 2 ranks on the node of 4 has it to two.
	s2 := Step{Grid: Grid{Data: 2, X: 1, Y: 1, Z: 1}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}
	p2, _ := Estimate(cfg, shared, s2, Options{})
	a2, _ := Estimate(cfg, alone, s2, Options{})
	if err := numtest.Scalar(p2.ComputeSeconds/a2.ComputeSeconds, 2, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("2 ranks on a node: compute in one rank's: %v", err)
	}
}

// TestSharedNodeTimings: measured timings replace bandwidth and latency,
// scaled by the ranks a grid puts on the node.
func TestSharedNodeTimings(t *testing.T) {
	cfg := smallConfig(t)
	dev := sharedDevice()
	dev.Timings = []Timing{{OpAllReduce, 2, 1, 1e-3}, {OpAllGather, 2, 1, 2e-3}, {OpReduceScatter, 2, 1, 3e-3}}
	s := Step{Grid: Grid{Data: 1, X: 1, Y: 1, Z: 2}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}
	p, err := Estimate(cfg, dev, s, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Every payload is above 1 byte, so each call costs bytes × the
	// measured seconds a byte, times 2 ranks ÷ the node's 4.
	perByte := map[string]float64{OpAllReduce: 1e-3, OpAllGather: 2e-3, OpReduceScatter: 3e-3}
	var want float64
	for _, c := range p.Collectives {
		b := c.Bytes
		if b == 2 {
			b = 4
		}
		want += float64(c.Calls) * float64(c.Elements) * float64(b) * perByte[c.Op] * 2 / 4
	}
	if err := numtest.Scalar(p.Comm.Z+p.Comm.DataZ, want, numtest.Tol{Rel: 1e-12}); err != nil {
		t.Errorf("comm seconds: %v", err)
	}
}

// TestLossSeconds: the loss work a grid adds to one rank's, by hand.
func TestLossSeconds(t *testing.T) {
	cfg := smallConfig(t) // vocabulary 256
	dev := sharedDevice()
	dev.LogitBytes = 8
	tokens := 16.0
	for _, c := range []struct {
		g      Grid
		extraV float64 // extra logit-element passes a rank, in vocabularies
	}{
		{Grid{4, 1, 1, 1}, 0},
		{Grid{1, 1, 1, 4}, 0},
		{Grid{2, 2, 1, 1}, 1 - 0.5},       // each X rank passes over all of them
		{Grid{2, 1, 2, 1}, 0.5 * (4 - 1)}, // half the vocabulary, four passes, one rank's share
		{Grid{1, 2, 2, 1}, 0.5 * (4 - 0.5)},
	} {
		want := tokens * 256 * c.extraV * 8 / (1e11 / 4)
		if err := numtest.Scalar(lossSeconds(cfg, dev, c.g, tokens), want, numtest.Tol{Abs: 1e-15}); err != nil {
			t.Errorf("%v: loss seconds: %v", c.g, err)
		}
	}
	dev.LogitBytes = 0
	if got := lossSeconds(cfg, dev, Grid{1, 2, 2, 1}, tokens); got != 0 {
		t.Errorf("without LogitBytes: %g s", got)
	}
}

// TestSearchMicroBatch: a fixed micro-batch (over the whole grid) keeps
// only the grids it splits over.
func TestSearchMicroBatch(t *testing.T) {
	cfg := smallConfig(t)
	h100, _ := LookupDevice("h100")
	job := Job{Config: cfg, Device: h100, GPUs: 4, SeqLen: 8, GlobalBatchTokens: 8 * 8}
	plans, err := Search(job, Options{MicroBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		dz := p.Grid.Data * p.Grid.Z
		if p.MicroBatch*dz != 2 || p.MicroBatches != 4 {
			t.Errorf("%v: micro-batch %d × %d, want 2/%d a coordinate × 4", p.Grid, p.MicroBatch, p.MicroBatches, dz)
		}
	}
	if len(plans) == 0 {
		t.Error("no plan")
	}
	for _, mb := range []int{3, -1} {
		if _, err := Search(job, Options{MicroBatch: mb}); err == nil || !strings.Contains(err.Error(), "micro-batch") {
			t.Errorf("micro-batch %d: %v", mb, err)
		}
	}
	// One sequence: only grids with Data·Z = 1 take it.
	plans, err = Search(Job{Config: cfg, Device: h100, GPUs: 4, SeqLen: 8, GlobalBatchTokens: 8}, Options{MicroBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		if p.Grid.Data*p.Grid.Z != 1 {
			t.Errorf("one sequence on %v", p.Grid)
		}
	}
}

// TestTableSources checks that every table device says its numbers are
// its datasheet's (its memory the datasheet's or as the device reports
// it), has no step efficiency and says its kernel rates are modelled.
func TestTableSources(t *testing.T) {
	for _, d := range Devices() {
		memory := d.Sources.Memory == "datasheet" || strings.HasPrefix(d.Sources.Memory, "as the device reports it")
		if s := d.Sources; s.Peak != "datasheet" || !memory || s.Links != "datasheet" || s.Efficiency != "" || d.Efficiency != 0 {
			t.Errorf("%s: sources %+v, efficiency %g", d.Name, s, d.Efficiency)
		}
		if d.Kernels == nil {
			t.Fatalf("%s: no kernel rates", d.Name)
		}
		k := d.Kernels.Sources
		for _, src := range []string{k.GEMM, k.Attention, k.Memory, k.Host} {
			if !strings.HasPrefix(src, "modelled: ") {
				t.Errorf("%s: kernel source %q", d.Name, src)
			}
		}
	}
	// The table is not changed through what Devices or LookupDevice give.
	d, _ := LookupDevice("h100")
	d.Kernels.GEMM = 0.1
	if e, _ := LookupDevice("h100"); e.Kernels.GEMM == 0.1 {
		t.Error("LookupDevice shares the table's kernel rates")
	}
}

func TestReadDevice(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	d, err := ReadDevice(write("box.json", `{"name": "box", "peak_flops": 1e11, "memory_bytes": 16000000000, "shared_node": true}`))
	if err != nil || d.Name != "box" || d.PeakFLOPs != 1e11 || d.MemoryBytes != 16e9 || !d.SharedNode {
		t.Errorf("ReadDevice = %+v, %v", d, err)
	}
	if d, err := ReadDevice(write("anon.json", `{"peak_flops": 1}`)); err != nil || d.Name != "custom" {
		t.Errorf("a device without a name: %+v, %v", d, err)
	}
	// A file's numbers are its author's, unless it says otherwise (as
	// bench comm's files do).
	if want := "given in " + filepath.Join(dir, "box.json"); d.Sources != (Sources{want, want, want, ""}) {
		t.Errorf("sources of a hand-written file: %+v", d.Sources)
	}
	d, err = ReadDevice(write("measured.json", `{"peak_flops": 1, "sources": {"links": "measured by memtrain bench comm"}}`))
	if err != nil || d.Sources.Links != "measured by memtrain bench comm" || !strings.HasPrefix(d.Sources.Peak, "given in ") {
		t.Errorf("a file with sources: %+v, %v", d.Sources, err)
	}
	for _, c := range []struct{ path, want string }{
		{write("typo.json", `{"peek_flops": 1}`), `typo.json: json: unknown field "peek_flops"`},
		{write("bad.json", `{`), "bad.json"},
		{filepath.Join(dir, "none.json"), "none.json"},
	} {
		if _, err := ReadDevice(c.path); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "perfmodel: ") {
			t.Errorf("ReadDevice(%s): %v, want an error containing %q", c.path, err, c.want)
		}
	}
}

func TestOptionsOnDevice(t *testing.T) {
	h100, err := LookupDevice("h100")
	if err != nil {
		t.Fatal(err)
	}
	shared := Device{MemoryBytes: 4e9, NodeSize: 4, SharedNode: true}
	for _, c := range []struct {
		o     Options
		d     Device
		ranks int
		want  int64
	}{
		{Options{}, h100, 64, int64(0.9 * 80e9)},
		{Options{MemoryFraction: 0.5}, h100, 1, 40e9},
		{Options{}, shared, 2, int64(0.9 * 4e9 / 2)},
		{Options{}, shared, 16, int64(0.9 * 4e9 / 4)},
	} {
		if got := c.o.UsableMemory(c.d, c.ranks); got != c.want {
			t.Errorf("%+v on %d ranks of %+v: usable %d, want %d", c.o, c.ranks, c.d, got, c.want)
		}
	}
	if !(Options{}).Overlaps(h100) || (Options{NoOverlap: true}).Overlaps(h100) || (Options{}).Overlaps(shared) {
		t.Error("Overlaps: want true only without NoOverlap on a device of its own")
	}
}
