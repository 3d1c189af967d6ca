package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/comm/commbench"
	"github.com/memtrain/memtrain/engine/perfmodel"
	"github.com/memtrain/memtrain/internal/numtest"
)

func TestParseByteSizes(t *testing.T) {
	// The one size grammar (units.ParseBytes): K, M, G and KiB, MiB are
	// powers of 1024, KB a power of 1000.
	got, err := parseByteSizes("4096, 64K,16M,1G,1.5K,64KB,1 MiB")
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{4096, 64 << 10, 16 << 20, 1 << 30, 1536, 64000, 1 << 20}
	if !slices.Equal(got, want) {
		t.Fatalf("parseByteSizes = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "K", "0", "-4", "6", "3K7", "4T", "8G", "2G", "2GiB", "1.001KB", "64K,", "1e3"} {
		if _, err := parseByteSizes(bad); err == nil {
			t.Errorf("parseByteSizes(%q): no error", bad)
		}
	}
}

// TestBenchComm runs a small in-process measurement, checks its lines,
// and plans with the device it writes.
func TestBenchComm(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "cpu.json")
	out, errs, code := memtrain(t, "", "bench", "comm", "--ranks", "2,4", "--sizes", "4K,64K", "--iters", "3",
		"--device", dev, "--peak", "100", "--efficiency", "0.5")
	if code != 0 {
		t.Fatal(errs)
	}
	var cases, fits int
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r commbench.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if r.Transport != "local" {
			t.Errorf("%q: transport %q", line, r.Transport)
		}
		if r.Op == "fit" {
			fits++
			continue
		}
		cases++
		if r.Iters != 3 || !(r.TimeUS > 0) || r.Groups != 4/r.Ranks {
			t.Errorf("%q: want 3 iterations, a time, and 4/ranks groups", line)
		}
		if r.Op != "all-reduce" {
			continue
		}
		// Each rounded to 3 digits.
		if err := numtest.Scalar(r.BusBW, r.AlgBW*2*float64(r.Ranks-1)/float64(r.Ranks), numtest.Tol{Rel: 0.02}); err != nil {
			t.Errorf("%q: busbw against algbw × 2(p−1)/p: %v", line, err)
		}
	}
	if cases != 2*3*2 || fits != 2 {
		t.Errorf("%d cases and %d fits, want 12 and 2:\n%s", cases, fits, out)
	}
	if !strings.Contains(errs, "groups of 4 (1 at once): bus bandwidth") || !strings.Contains(errs, "wrote "+dev) {
		t.Errorf("summary:\n%s", errs)
	}
	raw, err := os.ReadFile(dev)
	if err != nil {
		t.Fatal(err)
	}
	var d perfmodel.Device
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if !d.SharedNode || d.NodeSize != 4 || d.PeakFLOPs != 100e9 || d.Efficiency != 0.5 || len(d.Timings) != 12 {
		t.Errorf("device %+v", d)
	}
	r := runPlanJSON(t, "--model", "tiny", "--gpus", "4", "--device-json", dev, "--seq-len", "64", "--global-batch-tokens", "512",
		"--micro-batch", "8", "--recompute", "off", "--top", "0")
	if len(r.Plans) == 0 || r.Device.Name != "cpu-4" {
		t.Fatalf("plan with the measured device: %+v", r)
	}
	for _, p := range r.Plans {
		if p.MicroBatch*p.Grid.Data*p.Grid.Z != 8 || p.MicroBatches != 1 {
			t.Errorf("%+v: micro-batch %d × %d, want 8 sequences over the grid, once", p.Grid, p.MicroBatch, p.MicroBatches)
		}
	}
}

func TestBenchCommErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ranks", "0"}, "--ranks"},
		{[]string{"--sizes", "3"}, "whole number of float32"},
		{[]string{"--ops", "broadcast"}, "unknown"},
		{[]string{"--device", "x.json"}, "needs --peak"},
		{[]string{"--ranks", "4", "--world", "2"}, "--ranks 4: no group"},
		{[]string{"--world", "-1"}, "--world -1"},
	} {
		_, errs, code := memtrain(t, "", append([]string{"bench", "comm"}, c.args...)...)
		if code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: status %d, %q; want %q", c.args, code, errs, c.want)
		}
	}
}
