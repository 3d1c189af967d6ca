package checkpoints

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestExportPlanShared: an export whose weight files are written by
// separate plans (as separate ranks write them), in any order, is byte
// for byte Export's; a sharded export's files, index and config load by
// HF name.
func TestExportPlanShared(t *testing.T) {
	cfg := tinyConfig(false)
	src := filepath.Join(t.TempDir(), "src")
	if err := Save(src, cfg, RandomWeights(cfg, 4), SaveOptions{DType: DTypeF32, Files: map[string][]byte{"tokenizer.json": []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	opt := ExportOptions{DType: DTypeBF16, MaxShardBytes: 2 << 10}
	whole := filepath.Join(t.TempDir(), "whole")
	if err := Export(src, whole, opt); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "shared")
	tmp, err := ExportTemp(shared)
	if err != nil {
		t.Fatal(err)
	}
	var plans []*ExportPlan
	for range 3 {
		p, err := PlanExport(src, opt)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		plans = append(plans, p)
	}
	if plans[0].Files() < 3 {
		t.Fatalf("%d files; want a split export", plans[0].Files())
	}
	for i := plans[0].Files() - 1; i >= 0; i-- {
		if err := plans[i%3].WriteFile(tmp, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := plans[0].Finish(tmp, shared); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(whole)
	for _, e := range entries {
		a, _ := os.ReadFile(filepath.Join(whole, e.Name()))
		b, err := os.ReadFile(filepath.Join(shared, e.Name()))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs (%v)", e.Name(), err)
		}
	}
	ck, err := Open(shared)
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()
	if err := Export(src, shared, opt); err == nil {
		t.Error("exported over a folder that holds files")
	}
}
