package gemm

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseShapes(t *testing.T) {
	got, err := ParseShapes("48, 20x30x40,7X8X9")
	if err != nil {
		t.Fatal(err)
	}
	want := []Shape{{48, 48, 48}, {20, 30, 40}, {7, 8, 9}}
	if len(got) != len(want) {
		t.Fatalf("ParseShapes = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("shape %d = %v, want %v", i, got[i], want[i])
		}
	}
	for _, c := range []struct{ in, want string }{
		{"12x3", `"12x3": want N or MxNxK`},
		{"0", "positive integers"},
		{"4x-1x2", "positive integers"},
		{"8,", `list "8,": item 2 of 2 is empty`},
		{"8,,16", `list "8,,16": item 2 of 3 is empty`},
		{"", "no shapes"},
		{"1000000", "more than 8 GiB"},
	} {
		if _, err := ParseShapes(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseShapes(%q) = %v, want an error containing %q", c.in, err, c.want)
		}
	}
}

func TestGFLOPs(t *testing.T) {
	for _, g := range []Impl{New(1), Reference{}} {
		if r := GFLOPs(g, Shape{M: 8, N: 12, K: 16}, 2); !(r > 0) {
			t.Errorf("%s: GFLOPs = %v, want a positive rate", g.Name(), r)
		}
	}
}

func TestCompareProgress(t *testing.T) {
	ticks := 0
	r := Compare([]Impl{New(1), Reference{}}, Shape{M: 8, N: 12, K: 16}, 3, func() { ticks++ })
	if len(r) != 2 || !(r[0] > 0) || !(r[1] > 0) || ticks != 3 {
		t.Errorf("Compare = %v with %d progress calls, want 2 positive rates and 3 calls", r, ticks)
	}
}

func TestKernelPeak(t *testing.T) {
	if r, ok := KernelPeak(New(2), 20*time.Millisecond); !ok || !(r > 0) {
		t.Errorf("Go path: KernelPeak = %v, %v; want a positive rate", r, ok)
	}
	if _, ok := KernelPeak(Reference{}, time.Millisecond); ok {
		t.Error("gonum: KernelPeak ok, want not (it has no micro-kernel)")
	}
}

// TestKernelBenchSweep: one sweep adds A's panel times every panel of the
// B block to C, so every element of C's tile row gets kc·(1e-3)².
func TestKernelBenchSweep(t *testing.T) {
	for _, kn := range cpuKernels {
		kb := newKernelBench(kn)
		flops := kb.sweep()
		if want := 2 * float64(kn.mr*kb.ncols*kb.kc); flops != want {
			t.Errorf("%s: sweep counts %v flops, want %v", kn.name, flops, want)
		}
		for i, v := range kb.c {
			if math.Abs(float64(v)-float64(kb.kc)*1e-6) > 1e-9 {
				t.Fatalf("%s: C[%d] = %v after one sweep, want %v", kn.name, i, v, float64(kb.kc)*1e-6)
			}
		}
	}
}
