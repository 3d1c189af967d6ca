package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBenchGemm(t *testing.T) {
	out, errs, code := memtrain(t, "", "bench", "gemm", "--sizes", "48, 20x30x40", "--threads", "2", "--repeat", "2", "--reference")
	if code != 0 {
		t.Fatalf("bench gemm failed (%d): %s", code, errs)
	}
	seen := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var all map[string]any
		if err := json.Unmarshal([]byte(line), &all); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, key := range []string{"impl", "m", "n", "k", "threads", "gflops"} {
			if _, ok := all[key]; !ok {
				t.Errorf("line %q lacks %q", line, key)
			}
		}
		if len(all) != 6 {
			t.Errorf("line %q: want exactly impl, m, n, k, threads, gflops", line)
		}
		impl := all["impl"].(string)
		seen[impl]++
		if g, _ := all["gflops"].(float64); !(g > 0) {
			t.Errorf("line %q: gflops not positive", line)
		}
		wantThreads := 2.0
		if impl == "gonum" {
			wantThreads = 1
		}
		if all["threads"] != wantThreads {
			t.Errorf("line %q: threads = %v, want %v", line, all["threads"], wantThreads)
		}
		if m, n, k := all["m"], all["n"], all["k"]; !(m == 48.0 && n == 48.0 && k == 48.0) && !(m == 20.0 && n == 30.0 && k == 40.0) {
			t.Errorf("line %q: unexpected size", line)
		}
	}
	if seen["go"] != 2 || seen["gonum"] != 2 {
		t.Errorf("cases per implementation = %v, want 2 each for go and gonum", seen)
	}
	if n := seen["openblas"]; n != 0 && n != 2 {
		t.Errorf("%d OpenBLAS cases, want 0 or 2", n)
	}
	if seen["openblas"] == 0 && !strings.Contains(errs, "skipping OpenBLAS") {
		t.Errorf("no OpenBLAS lines and no note why on stderr: %q", errs)
	}
}

func TestBenchGemmBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sizes", "12x3"}, `"12x3": want N or MxNxK`},
		{[]string{"--sizes", "0"}, "positive integers"},
		{[]string{"--sizes", "1000000"}, "more than 8 GiB"},
		{[]string{"--repeat", "0"}, "--repeat 0"},
		{[]string{"--threads", "-1"}, "--threads -1"},
	} {
		_, errs, code := memtrain(t, "", append([]string{"bench", "gemm"}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("bench gemm %v: exit %d, stderr %q; want one line containing %q", tc.args, code, errs, tc.want)
		}
	}
}
