package report

import (
	"bytes"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/memorization"
)

// TestCurvePasses: the steps of a pass are read off the metrics, steps
// become passes, and the measurement that ends the first pass is the last
// one at or before its last step.
func TestCurvePasses(t *testing.T) {
	var ms []finetune.Metrics
	for step := 1; step <= 12; step++ { // 4 steps a pass, extraction every 3
		m := finetune.Metrics{Step: step, Epoch: (step - 1) / 4}
		if step%3 == 0 {
			m.Extraction = &memorization.ExtractionSummary{Protocol: "goldfish-50",
				Members: memorization.ExtractionGroup{Documents: 8, Exact: float64(step) / 12}}
		}
		ms = append(ms, m)
	}
	if n := stepsPerPass(ms); n != 4 {
		t.Fatalf("steps per pass %d, want 4", n)
	}
	if n := stepsPerPass(ms[:3]); n != 3 {
		t.Errorf("a run inside its first pass: %d steps per pass, want 3 (its steps)", n)
	}
	if n := stepsPerPass(nil); n != 0 {
		t.Errorf("no metrics: %d steps per pass", n)
	}
	proto, pts := extractionCurve(ms)
	c := runCurve{protocol: proto, points: pts, perPass: stepsPerPass(ms)}
	// Exact match 0.25, 0.5, 0.75, 1 at steps 3, 6, 9, 12: 50% at step 6,
	// 1.5 passes.
	if p, ok := c.reachPasses(0.5); !ok || p != 1.5 {
		t.Errorf("passes to 50%%: %v %v, want 1.5", p, ok)
	}
	if _, ok := c.reachPasses(1.01); ok {
		t.Error("a threshold never reached was reached")
	}
	if p, ok := c.firstPass(); !ok || p.step != 3 || p.members != 0.25 {
		t.Errorf("first pass: %+v %v, want the measurement at step 3", p, ok)
	}
	if got := c.trainedPasses(); got != 3 {
		t.Errorf("passes trained %v, want 3", got)
	}
	if unknown := (runCurve{points: pts}); !math.IsNaN(unknown.passes(4)) {
		t.Error("passes without the steps of a pass should be NaN")
	}
}

// sizeCurves are the extraction curves of the size fixture: exact match
// of the targets at steps 2, 4, …, 16 (4 steps a pass, 4 passes).
var sizeCurves = map[string][]float64{
	"std-small-s1": {0, 0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75},       // 50% at step 12: 3 passes; first pass 0
	"std-small-s2": {0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875},   // step 10: 2.5; 0.125
	"std-small-s3": {0, 0.125, 0.125, 0.25, 0.25, 0.375, 0.375, 0.375}, // never; 0.125
	"std-large-s1": {0.25, 0.5, 0.75, 1, 1, 1, 1, 1},                   // step 4: 1; 0.5
	"std-large-s2": {0.5, 0.75, 1, 1, 1, 1, 1, 1},                      // step 2: 0.5; 0.75
	"std-large-s3": {0.125, 0.375, 0.625, 0.875, 1, 1, 1, 1},           // step 6: 1.5; 0.375
	"gf4-small-s1": {0, 0, 0, 0, 0, 0, 0, 0},                           // never; 0
	"gf4-small-s2": {0, 0, 0, 0, 0, 0, 0, 0},                           // never; 0
	"gf4-large-s1": {0, 0.125, 0.125, 0.25, 0.25, 0.25, 0.375, 0.375},  // never; 0.125
	"gf4-large-s2": {0, 0.125, 0.125, 0.125, 0.25, 0.25, 0.375, 0.375}, // never; 0.125
}

// TestWriteReportSizeCurves: a size study with extraction curves gets the
// table of passes to 50% and first-pass exact match against the
// non-embedding parameters, hand-computed, and its two figures (PNG and
// SVG) with their titles, axes and legends.
func TestWriteReportSizeCurves(t *testing.T) {
	dir := reportDir(t, "size-curves")
	var runs []fixRun
	for _, arm := range []struct {
		name, loss    string
		model         string
		k             int
		params, nonEm int64
		seeds         int
	}{
		{"std-small", "standard", "tiny-h32-l1", 0, 1_036_640, 12_640, 3},
		{"gf4-small", "goldfish", "tiny-h32-l1", 4, 1_036_640, 12_640, 2},
		{"std-large", "standard", "tiny-h192-l6", 0, 8_800_704, 2_656_704, 3},
		{"gf4-large", "goldfish", "tiny-h192-l6", 4, 8_800_704, 2_656_704, 2},
	} {
		for s := 1; s <= arm.seeds; s++ {
			runs = append(runs, fixRun{arm: arm.name, seed: uint64(s), loss: arm.loss, k: arm.k, model: arm.model,
				params: arm.params, nonEmb: arm.nonEm, exact: 0.5, rouge: 0.7, held: 2.5, final: 0.3, auc: 0.8})
		}
	}
	writeFixture(t, dir, runs)
	for name, exact := range sizeCurves {
		var metrics bytes.Buffer
		for step := 1; step <= 16; step++ {
			loss := 1 + 2/float64(step)
			m := finetune.Metrics{Schema: 1, Step: step, Epoch: (step - 1) / 4, Loss: loss, LossAll: loss}
			if step%2 == 0 {
				held := 0.0
				if name == "std-large-s2" && step == 4 {
					held = 0.125 // one held-out passage extracted: the floor is their mean
				}
				m.Extraction = &memorization.ExtractionSummary{Protocol: "goldfish-50",
					Members:    memorization.ExtractionGroup{Documents: fixDocs, Exact: exact[step/2-1]},
					NonMembers: &memorization.ExtractionGroup{Documents: fixDocs, Exact: held}}
			}
			writeJSONLine(t, &metrics, m)
		}
		writeReportFile(t, filepath.Join(dir, "arms", name, "train", MetricsFile), metrics.Bytes())
	}
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	md := readReportFile(t, rep.Markdown)
	rows := []string{
		// 3 and 2.5 passes: 2.75 ± 0.35; first pass 0, 0.125, 0.125:
		// 8.3% ± 7.2.
		"| std-small | standard | 12,640 | 1.04M | 3 | 2 of 3 | 2.75 ± 0.35 | 2.5–3 | 8.3% ± 7.2 | 0.0%–12.5% | 0.0% ± 0.0 | 4 |",
		// 1, 0.5, 1.5 passes: 1.00 ± 0.50; first pass 0.5, 0.75, 0.375:
		// 54.2% ± 19.1; held out 0, 0.125, 0: 4.2% ± 7.2.
		"| std-large | standard | 2,656,704 | 8.8M | 3 | 3 of 3 | 1.00 ± 0.50 | 0.5–1.5 | 54.2% ± 19.1 | 37.5%–75.0% | 4.2% ± 7.2 | 4 |",
		"| gf4-small | goldfish k=4 | 12,640 | 1.04M | 2 | 0 of 2 | — | — | 0.0% ± 0.0 | 0.0% | 0.0% ± 0.0 | 4 |",
		"| gf4-large | goldfish k=4 | 2,656,704 | 8.8M | 2 | 0 of 2 | — | — | 12.5% ± 0.0 | 12.5% | 0.0% ± 0.0 | 4 |",
	}
	for _, want := range append([]string{
		"## Memorization against model size",
		"| arm | loss | non-embedding parameters | parameters | seeds | seeds that reached 50% | passes to 50% exact match |",
		"![Passes to 50% extraction, by model size](plots/passes-to-50-vs-params.png)",
		"![Memorization after one pass, by model size](plots/first-pass-vs-params.png)",
		// The curves: a figure per loss against passes, not one against the step.
		"![Memorization during training, standard loss](plots/memorization-vs-pass-standard.png)",
		"![Memorization during training, goldfish k=4 loss](plots/memorization-vs-pass-goldfish-k-4.png)",
		"a line per model size, the mean over its seeds",
	}, rows...) {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// Standard rows first, each loss by size.
	at := make([]int, len(rows))
	for i, r := range rows {
		at[i] = strings.Index(md, r)
	}
	if !slices.IsSorted(at) {
		t.Errorf("size rows at %v, want standard small, large, then goldfish small, large", at)
	}
	if strings.Contains(md, "measured extraction last before the end of their first pass") {
		t.Error("every run measured the end of its first pass, but the report says otherwise")
	}
	checkPlots(t, dir, rep, []string{
		"plots/memorization-vs-params-goldfish-50.png", "plots/memorization-vs-params-carlini-50.png",
		"plots/rougeL-distribution-goldfish-50.png", "plots/rougeL-distribution-carlini-50.png",
		"plots/training-loss.png", "plots/memorization-vs-pass-standard.png", "plots/memorization-vs-pass-goldfish-k-4.png",
		"plots/passes-to-50-vs-params.png", "plots/first-pass-vs-params.png",
	})
	if rows := readReportCSV(t, rep.CSV); rows[0][8] != "non_embedding_params" || rows[1][8] != "12640" {
		t.Errorf("results.csv: column %q = %q, want non_embedding_params = 12640", rows[0][8], rows[1][8])
	}

	// The figures' data: titles in words, axes with units, a log x axis
	// marked at the sizes, ticks of at most 4 significant digits, legends.
	results, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	arms := groupArms(results)
	sas := sizeArms(arms, readCurves(dir, arms))
	if len(sas) != 4 {
		t.Fatalf("%d size arms, want 4", len(sas))
	}
	passes, _, err := passesFigure(arms, sas)
	if err != nil {
		t.Fatal(err)
	}
	first, caption, err := firstPassFigure(arms, sas)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		f           *plotFigure
		yLabel      string
		yMax        float64
		legend      []string
		yTickLabels bool
	}{
		{passes, "passes to 50% exact match", 4.4, []string{
			"standard: mean, bars min–max",
			"standard: 50% not reached by some or all seeds",
			"goldfish k=4: 50% not reached by some or all seeds",
			"passes trained (4)"}, true},
		{first, "exact match after one pass (% of targets)", 100, []string{
			"standard: mean, bars min–max",
			"goldfish k=4: mean, bars min–max",
			"held-out passages (never trained), mean"}, true},
	} {
		f := c.f
		if f.p.Title.Text == "" || !strings.Contains(f.p.Title.Text, "by model size") {
			t.Errorf("title %q", f.p.Title.Text)
		}
		if f.p.X.Label.Text != "non-embedding parameters (log scale)" || !f.logX {
			t.Errorf("%s: x axis %q (log %v), want non-embedding parameters on a log scale", f.p.Title.Text, f.p.X.Label.Text, f.logX)
		}
		if f.p.Y.Label.Text != c.yLabel || f.p.Y.Min != 0 {
			t.Errorf("%s: y axis %q over [%g, %g], want %q over [0, %g]", f.p.Title.Text, f.p.Y.Label.Text, f.p.Y.Min, f.p.Y.Max, c.yLabel, c.yMax)
		}
		if err := numtest.Scalar(f.p.Y.Max, c.yMax, numtest.Tol{Abs: 1e-9}); err != nil {
			t.Errorf("%s: y axis's maximum: %v", f.p.Title.Text, err)
		}
		var xLabels []string
		for _, tk := range f.p.X.Tick.Marker.Ticks(f.p.X.Min, f.p.X.Max) {
			if tk.Label != "" {
				xLabels = append(xLabels, tk.Label)
			}
			if want := []float64{math.Log(12_640), math.Log(2_656_704)}; !slices.Contains(want, tk.Value) {
				t.Errorf("%s: x tick at %g, not at a size", f.p.Title.Text, tk.Value)
			}
		}
		if !slices.Equal(xLabels, []string{"12.6k", "2.66M"}) {
			t.Errorf("%s: x labels %q, want 12.6k and 2.66M", f.p.Title.Text, xLabels)
		}
		for _, tk := range f.p.Y.Tick.Marker.Ticks(f.p.Y.Min, f.p.Y.Max) {
			if tk.Label == "" {
				continue
			}
			v, err := strconv.ParseFloat(tk.Label, 64)
			if digits := strings.TrimLeft(strings.ReplaceAll(tk.Label, ".", ""), "0"); err != nil || len(digits) > 4 {
				t.Errorf("%s: y tick %g labelled %q", f.p.Title.Text, tk.Value, tk.Label)
			} else if err := numtest.Scalar(tk.Value, v, numtest.Tol{Max: 1e-9, Floor: 1}); err != nil {
				t.Errorf("%s: y tick labelled %q: %v", f.p.Title.Text, tk.Label, err)
			}
		}
		if !slices.Equal(f.names, c.legend) {
			t.Errorf("%s: legend %q, want %q", f.p.Title.Text, f.names, c.legend)
		}
	}
	if !strings.Contains(caption, "the held-out controls' exact match at the same step, the floor") {
		t.Errorf("first-pass caption %q lacks the floor", caption)
	}

	// One size only: no section and no figures.
	one := t.TempDir()
	writeFixture(t, one, runs[:3])
	for _, name := range []string{"std-small-s1", "std-small-s2", "std-small-s3"} {
		var metrics bytes.Buffer
		for step := 1; step <= 4; step++ {
			loss := 1 + 2/float64(step) // a log axis needs a range
			m := finetune.Metrics{Schema: 1, Step: step, Loss: loss, LossAll: loss}
			if step%2 == 0 {
				m.Extraction = &memorization.ExtractionSummary{Protocol: "goldfish-50", Members: memorization.ExtractionGroup{Documents: fixDocs}}
			}
			writeJSONLine(t, &metrics, m)
		}
		writeReportFile(t, filepath.Join(one, "arms", name, "train", MetricsFile), metrics.Bytes())
	}
	rep, err = Write(one, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if md := readReportFile(t, rep.Markdown); strings.Contains(md, "by model size") {
		t.Error("a study of one size has the size section")
	}
}
