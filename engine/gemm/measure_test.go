package gemm

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/internal/numtest"
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
	for _, bf16 := range []bool{false, true} {
		if r, ok := KernelPeak(New(2), 20*time.Millisecond, bf16); !ok || !(r > 0) {
			t.Errorf("Go path (bf16 %v): KernelPeak = %v, %v; want a positive rate", bf16, r, ok)
		}
	}
	if _, ok := KernelPeak(Reference{}, time.Millisecond, false); ok {
		t.Error("gonum: KernelPeak ok, want not (it has no micro-kernel)")
	}
}

// TestProbeBF16: a bf16 probe computes GemmBF16 of the rounded operands.
func TestProbeBF16(t *testing.T) {
	s := Shape{M: 40, N: 50, K: 30}
	p := NewProbeBF16(New(1), s)
	if !(p.Seconds() > 0) {
		t.Fatal("no time")
	}
	want := make([]float32, s.M*s.N)
	GemmBF16(Reference{}, false, false, s.M, s.N, s.K, 1, p.a16, s.K, p.b16, s.N, 0, want, s.N)
	if err := numtest.Close(p.c, want, numtest.Tol{Abs: 1e-5}); err != nil {
		t.Fatalf("C: %v", err)
	}
}

// TestKernelBenchSweep: one sweep adds A's panel times every panel of the
// B block to C, so every element of C's tile row gets kc·(1e-3)².
func TestKernelBenchSweep(t *testing.T) {
	for _, kn := range append(append([]*microKernel(nil), cpuKernels...), pairKernels()...) {
		kb := newKernelBench(kn)
		flops := kb.sweep()
		want, each := 2*float64(kn.mr*kb.ncols*kb.kc), 1e-6
		if kn.pairs {
			// Two products a step, of 1e-3's upper half.
			h := float64(math.Float32frombits(math.Float32bits(1e-3) &^ 0xffff))
			want, each = 2*want, 2*h*h
		}
		if err := numtest.Scalar(flops, want, numtest.Tol{}); err != nil {
			t.Errorf("%s: flops counted by a sweep: %v", kn.name, err)
		}
		wantC := make([]float64, len(kb.c))
		for i := range wantC {
			wantC[i] = float64(kb.kc) * each
		}
		if err := numtest.Close(kb.c, wantC, numtest.Tol{Abs: 1e-9}); err != nil {
			t.Fatalf("%s: C after one sweep: %v", kn.name, err)
		}
	}
}
