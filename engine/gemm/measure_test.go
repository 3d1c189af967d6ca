package gemm

import (
	"strings"
	"testing"
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
