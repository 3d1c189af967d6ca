package perfmodel

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/memtrain/memtrain/checkpoints"
)

// TestReportWriteText: a report's text names the model and the device,
// gives each plan a row in each of its four narrow tables, and says where
// its numbers come from.
func TestReportWriteText(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	dev, err := LookupDevice("h200")
	if err != nil {
		t.Fatal(err)
	}
	job := Job{Config: cfg, Device: dev, GPUs: 8, SeqLen: 4096, GlobalBatchTokens: 8 * 4096}
	opt := Options{TopK: 2}
	plans, err := Search(job, opt)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReport("llama3.1-8b", cfg, job, opt, plans)
	if len(r.Plans) != 2 || r.Plans[0].MemoryTotal != plans[0].Memory.Total() || !(r.Attention[0] > 0 && r.Attention[1] > 0) {
		t.Fatalf("report %+v", r)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"model   llama3.1-8b: 8.03B parameters", "8 × h200", "memory per GPU, GiB:",
		"communication, seconds a step before overlap", "step time by kernel class", "not measured"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 3 && (f[0] == "1" || f[0] == "2") {
			rows++
			if n := utf8.RuneCountInString(line); n > 100 {
				t.Errorf("a table row of %d columns: %q", n, line)
			}
		}
	}
	if rows != 8 {
		t.Errorf("%d rows, want 2 in each of 4 tables:\n%s", rows, out)
	}
}
