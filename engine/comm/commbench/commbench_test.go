package commbench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestCases: the order is group size, operation, size; groups larger
// than the world are skipped; iters 0 is DefaultIters.
func TestCases(t *testing.T) {
	cases, skipped, err := Cases([]int{2, 8, 4}, []int64{4096, 64 << 20}, []string{"all-reduce", "all-gather"}, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := []Case{
		{"all-reduce", 2, 4096, 200}, {"all-reduce", 2, 64 << 20, 5}, {"all-gather", 2, 4096, 200}, {"all-gather", 2, 64 << 20, 5},
		{"all-reduce", 4, 4096, 200}, {"all-reduce", 4, 64 << 20, 5}, {"all-gather", 4, 4096, 200}, {"all-gather", 4, 64 << 20, 5},
	}
	if !slices.Equal(cases, want) || !slices.Equal(skipped, []int{8}) {
		t.Errorf("Cases = %v, skipped %v; want %v, skipped [8]", cases, skipped, want)
	}
	if got := DefaultIters(1 << 20); got != 200 {
		t.Errorf("DefaultIters(1M) = %d, want 200", got)
	}
	if got := DefaultIters(16 << 20); got != 16 {
		t.Errorf("DefaultIters(16M) = %d, want 16", got)
	}
	cases, _, err = Cases([]int{2}, []int64{4096}, []string{"reduce-scatter"}, 7, 2)
	if err != nil || len(cases) != 1 || cases[0].Iters != 7 {
		t.Errorf("iters 7: %v, %v", cases, err)
	}

	_, skipped, err = Cases([]int{4, 8}, []int64{4096}, []string{"all-reduce"}, 0, 2)
	if !errors.Is(err, ErrNoGroup) || !slices.Equal(skipped, []int{4, 8}) {
		t.Errorf("no group fits: %v, skipped %v", err, skipped)
	}
	for _, c := range []struct {
		ranks []int
		sizes []int64
		ops   []string
		iters int
		world int
		want  string
	}{
		{[]int{0}, []int64{4096}, []string{"all-reduce"}, 0, 2, "groups of 0"},
		{[]int{2}, []int64{6}, []string{"all-reduce"}, 0, 2, "float32"},
		{[]int{2}, []int64{4096}, []string{"broadcast"}, 0, 2, "unknown collective"},
		{[]int{2}, []int64{4096}, []string{"all-reduce"}, -1, 2, "-1 timed calls"},
		{[]int{2}, []int64{4096}, []string{"all-reduce"}, 0, 0, "world of 0"},
		{nil, []int64{4096}, []string{"all-reduce"}, 0, 2, "want group sizes"},
	} {
		_, _, err := Cases(c.ranks, c.sizes, c.ops, c.iters, c.world)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Cases(%v, %v, %v, %d, %d): %v, want %q", c.ranks, c.sizes, c.ops, c.iters, c.world, err, c.want)
		} else if strings.Contains(err.Error(), "--") {
			t.Errorf("%v: names a flag", err)
		}
	}
}

// TestRun measures a few small cases on in-process ranks.
func TestRun(t *testing.T) {
	b, err := New(Options{Ranks: []int{2, 4, 8}, Sizes: []int64{4096, 16 << 10}, Ops: Ops(), Iters: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b.Transport != Local || b.World != 8 || len(b.Skipped) != 0 || len(b.Cases) != 3*3*2 {
		t.Fatalf("bench %+v", b)
	}
	b, err = New(Options{Ranks: []int{2, 4, 8}, Sizes: []int64{4096, 16 << 10}, Ops: Ops(), Iters: 2, World: 4, OneGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	if b.World != 4 || !slices.Equal(b.Skipped, []int{8}) {
		t.Fatalf("world 4: bench %+v", b)
	}
	results, fits, err := b.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*3*2 || len(fits) != 2 {
		t.Fatalf("%d results and %d fits, want 12 and 2", len(results), len(fits))
	}
	for i, r := range results {
		c := b.Cases[i]
		if r.Transport != Local || r.Op != c.Op || r.Ranks != c.Ranks || r.Bytes != c.Bytes || r.Iters != 2 || r.Groups != 1 || !(r.TimeUS > 0) || !(r.AlgBW > 0) {
			t.Errorf("result %d %+v for case %+v", i, r, c)
		}
	}
	for i, f := range fits {
		if f.Transport != Local || f.Op != "fit" || f.Ranks != []int{2, 4}[i] || f.Groups != 1 || !(f.BusBW > 0) || !(f.LatencyUS >= 0) {
			t.Errorf("fit %+v", f)
		}
	}
}

// TestFits: a line through exact points is found again; times that fall
// with size fall back to the largest size's bandwidth.
func TestFits(t *testing.T) {
	var rs []Result
	for _, b := range []int64{1 << 10, 1 << 20, 1 << 24} {
		// all-reduce over 2: sent = bytes; 50 µs + bytes at 2 GB/s.
		secs := 50e-6 + float64(b)/2e9
		rs = append(rs, Result{Op: "all-reduce", Ranks: 2, Bytes: b, TimeUS: secs * 1e6, BusBW: float64(b) / secs / 1e9})
	}
	f := Fits(rs)
	if len(f) != 1 {
		t.Fatalf("fits %+v, want one", f)
	}
	if err := numtest.Scalar(f[0].BusBW, 2, numtest.Tol{Abs: 0.01}); err != nil {
		t.Errorf("fit %+v: bus bandwidth against 2 GB/s: %v", f[0], err)
	}
	if err := numtest.Scalar(f[0].LatencyUS, 50, numtest.Tol{Abs: 0.5}); err != nil {
		t.Errorf("fit %+v: latency against 50 µs: %v", f[0], err)
	}
	rs[2].TimeUS = 10
	rs[2].BusBW = 1.5
	if f := Fits(rs); f[0].BusBW != 1.5 || f[0].LatencyUS != 10 {
		t.Errorf("falling times: fit %+v, want the largest size's 1.5 GB/s and the fastest call's 10 µs", f)
	}
}

// TestMeasuredDevice: the largest group's fit and every result make the
// device of a shared node.
func TestMeasuredDevice(t *testing.T) {
	results := []Result{
		{Transport: Local, Op: "all-reduce", Ranks: 2, Groups: 2, Bytes: 1 << 20, TimeUS: 500},
		{Transport: Local, Op: "all-gather", Ranks: 4, Groups: 1, Bytes: 1 << 20, TimeUS: 400},
	}
	fits := []Fit{
		{Transport: Local, Op: "fit", Ranks: 2, Groups: 2, BusBW: 3, LatencyUS: 20},
		{Transport: Local, Op: "fit", Ranks: 4, Groups: 1, BusBW: 2, LatencyUS: 40},
	}
	d, err := measuredDevice(results, fits, 4, 100e9, 0.5, 64<<30)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "cpu-4" || !d.SharedNode || d.NodeSize != 4 || d.PeakFLOPs != 100e9 || d.Efficiency != 0.5 ||
		d.MemoryBytes != 64<<30 || d.IntraNodeBandwidth != 8e9 || len(d.Timings) != 2 || d.Timings[1].Seconds != 400e-6 {
		t.Errorf("device %+v", d)
	}
	if err := numtest.Scalar(d.Latency, 40e-6, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("device latency: %v", err)
	}
	if _, err := measuredDevice(results, fits, 4, 100e9, 0.5, 0); err == nil || !strings.Contains(err.Error(), "memory") {
		t.Errorf("no memory size: %v", err)
	}
	if _, err := measuredDevice(results, nil, 4, 100e9, 0.5, 64<<30); err == nil {
		t.Error("no fits: no error")
	}
	if _, err := MeasuredDevice(results, fits, 4, 0, 0.5); err == nil {
		t.Error("no peak: no error")
	}
}

// TestBounds: worlds, group sizes and timed calls beyond the bounds are
// refused before anything is made (a world of 100,000 in-process ranks
// ran out of memory in seconds), and HostBytes, what a world's ranks
// allocate, grows with the world and the largest buffer without
// overflowing.
func TestBounds(t *testing.T) {
	for _, o := range []Options{
		{Ranks: []int{2}, World: 100_000},
		{Ranks: []int{100_000}},
		{Ranks: []int{2}, Iters: MaxIters + 1},
	} {
		o.Sizes, o.Ops = []int64{4096}, Ops()
		if b, err := New(o); err == nil {
			t.Errorf("%+v: world %d accepted", o, b.World)
		}
	}
	b, err := New(Options{Ranks: []int{2, 8}, Sizes: []int64{4096, 64 << 20}, Ops: Ops()})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := b.HostBytes(), int64(8*(2*(64<<20)+8*8+1<<20)); got != want {
		t.Errorf("HostBytes of 8 ranks of 64 MiB buffers = %d, want %d", got, want)
	}
	b.World = MaxRanks
	b.Cases = append(b.Cases, Case{Op: "all-reduce", Ranks: 2, Bytes: 1 << 62})
	if got := b.HostBytes(); got != math.MaxInt64 {
		t.Errorf("HostBytes of %d ranks of 4 EiB buffers = %d, want it saturated", MaxRanks, got)
	}
}
