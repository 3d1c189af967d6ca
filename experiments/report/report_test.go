package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/memorization"
)

// A fixture run: one arm × seed with hand-chosen numbers. The members'
// intervals are exact ± (0.1, 0.05); ROUGE-L (words) is rouge and ROUGE-L
// (tokens) rouge − 0.05, token match rouge − 0.1.
type fixRun struct {
	arm    string
	seed   uint64
	loss   string
	k      int
	model  string
	params int64
	nonEmb int64   // non-embedding parameters (0: not recorded)
	exact  float64 // members' exact match (non-members: exact / 10)
	rouge  float64
	held   float64 // held-out loss
	final  float64 // final training loss
	auc    float64 // MIA loss AUC (zlib: auc − 0.01, min-k: auc − 0.02)
}

// The protocols of the fixture: goldfish (one prefix, key 0) and carlini
// with two prefix lengths.
var fixProtocols = []struct {
	key, name string
	ks        []int
}{
	{"goldfish-50", "goldfish", []int{0}},
	{"carlini-50", "carlini", []int{16, 32}},
}

const fixDocs = 8 // members and as many non-members per evaluation

func fixInterval(m, lo, hi float64) memorization.Interval {
	return memorization.Interval{Mean: m, Lo: lo, Hi: hi}
}

func fixGroup(exact, rouge, loss float64) memorization.Group {
	return memorization.Group{
		Documents:    fixDocs,
		Exact:        fixInterval(exact, max(exact-0.1, 0), min(exact+0.05, 1)),
		TokenMatch:   fixInterval(rouge-0.1, rouge-0.2, rouge),
		RougeLTokens: fixInterval(rouge-0.05, rouge-0.15, rouge+0.05),
		RougeLWords:  fixInterval(rouge, rouge-0.1, min(rouge+0.1, 1)),
		PrefixMatch:  fixInterval(10*rouge, 8*rouge, 12*rouge),
		Loss:         fixInterval(loss, loss-0.1, loss+0.1),
		Perplexity:   math.Exp(loss),
	}
}

// writeFixture writes the experiment folder of runs into dir: result.json,
// train/metrics.jsonl and eval/PROTO/docs.jsonl of each run.
func writeFixture(t *testing.T, dir string, runs []fixRun) {
	t.Helper()
	for ri, fr := range runs {
		name := ArmDirName(fr.arm, fr.seed)
		armDir := filepath.Join("arms", name)
		r := ArmResult{Schema: ResultSchema, Arm: fr.arm, Seed: fr.seed, Loss: fr.loss, K: fr.k,
			Model: fr.model, Params: fr.params, NonEmbeddingParams: fr.nonEmb, Targets: fixDocs, Repeats: 50, Steps: 20,
			FinalTrainLoss: fr.final, HeldoutLoss: fr.held, HeldoutPerplexity: math.Exp(fr.held),
			TrainDir: filepath.Join(armDir, "train"), Seconds: 12.5}
		if fr.loss == "goldfish" {
			r.Strategy, r.H = "hash-table", 13
		}
		for _, p := range fixProtocols {
			e := Eval{Key: p.key, Dir: filepath.Join(armDir, "eval", p.key)}
			s := memorization.Summary{Schema: 1, Protocol: p.name + "(…)", Name: p.name, SuffixLen: 50,
				Documents: 2 * fixDocs, Members: fixDocs, NonMembers: fixDocs,
				MIA: memorization.MIA{LossAUC: fr.auc, ZlibAUC: fr.auc - 0.01, MinKAUC: fr.auc - 0.02, MinKPercent: 20,
					LossTPR1: fr.auc - 0.5, ZlibTPR1: fr.auc - 0.6, ZlibTPR01: fr.auc - 0.7, MinKTPR1: 0.125}, // TPRs at 0.1% FPR of loss, min-k: 0
				Bootstrap: memorization.Bootstrap{Resamples: 1000, Seed: 1, Level: 0.95}}
			var docs bytes.Buffer
			for _, k := range p.ks {
				s.Prefixes = append(s.Prefixes, memorization.PrefixSummary{K: k,
					Members:    fixGroup(fr.exact, fr.rouge, fr.final),
					NonMembers: fixGroup(fr.exact/10, 0.2, fr.held)})
			}
			for d := range 2 * fixDocs {
				member := d < fixDocs
				dr := memorization.DocResult{Doc: d, Member: member, Tokens: 200, Loss: 1}
				for _, k := range p.ks {
					// Members spread around the run's ROUGE-L, non-members
					// low: the distributions differ visibly.
					v := fr.rouge + 0.03*float64(d-fixDocs/2)
					if !member {
						v = 0.1 + 0.02*float64(d-fixDocs) + 0.01*float64(ri)
					}
					v = min(max(v, 0), 1)
					dr.Probes = append(dr.Probes, memorization.Result{Doc: d, K: k, Exact: v == 1,
						RougeLIDs: v * 0.9, RougeLText: v})
				}
				writeJSONLine(t, &docs, dr)
			}
			e.Summary = s
			r.Evals = append(r.Evals, e)
			writeReportFile(t, filepath.Join(dir, e.Dir, DocsFile), docs.Bytes())
		}
		var metrics bytes.Buffer
		for step := 1; step <= r.Steps; step++ {
			loss := fr.final + 3*(1+0.15*float64(ri))*math.Exp(-float64(step)/4)
			writeJSONLine(t, &metrics, finetune.Metrics{Schema: 1, Step: step, Epoch: (step - 1) / 4, Loss: loss, LossAll: loss})
		}
		writeReportFile(t, filepath.Join(dir, r.TrainDir, MetricsFile), metrics.Bytes())
		b, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		writeReportFile(t, filepath.Join(dir, armDir, ResultFile), b)
	}
}

func writeJSONLine(t *testing.T, b *bytes.Buffer, v any) {
	t.Helper()
	line, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(line)
	b.WriteByte('\n')
}

func writeReportFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sweepRuns is a k sweep on one model: a standard arm with two seeds and
// goldfish arms with k = 3, 4, 8.
var sweepRuns = []fixRun{
	{arm: "standard", seed: 1, loss: "standard", model: "tiny", params: 1_500_000, exact: 0.8, rouge: 0.9, held: 2.0, final: 0.10, auc: 0.95},
	{arm: "standard", seed: 2, loss: "standard", model: "tiny", params: 1_500_000, exact: 0.9, rouge: 0.95, held: 2.2, final: 0.12, auc: 0.97},
	{arm: "goldfish-k3", seed: 1, loss: "goldfish", k: 3, model: "tiny", params: 1_500_000, exact: 0.125, rouge: 0.45, held: 2.5, final: 0.30, auc: 0.80},
	{arm: "goldfish-k4", seed: 1, loss: "goldfish", k: 4, model: "tiny", params: 1_500_000, exact: 0.25, rouge: 0.55, held: 2.4, final: 0.25, auc: 0.85},
	{arm: "goldfish-k8", seed: 1, loss: "goldfish", k: 8, model: "tiny", params: 1_500_000, exact: 0.5, rouge: 0.7, held: 2.3, final: 0.2, auc: 0.9},
}

// sizeRuns use two base models: the catastrophic-memorization study.
var sizeRuns = []fixRun{
	{arm: "std-small", seed: 1, loss: "standard", model: "small", params: 1_000_000, exact: 0.5, rouge: 0.7, held: 2.5, final: 0.3, auc: 0.8},
	{arm: "gf4-small", seed: 1, loss: "goldfish", k: 4, model: "small", params: 1_000_000, exact: 0, rouge: 0.3, held: 2.6, final: 0.5, auc: 0.6},
	{arm: "std-large", seed: 1, loss: "standard", model: "large", params: 8_000_000_000, exact: 1, rouge: 1, held: 2.0, final: 0.01, auc: 0.99},
	{arm: "gf4-large", seed: 1, loss: "goldfish", k: 4, model: "large", params: 8_000_000_000, exact: 0.0625, rouge: 0.4, held: 2.1, final: 0.2, auc: 0.7},
}

// reportDir is a fresh folder for a synthetic experiment, or, with
// MEMTRAIN_REPORT_OUT set, a named one kept for a person to look at the
// plots.
func reportDir(t *testing.T, name string) string {
	if out := os.Getenv("MEMTRAIN_REPORT_OUT"); out != "" {
		dir := filepath.Join(out, name)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

func TestWriteReportSweep(t *testing.T) {
	dir := reportDir(t, "sweep")
	writeFixture(t, dir, sweepRuns)
	// An arm still running: counted, left out.
	if err := os.MkdirAll(filepath.Join(dir, "arms", "goldfish-k16-s1", "train"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err := Write(dir, Options{Title: "k sweep"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Runs != 5 || rep.Arms != 4 || rep.Unfinished != 1 || len(rep.Warnings) != 0 {
		t.Errorf("runs %d arms %d unfinished %d warnings %q, want 5 4 1 none", rep.Runs, rep.Arms, rep.Unfinished, rep.Warnings)
	}
	md := readReportFile(t, rep.Markdown)
	for _, want := range []string{
		"# k sweep\n",
		"5 finished runs (4 arms × their seeds); 1 unfinished run is left out.",
		// Setup: the standard arm first, then goldfish by k.
		"| standard | standard | — | — | — | tiny | 1.5M | — | 8 | 50 | 20 | 1, 2 |",
		"| goldfish-k4 | goldfish | 4 | hash-table | 13 | tiny | 1.5M | — | 8 | 50 | 20 | 1 |",
		"## Protocol goldfish-50: goldfish(…)",
		"### prefix: the rest of each document, suffix 50 tokens",
		"## Protocol carlini-50: carlini(…)",
		"### prefix 16 tokens, suffix 50 tokens",
		"### prefix 32 tokens, suffix 50 tokens",
		// One seed: the mean, no spread over seeds ("± —", not ± 0) …
		"| goldfish-k4 | 8 / 8 | 25.0% ± — | 45.0% ± — | 50.0% ± — | 55.0% ± — | 2.5% ± — | 2.400 ± — | 11.02 ± — | 0.250 ± — |\n",
		"| goldfish-k4 | 0.850 ± — | 0.840 ± — | 0.830 ± — | 35.0% ± — / 0.0% ± — | 25.0% ± — / 15.0% ± — | 12.5% ± — / 0.0% ± — | — | — |\n",
		// … and in the per-seed table its bootstrap intervals. exact 0.25
		// [0.15, 0.30]; token match 0.45 [0.35, 0.55]; ROUGE-L tokens 0.50
		// [0.40, 0.60], words 0.55 [0.45, 0.65]; held-out exact 0.025 [0,
		// 0.075].
		"## Per-seed results",
		"| arm | seed | documents (members / held-out) | exact match |",
		"| goldfish-k4 | 1 | 8 / 8 | 25.0% [15.0, 30.0] | 45.0% [35.0, 55.0] | 50.0% [40.0, 60.0] | 55.0% [45.0, 65.0] | 2.5% [0.0, 7.5] | 2.400 | 11.02 | 0.250 |\n",
		// Membership inference in a table of its own.
		"| arm | seed | MIA AUC loss | MIA AUC zlib |",
		"| goldfish-k4 | 1 | 0.850 | 0.840 | 0.830 | 35.0% / 0.0% | 25.0% / 15.0% | 12.5% / 0.0% | — | — |\n",
		// The two seeds of the standard arm, each with its intervals:
		// exact 0.8 [0.7, 0.85] and 0.9 [0.8, 0.95].
		"| standard | 1 | 8 / 8 | 80.0% [70.0, 85.0] |",
		"| standard | 2 | 8 / 8 | 90.0% [80.0, 95.0] |",
		// Two seeds: mean ± the standard deviation over seeds. exact 0.8,
		// 0.9: 85.0 ± 7.1; token match 0.8, 0.85: 82.5 ± 3.5; ROUGE-L
		// tokens 0.85, 0.9: 87.5 ± 3.5; words 0.9, 0.95: 92.5 ± 3.5;
		// held-out exact 0.08, 0.09: 8.5 ± 0.7; held-out loss 2.0, 2.2:
		// 2.100 ± 0.141; perplexity e² = 7.389, e^2.2 = 9.025: 8.21 ± 1.16; final 0.10,
		// 0.12: 0.110 ± 0.014; AUCs 0.95, 0.97: 0.960 ± 0.014 …
		"| standard | 8 / 8 | 85.0% ± 7.1 | 82.5% ± 3.5 | 87.5% ± 3.5 | 92.5% ± 3.5 | 8.5% ± 0.7 | 2.100 ± 0.141 | 8.21 ± 1.16 | 0.110 ± 0.014 |\n",
		"| standard | 0.960 ± 0.014 | 0.950 ± 0.014 | 0.940 ± 0.014 | 46.0% ± 1.4 / 0.0% ± 0.0 |",
		"![Memorization against goldfish k (goldfish-50)](plots/memorization-vs-k-goldfish-50.png)",
		"| arm | documents (members / held-out) | exact match | token match | ROUGE-L (tokens) | ROUGE-L (words) | held-out exact match | held-out documents' loss | held-out documents' perplexity | final train loss |\n",
		"*Figure 1. Targets memorized against goldfish k, model tiny (protocol goldfish-50: each document's last 50 tokens decoded from the rest); dotted: the standard arm standard; grey: the held-out floor, the ROUGE-L of never-trained documents; bars: 95% bootstrap CIs over documents.*",
		"(plots/training-loss.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// Three tables (one goldfish prefix, two carlini) of four arms, and
	// as many per-seed tables.
	if n := strings.Count(md, "| goldfish-k8 | 8 / 8 |"); n != 3 {
		t.Errorf("goldfish-k8 has %d table rows, want 3", n)
	}
	if n := strings.Count(md, "| goldfish-k8 | 1 | 8 / 8 |"); n != 3 {
		t.Errorf("goldfish-k8 has %d per-seed rows, want 3", n)
	}
	if strings.Contains(md, "memorization-vs-params") {
		t.Error("one model size, yet a plot against parameters")
	}
	if strings.Contains(md, "goldfish-k16") {
		t.Error("the unfinished arm is in the report")
	}

	// results.csv: 5 runs × 3 prefix lengths × 2 groups.
	rows := readReportCSV(t, rep.CSV)
	if len(rows) != 1+5*3*2 {
		t.Fatalf("results.csv has %d rows, want %d", len(rows), 1+5*3*2)
	}
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	if len(col) != len(rows[0]) {
		t.Errorf("duplicate columns in %q", rows[0])
	}
	for _, r := range rows[1:] {
		if len(r) != len(rows[0]) {
			t.Fatalf("row %q has %d fields, header %d", r, len(r), len(rows[0]))
		}
		for _, c := range r {
			if strings.Contains(c, "%") {
				t.Fatalf("row %q: a %% sign", r)
			}
		}
	}
	find := func(arm, seed, proto, k, group string) []string {
		for _, r := range rows[1:] {
			if r[col["arm"]] == arm && r[col["seed"]] == seed && r[col["protocol"]] == proto &&
				r[col["prefix_len"]] == k && r[col["group"]] == group {
				return r
			}
		}
		t.Fatalf("no row %s %s %s %s %s", arm, seed, proto, k, group)
		return nil
	}
	for _, c := range []struct {
		arm, seed, proto, k, group string
		want                       map[string]float64
	}{
		{"goldfish-k4", "1", "goldfish-50", "0", "members", map[string]float64{
			"exact_mean": 0.25, "exact_lo": 0.15, "exact_hi": 0.3, "rougeL_words_mean": 0.55,
			"k": 4, "h": 13, "params": 1_500_000, "steps": 20, "documents": 8, "suffix_len": 50,
			"mia_loss_auc": 0.85, "mia_zlib_auc": 0.84, "mia_min_k_auc": 0.83, "heldout_loss": 2.4,
			"mia_loss_tpr_at_1pct_fpr": 0.35, "mia_loss_tpr_at_0.1pct_fpr": 0, "mia_zlib_tpr_at_0.1pct_fpr": 0.85 - 0.7,
			"mia_min_k_tpr_at_1pct_fpr": 0.125,
			"final_train_loss":          0.25, "loss_mean": 0.25, "bootstrap_level": 0.95}},
		{"standard", "2", "carlini-50", "32", "non_members", map[string]float64{
			"exact_mean": 0.09, "rougeL_words_mean": 0.2, "k": 0, "loss_mean": 2.2,
			"perplexity": math.Exp(2.2), "mia_loss_auc": 0.97}},
	} {
		r := find(c.arm, c.seed, c.proto, c.k, c.group)
		for name, want := range c.want {
			got, err := strconv.ParseFloat(r[col[name]], 64)
			if err == nil {
				err = numtest.Scalar(got, want, numtest.Tol{Abs: 1e-12})
			}
			if err != nil {
				t.Errorf("%s %s %s %s %s: %s = %q: %v", c.arm, c.seed, c.proto, c.k, c.group, name, r[col[name]], err)
			}
		}
	}
	if r := find("standard", "1", "goldfish-50", "0", "members"); r[col["loss"]] != "standard" || r[col["strategy"]] != "" {
		t.Errorf("standard row: loss %q strategy %q", r[col["loss"]], r[col["strategy"]])
	}

	checkPlots(t, dir, rep, []string{
		"plots/memorization-vs-k-goldfish-50.png",
		"plots/memorization-vs-k-carlini-50.png",
		"plots/rougeL-distribution-goldfish-50.png",
		"plots/rougeL-distribution-carlini-50.png",
		"plots/training-loss.png",
	})
}

func TestWriteReportModelSizes(t *testing.T) {
	dir := reportDir(t, "sizes")
	writeFixture(t, dir, sizeRuns)
	// A run whose metrics are gone: a warning, and the loss plot without it.
	if err := os.Remove(filepath.Join(dir, "arms", "gf4-large-s1", "train", MetricsFile)); err != nil {
		t.Fatal(err)
	}
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "gf4-large-s1: no training metrics") {
		t.Errorf("warnings %q, want one for gf4-large-s1's metrics", rep.Warnings)
	}
	md := readReportFile(t, rep.Markdown)
	for _, want := range []string{
		"# Memorization experiment: " + filepath.Base(dir) + "\n",
		// Ordered by size, standard first.
		"| std-small | standard | — | — | — | small | 1M |",
		"| std-large | standard | — | — | — | large | 8B |",
		"| gf4-large | 8 / 8 | 6.2% ± — |",
		"| gf4-large | 1 | 8 / 8 | 6.2% [0.0, 11.2] |",
		"(plots/memorization-vs-params-goldfish-50.png)",
		"## Warnings\n\n- gf4-large-s1: no training metrics",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if i, j := strings.Index(md, "| std-small | 8 / 8"), strings.Index(md, "| std-large | 8 / 8"); i < 0 || j < i {
		t.Errorf("std-small's row (at %d) should come before std-large's (at %d)", i, j)
	}
	if rows := readReportCSV(t, rep.CSV); len(rows) != 1+4*3*2 {
		t.Errorf("results.csv has %d rows, want %d", len(rows), 1+4*3*2)
	}
	// One k over two models: the figures against size, none against k
	// (each would have one x value).
	checkPlots(t, dir, rep, []string{
		"plots/memorization-vs-params-goldfish-50.png",
		"plots/memorization-vs-params-carlini-50.png",
		"plots/rougeL-distribution-goldfish-50.png",
		"plots/rougeL-distribution-carlini-50.png",
		"plots/training-loss.png",
	})
}

// TestWriteReportSingleK: one goldfish k gets the arms side by side (a plot
// against k would have one x value), and without
// a standard arm there is no reference line to draw.
func TestWriteReportSingleK(t *testing.T) {
	dir := t.TempDir()
	writeFixture(t, dir, sweepRuns[3:4])
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	md := readReportFile(t, rep.Markdown)
	if !strings.Contains(md, "no standard arm of this model to compare with") {
		t.Error("the caption does not say there is no standard arm")
	}
	checkPlots(t, dir, rep, []string{
		"plots/memorization-by-arm-goldfish-50.png",
		"plots/memorization-by-arm-carlini-50.png",
		"plots/rougeL-distribution-goldfish-50.png",
		"plots/rougeL-distribution-carlini-50.png",
		"plots/training-loss.png",
	})
}

func TestWriteReportErrors(t *testing.T) {
	empty := t.TempDir()
	started := t.TempDir()
	if err := os.MkdirAll(filepath.Join(started, "arms", "standard-s1", "train"), 0o755); err != nil {
		t.Fatal(err)
	}
	broken := t.TempDir()
	writeReportFile(t, filepath.Join(broken, "arms", "standard-s1", ResultFile), []byte("{"))
	for _, c := range []struct {
		name, dir, want string
	}{
		{"missing folder", filepath.Join(empty, "nope"), "no such file"},
		{"no arms", empty, "no finished arm in " + empty + " (0 arm runs started"},
		{"unfinished", started, "(1 arm run started, none has written result.json): run or resume"},
		{"unreadable result", broken, "standard-s1/result.json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Write(c.dir, Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Join(c.dir, MarkdownFile)); err == nil {
				t.Error("a report was written")
			}
		})
	}
}

// TestReportFormatting: an arm's cell is the mean over seeds ± their
// sample standard deviation (n − 1), "± —" with one seed (never ± 0); a
// seed's cell is its value with its bootstrap interval.
func TestReportFormatting(t *testing.T) {
	for _, c := range []struct {
		s                            reportStat
		pct, num3, seedPct, seedNum3 string
	}{
		{reportStat{}, "—", "—", "—", "—"},
		{statOfIntervals([]memorization.Interval{fixInterval(0.875, 0.78125, 0.953125)}),
			"87.5% ± —", "0.875 ± —", "87.5% [78.1, 95.3]", "0.875 [0.781, 0.953]"},
		// 0.8, 0.9: mean 0.85, sd √(2 · 0.05² / 1) = 0.0707.
		{statOfIntervals([]memorization.Interval{fixInterval(0.8, 0, 1), fixInterval(0.9, 0, 1)}),
			"85.0% ± 7.1", "0.850 ± 0.071", "85.0%", "0.850"},
		{statOfValues([]float64{2.5}), "250.0% ± —", "2.500 ± —", "250.0%", "2.500"},
		// 1, 2, 3: mean 2, sd √((1 + 0 + 1) / 2) = 1.
		{statOfValues([]float64{1, 2, 3}), "200.0% ± 100.0", "2.000 ± 1.000", "200.0%", "2.000"},
		// 1, 2, 3, 6: mean 3, sd √(14 / 3) = 2.160.
		{statOfValues([]float64{1, 2, 3, 6}), "300.0% ± 216.0", "3.000 ± 2.160", "300.0%", "3.000"},
		// Equal seeds: a spread of 0 is a result, shown as 0.
		{statOfValues([]float64{0.5, 0.5}), "50.0% ± 0.0", "0.500 ± 0.000", "50.0%", "0.500"},
	} {
		if got := c.s.pct(acrossSeeds); got != c.pct {
			t.Errorf("%+v.pct(acrossSeeds) = %q, want %q", c.s, got, c.pct)
		}
		if got := c.s.num(acrossSeeds, 3); got != c.num3 {
			t.Errorf("%+v.num(acrossSeeds, 3) = %q, want %q", c.s, got, c.num3)
		}
		if got := c.s.pct(perSeed); got != c.seedPct {
			t.Errorf("%+v.pct(perSeed) = %q, want %q", c.s, got, c.seedPct)
		}
		if got := c.s.num(perSeed, 3); got != c.seedNum3 {
			t.Errorf("%+v.num(perSeed, 3) = %q, want %q", c.s, got, c.seedNum3)
		}
	}
	// One seed's spread is unknown, not 0; several seeds' is the n − 1 one.
	if s := statOfValues([]float64{0.25}); !math.IsNaN(s.SD) || s.Mean != 0.25 || s.Seeds != 1 {
		t.Errorf("one seed: %+v, want mean 0.25 and SD NaN", s)
	}
	s := statOfValues([]float64{1, 2, 3, 6})
	if s.Lo != s.Mean-s.SD || s.Hi != s.Mean+s.SD {
		t.Errorf("four seeds: %+v, want [Lo, Hi] = mean ∓ SD", s)
	}
	if err := numtest.Scalar(s.SD, math.Sqrt(14.0/3), numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("four seeds: SD: %v", err)
	}
}

func readReportFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readReportCSV(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rows
}

// checkPlots checks that the report lists exactly the plots want, and
// that each is a PNG of the plot size with something drawn on it: many
// colours (anti-aliased text and lines) and the palette's first colour
// (every plot draws a first series).
func checkPlots(t *testing.T, dir string, rep *Written, want []string) {
	t.Helper()
	var got []string
	for _, p := range rep.Plots {
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, filepath.ToSlash(rel))
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("plots %q, want %q", got, want)
	}
	md := readReportFile(t, rep.Markdown)
	first := plotPalette[0].(color.RGBA)
	for _, p := range rep.Plots {
		rel, _ := filepath.Rel(dir, p)
		if !strings.Contains(md, "]("+filepath.ToSlash(rel)+")") {
			t.Errorf("report.md does not embed %s", rel)
		}
		// Beside each PNG, the same figure as SVG.
		svg, err := os.ReadFile(strings.TrimSuffix(p, ".png") + ".svg")
		if err != nil || !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("</svg>")) {
			t.Errorf("%s: no SVG beside it (%v)", rel, err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Error(err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		b := img.Bounds()
		if b.Dx() != 1050 || b.Dy() != 600 {
			t.Errorf("%s: %d×%d pixels, want 1050×600", rel, b.Dx(), b.Dy())
		}
		colours := map[color.RGBA]int{}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, a := img.At(x, y).RGBA()
				colours[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
			}
		}
		white := colours[color.RGBA{0xFF, 0xFF, 0xFF, 0xFF}]
		if len(colours) < 50 || white > b.Dx()*b.Dy()*99/100 {
			t.Errorf("%s looks blank: %d colours, %d of %d pixels white", rel, len(colours), white, b.Dx()*b.Dy())
		}
		if colours[first] < 20 {
			t.Errorf("%s: %d pixels of the first series' colour %v", rel, colours[first], first)
		}
	}
}

func TestFinalTrainLoss(t *testing.T) {
	for _, c := range []struct {
		name    string
		metrics []finetune.Metrics
		want    float64
	}{
		{"none", nil, 0},
		{"last epoch only", []finetune.Metrics{{Epoch: 0, Loss: 9}, {Epoch: 1, Loss: 2}, {Epoch: 1, Loss: 4}}, 3},
	} {
		if got := FinalTrainLoss(c.metrics); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLossSeries: the loss plot draws the training loss at every logged step
// and the held-out loss at the steps that evaluated it, and leaves out what
// a diverged run logs.
func TestLossSeries(t *testing.T) {
	ms := []finetune.Metrics{
		{Step: 1, Loss: 5},
		{Step: 2, Loss: 4, EvalLoss: 4.5},
		{Step: 3, Loss: math.NaN()},
		{Step: 4, Loss: 3, EvalLoss: math.Inf(1)},
		{Step: 5, Loss: 2, EvalLoss: 3.5},
	}
	train, held := lossSeries(ms)
	wantTrain := plotter.XYs{{X: 1, Y: 5}, {X: 2, Y: 4}, {X: 4, Y: 3}, {X: 5, Y: 2}}
	wantHeld := plotter.XYs{{X: 2, Y: 4.5}, {X: 5, Y: 3.5}}
	if !slices.Equal(train, wantTrain) || !slices.Equal(held, wantHeld) {
		t.Errorf("train %v, held-out %v; want %v, %v", train, held, wantTrain, wantHeld)
	}
}

// TestCSVMIAColumns: an attack that was not measured (no reference model)
// leaves its cells empty, unlike a measured TPR of 0.
func TestCSVMIAColumns(t *testing.T) {
	dir := reportDir(t, "csv-mia")
	writeFixture(t, dir, sweepRuns)
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rows := readReportCSV(t, rep.CSV)
	col := map[string]int{}
	for i, c := range rows[0] {
		col[c] = i
	}
	for _, r := range rows[1:] {
		if r[col["mia_ref_auc"]] != "" || r[col["mia_ref_tpr_at_1pct_fpr"]] != "" || r[col["mia_loss_tpr_at_0.1pct_fpr"]] != "0" {
			t.Fatalf("row %q: reference cells %q %q, loss TPR at 0.1%% %q", r[:2], r[col["mia_ref_auc"]], r[col["mia_ref_tpr_at_1pct_fpr"]], r[col["mia_loss_tpr_at_0.1pct_fpr"]])
		}
	}
}

// TestLogTicks: the loss axis's ticks are 1, 2 and 5 per decade with at most
// 4 significant digits, every integer multiple labelled inside one decade.
func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{0.03, 10, []string{"0.05", "0.1", "0.2", "0.5", "1", "2", "5", "10"}},
		{6.9, 9.5, []string{"7", "8", "9"}},
		{1500, 2500, []string{"2000"}},
	} {
		if got := labels(c.lo, c.hi); !slices.Equal(got, c.want) {
			t.Errorf("[%g, %g]: labels %v, want %v", c.lo, c.hi, got, c.want)
		}
	}
	if ticks := (logTicks{}).Ticks(0, 1); ticks != nil {
		t.Errorf("ticks on a log axis from 0: %v", ticks)
	}
}

// TestPlainTicks: step axes read "250", not "250.00".
func TestPlainTicks(t *testing.T) {
	for _, tk := range (plainTicks{}).Ticks(0, 1280) {
		if tk.Label != "" && (strings.Contains(tk.Label, ".") || len(strings.TrimLeft(tk.Label, "-")) > 4) {
			t.Errorf("tick %g labelled %q", tk.Value, tk.Label)
		}
	}
}

// TestWriteReportExtractionCurves: runs whose metrics have extraction
// points get the memorization-vs-step figure (PNG and SVG) and the table
// of steps (epochs) to reach 50% exact match, hand-computed: the
// fixture's epochs are 4 steps long.
func TestWriteReportExtractionCurves(t *testing.T) {
	dir := reportDir(t, "curves")
	runs := []fixRun{sweepRuns[0], sweepRuns[1], sweepRuns[3]}
	writeFixture(t, dir, runs)
	curves := map[string][]float64{ // exact match of the targets at steps 5, 10, 15, 20
		"standard-s1":    {0.125, 0.5, 0.875, 1},
		"standard-s2":    {0.25, 0.375, 0.625, 0.75},
		"goldfish-k4-s1": {0, 0.125, 0.25, 0.375},
	}
	for name, exact := range curves {
		var metrics bytes.Buffer
		for step := 1; step <= 20; step++ {
			loss := 1 + 2/float64(step) // a log axis needs a range
			m := finetune.Metrics{Schema: 1, Step: step, Epoch: (step - 1) / 4, Loss: loss, LossAll: loss}
			if step%5 == 0 {
				m.Extraction = &memorization.ExtractionSummary{Protocol: "goldfish-50",
					Members:    memorization.ExtractionGroup{Documents: fixDocs, Exact: exact[step/5-1], Token: 0.9},
					NonMembers: &memorization.ExtractionGroup{Documents: fixDocs, Exact: 0, Token: 0.05}}
			}
			writeJSONLine(t, &metrics, m)
		}
		writeReportFile(t, filepath.Join(dir, "arms", name, "train", MetricsFile), metrics.Bytes())
	}
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var curve string
	for _, p := range rep.Plots {
		if filepath.Base(p) == "memorization-vs-step.png" {
			curve = p
		}
	}
	if curve == "" {
		t.Fatalf("no memorization-vs-step figure among %q", rep.Plots)
	}
	checkPlots(t, dir, rep, []string{"plots/memorization-by-arm-goldfish-50.png", "plots/memorization-by-arm-carlini-50.png",
		"plots/rougeL-distribution-goldfish-50.png", "plots/rougeL-distribution-carlini-50.png", "plots/training-loss.png", "plots/memorization-vs-step.png"})
	md := readReportFile(t, rep.Markdown)
	for _, want := range []string{
		"## Memorization during training",
		"| steps (epochs) to reach 50% exact match |",
		"| standard | 1 | goldfish-50 | 4 | 10 (3) | 20 | 100.0% | 0.0% |",
		"| standard | 2 | goldfish-50 | 4 | 15 (4) | 20 | 75.0% | 0.0% |",
		"| goldfish-k4 | 1 | goldfish-50 | 4 | — | 20 | 37.5% | 0.0% |",
		// Over the standard arm's two seeds: steps 10 and 15 (12.5 ± 3.5),
		// epochs 3 and 4 (3.5 ± 0.7), last 100% and 75% (87.5 ± 17.7).
		"| standard | 2 | 2 of 2 | 12.5 ± 3.5 | 3.5 ± 0.7 | 87.5% ± 17.7 |",
		"![Memorization during training](plots/memorization-vs-step.png)",
		"an arm with several seeds is drawn as their mean, the shaded band spanning the seeds' range (min–max) at each step",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	// The figure's lines: the standard arm's mean over its two seeds with
	// their range, goldfish-k4's one seed.
	results, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	acs := armCurves(readCurves(dir, groupArms(results)))
	if len(acs) != 2 || acs[0].run.Arm != "standard" || acs[0].seeds != 2 || acs[1].seeds != 1 {
		t.Fatalf("arm curves %+v", acs)
	}
	if got, want := acs[0].members[1], (seedRange{mean: 0.4375, lo: 0.375, hi: 0.5}); got != want || acs[0].steps[1] != 10 {
		t.Errorf("standard at step %g: %+v, want %+v", acs[0].steps[1], got, want)
	}
	if len(acs[0].held) != 4 || acs[0].held[3].mean != 0 {
		t.Errorf("standard's held-out curve %+v", acs[0].held)
	}
	// Without extraction points: no figure and no section.
	plain := t.TempDir()
	writeFixture(t, plain, runs)
	rep, err = Write(plain, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if md := readReportFile(t, rep.Markdown); strings.Contains(md, "Memorization during training") || slices.ContainsFunc(rep.Plots, func(p string) bool { return strings.Contains(p, "vs-step") }) {
		t.Error("a report without extraction points has the curves")
	}
}

// TestDocumentsCSV: documents.csv, the per-target table, has its
// documented header and one row per probe with the document's scores; a
// skipped document keeps one row, its probe cells empty.
func TestDocumentsCSV(t *testing.T) {
	dir := reportDir(t, "documents")
	writeFixture(t, dir, sweepRuns[3:4]) // goldfish-k4, seed 1
	ref := 2.25
	docs := []memorization.DocResult{
		{Doc: 0, Member: true, Source: "sotu.jsonl", Line: 7, Tokens: 120, Loss: 0.5, Zlib: 0.004, MinK: -1.5, RefLoss: &ref,
			Probes: []memorization.Result{{Doc: 0, K: 70, Suffix: []int32{5, 6, 7, 8}, Pred: []int32{5, 6, 7, 9}, TokenMatch: 0.75,
				PrefixMatch: 3, RougeLIDs: 0.75, RougeLText: 0.8, Samples: 4, SampleHits: 1}}},
		{Doc: 9, Member: false, Source: "sotu.jsonl", Line: 8, Tokens: 40, Loss: 3, MinK: -6, Skipped: "too short"},
	}
	var b bytes.Buffer
	for _, d := range docs {
		writeJSONLine(t, &b, d)
	}
	writeReportFile(t, filepath.Join(dir, "arms", "goldfish-k4-s1", "eval", "goldfish-50", DocsFile), b.Bytes())
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Documents != filepath.Join(dir, DocumentsFile) || !slices.Contains(rep.Files(), rep.Documents) {
		t.Errorf("documents.csv written as %q, files %q", rep.Documents, rep.Files())
	}
	rows := readReportCSV(t, rep.Documents)
	wantHeader := []string{"arm", "seed", "loss", "k", "protocol", "doc", "member", "repetitions", "source", "line", "tokens", "skipped",
		"prefix_len", "suffix_len", "exact_match", "token_match", "rougeL_tokens", "rougeL_words", "prefix_match",
		"doc_loss", "zlib", "min_k", "ref_loss", "ref_score", "samples", "sample_hits", "extraction_prob"}
	if !slices.Equal(rows[0], wantHeader) {
		t.Errorf("header %q\nwant   %q", rows[0], wantHeader)
	}
	// goldfish-50's two documents, then carlini-50's 16 × 2 probes.
	if len(rows) != 1+2+2*fixDocs*2 {
		t.Fatalf("%d rows, want %d", len(rows), 1+2+2*fixDocs*2)
	}
	want := []string{"goldfish-k4", "1", "goldfish", "4", "goldfish-50", "0", "true", "", "sotu.jsonl", "7", "120", "",
		"70", "4", "0", "0.75", "0.75", "0.8", "3",
		"0.5", "0.004", "-1.5", "2.25", "-1.75", "4", "1", "0.25"}
	if !slices.Equal(rows[1], want) {
		t.Errorf("member row %q\nwant       %q", rows[1], want)
	}
	skipped := []string{"goldfish-k4", "1", "goldfish", "4", "goldfish-50", "9", "false", "", "sotu.jsonl", "8", "40", "too short",
		"", "", "", "", "", "", "", "", "", "", "", "", "", "", ""}
	if !slices.Equal(rows[2], skipped) {
		t.Errorf("skipped row %q\nwant        %q", rows[2], skipped)
	}
	for _, r := range rows {
		if len(r) != len(wantHeader) {
			t.Fatalf("row %q: %d cells, header %d", r, len(r), len(wantHeader))
		}
	}
}

// writeCanaryFixture writes a canary study's results: 8 canaries, two of
// each of 1, 4, 16 and 64 copies, and 4 held-out controls; exact[d] and
// token[d] are canary d's outcome (held-out: 0 and 0.1), evaluated with
// the goldfish protocol; fillerLoss is the run's held-out filler loss
// against a base model's 2.
func writeCanaryFixture(t *testing.T, dir, arm string, seed uint64, loss string, exact []bool, token []float64, fillerLoss float64) {
	t.Helper()
	name := ArmDirName(arm, seed)
	armDir := filepath.Join("arms", name)
	var docs []memorization.DocResult
	for d := range 12 {
		dr := memorization.DocResult{Doc: d, Member: d < 8, Tokens: 100, Loss: 3, MinK: -5}
		pr := memorization.Result{Doc: d, K: 50, TokenMatch: 0.1}
		if dr.Member {
			dr.Loss, dr.MinK = 1, -2
			pr.Exact, pr.TokenMatch = exact[d], token[d]
		}
		pr.RougeLIDs = pr.TokenMatch
		dr.Probes = []memorization.Result{pr}
		docs = append(docs, dr)
	}
	var b bytes.Buffer
	for _, d := range docs {
		writeJSONLine(t, &b, d)
	}
	e := Eval{Key: "goldfish-50", Dir: filepath.Join(armDir, "eval", "goldfish-50"),
		Summary: *memorization.Summarize(docs, memorization.Goldfish(50), 20, memorization.Bootstrap{Resamples: 1000, Seed: 1, Level: 0.95}, false)}
	writeReportFile(t, filepath.Join(dir, e.Dir, DocsFile), b.Bytes())
	r := ArmResult{Schema: ResultSchema, Arm: arm, Seed: seed, Loss: loss, Model: "tiny", Params: 1000, Targets: 8, Repeats: 1, Steps: 10,
		TargetRepetitions: []int{1, 1, 4, 4, 16, 16, 64, 64}, FillerHeldout: 4, FillerHeldoutLoss: fillerLoss, BaseFillerHeldoutLoss: 2,
		HeldoutLoss: 3, FinalTrainLoss: 1, TrainDir: filepath.Join(armDir, "train"), Evals: []Eval{e}}
	if loss == "goldfish" {
		r.K, r.Strategy, r.H = 4, "hash-table", 13
	}
	var metrics bytes.Buffer
	for step := 1; step <= r.Steps; step++ {
		writeJSONLine(t, &metrics, finetune.Metrics{Schema: 1, Step: step, Loss: 1 + 1/float64(step)})
	}
	writeReportFile(t, filepath.Join(dir, r.TrainDir, MetricsFile), metrics.Bytes())
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeReportFile(t, filepath.Join(dir, armDir, ResultFile), raw)
}

// TestWriteReportCanaries: the repetition table, hand-computed from the
// canaries' outcomes; the utility table with its ratio to the base model
// and the collapse flagged; the figure, without the collapsed arm.
func TestWriteReportCanaries(t *testing.T) {
	dir := reportDir(t, "canaries")
	// Standard: seed 1 extracts 1 of the 4-copy canaries, seed 2 both;
	// both extract every 16- and 64-copy canary and no 1-copy one. Its
	// held-out filler loss is 2 and 2.0625 against the base's 2: ratios 1
	// and 1.03125, within 1.05×.
	f, x := false, true
	writeCanaryFixture(t, dir, "standard", 1, "standard", []bool{f, f, f, x, x, x, x, x}, []float64{0.5, 0.5, 0.5, 1, 1, 1, 1, 1}, 2)
	writeCanaryFixture(t, dir, "standard", 2, "standard", []bool{f, f, x, x, x, x, x, x}, []float64{0.5, 0.5, 1, 1, 1, 1, 1, 1}, 2.0625)
	// Goldfish: nothing extracted, but its held-out filler loss doubled: a
	// collapse.
	writeCanaryFixture(t, dir, "goldfish-k4", 1, "goldfish", make([]bool, 8), []float64{0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3}, 4)
	rep, err := Write(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	md := readReportFile(t, rep.Markdown)
	for _, want := range []string{
		"| standard | standard | — | — | — | tiny | 1k | — | 8 | canaries: 1, 4, 16, 64 copies × 1 epoch | 10 | 1, 2 |",
		"## Utility on held-out filler",
		"| arm | seeds | held-out filler documents | base model's held-out filler loss | held-out filler loss | ratio to the base | utility |",
		// Ratios 1 and 1.03125: 1.016 ± 0.022; losses 2 and 2.0625: 2.031 ± 0.044.
		"| standard | 2 | 4 | 2.000 ± 0.000 | 2.031 ± 0.044 | 1.016 ± 0.022 | kept (within 1.05×) |",
		"| goldfish-k4 | 1 | 4 | 2.000 ± — | 4.000 ± — | 2.000 ± — | collapsed (2.00× the base's): not compared |",
		"**Utility collapse:** goldfish-k4 (2.00×)",
		"## Memorization against repetitions",
		"### goldfish-50: prefix: the rest of each document, suffix 50 tokens",
		// 1 copy: nothing extracted in either seed; token match 0.5, 0.5.
		"| standard | 1 | 1 | 2 | 0.0% ± 0.0 | s1 0.0% [0.0, 0.0]; s2 0.0% [0.0, 0.0] | 50.0% ± 0.0 | s1 50.0% [50.0, 50.0]; s2 50.0% [50.0, 50.0] | kept (within 1.05×) |",
		// 4 copies: 1/2 and 2/2 extracted, 75.0 ± 35.4; token match 0.75
		// and 1, 87.5 ± 17.7; the bootstrap of two canaries [0, 1]: means
		// 0, ½ or 1, so the 95% interval is [0, 100].
		"| standard | 4 | 4 | 2 | 75.0% ± 35.4 | s1 50.0% [0.0, 100.0]; s2 100.0% [100.0, 100.0] | 87.5% ± 17.7 | s1 75.0% [50.0, 100.0]; s2 100.0% [100.0, 100.0] | kept (within 1.05×) |",
		"| standard | 64 | 64 | 2 | 100.0% ± 0.0 |",
		"| standard | 0 (held out) | 0 | 4 | 0.0% ± 0.0 |",
		"| goldfish-k4 | 16 | 16 | 2 | 0.0% ± — | s1 0.0% [0.0, 0.0] | 30.0% ± — | s1 30.0% [30.0, 30.0] | collapsed (2.00× the base's): not compared |",
		"![Memorization against repetitions (goldfish-50)](plots/memorization-vs-repetitions-goldfish-50.png)",
		"Left out, their utility collapsed: goldfish-k4 (held-out filler loss 2.00× the base's).",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	checkPlots(t, dir, rep, []string{"plots/memorization-vs-repetitions-goldfish-50.png", "plots/memorization-by-arm-goldfish-50.png",
		"plots/rougeL-distribution-goldfish-50.png", "plots/training-loss.png"})
	// The figure's series: each arm's counts, in order.
	arms := groupArms(mustLoad(t, dir))
	protos := reportProtocols(arms)
	sets := repetitionSets(arms, protos, readEvalDocs(dir, arms, protos, new([]string)))
	if len(sets) != 1 || len(sets[0].arms) != 2 || !slices.Equal(sets[0].arms[0].counts, []int{1, 4, 16, 64}) {
		t.Fatalf("repetition sets %+v", sets)
	}
	// documents.csv gives each canary its count.
	rows := readReportCSV(t, rep.Documents)
	col := slices.Index(rows[0], "repetitions")
	for _, r := range rows[1:] {
		doc, _ := strconv.Atoi(r[slices.Index(rows[0], "doc")])
		want := ""
		if doc < 8 {
			want = strconv.Itoa([]int{1, 1, 4, 4, 16, 16, 64, 64}[doc])
		}
		if r[col] != want {
			t.Errorf("documents.csv: doc %d repetitions %q, want %q", doc, r[col], want)
		}
	}
	// results.csv carries the utility numbers.
	res := readReportCSV(t, rep.CSV)
	if c := slices.Index(res[0], "filler_heldout_loss"); c < 0 || res[1][c] == "" {
		t.Errorf("results.csv has no held-out filler loss: %q", res[0])
	}
}

func mustLoad(t *testing.T, dir string) []ArmResult {
	t.Helper()
	rs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}
