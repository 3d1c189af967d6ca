package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBarSaysItsUnit: a progress bar's count comes with its unit (issue
// 33, item 11: "(248/256)" said nothing of what was counted).
func TestBarSaysItsUnit(t *testing.T) {
	var b bytes.Buffer
	bar := newBar(&b, 256, "eval", "passes")
	if err := bar.Set(248); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.Contains(out, "(248/256, ") || !strings.Contains(out, " passes/s") {
		t.Errorf("bar %q: want the count with its unit", out)
	}
}
