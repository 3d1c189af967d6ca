package report

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// The report's files, in the experiment's folder.
const (
	MarkdownFile = "report.md"
	CSVFile      = "results.csv"
	PlotsDir     = "plots"
)

// Options control Write.
type Options struct {
	// Title heads report.md; the default names the experiment's folder.
	Title string
}

// Written lists what Write wrote.
type Written struct {
	Markdown string // dir/report.md
	CSV      string // dir/results.csv
	// Documents is dir/documents.csv, the per-target table: every
	// document's outcome in every evaluation.
	Documents string
	Plots     []string // dir/plots/*.png, in the order report.md shows them
	// Runs is the number of finished arm × seed results reported, Arms the
	// number of arms they make, Unfinished the arm folders left out because
	// they have no result yet.
	Runs, Arms, Unfinished int
	// Warnings name inputs that were missing or unreadable: the report is
	// written without what they would have given (a curve, a distribution).
	Warnings []string
}

// Files returns every file written: report.md, results.csv, documents.csv,
// then the plots.
func (r *Written) Files() []string {
	return append([]string{r.Markdown, r.CSV, r.Documents}, r.Plots...)
}

// Write loads every finished arm of the experiment in dir and writes
// dir/report.md (setup, one table per protocol and prefix length, the
// plots), dir/results.csv (every number, one row per arm × seed ×
// protocol × prefix length × group), dir/documents.csv (every document's
// outcome: the per-target table) and dir/plots/*.png and *.svg. Unfinished arms
// are left out and counted; an experiment with no finished arm is an
// error. Every file is replaced atomically, so a report is never half
// written.
func Write(dir string, opt Options) (*Written, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	results, err := Load(dir)
	if err != nil {
		return nil, err
	}
	started, err := filepath.Glob(filepath.Join(dir, "arms", "*"))
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	unfinished := 0
	for _, p := range started {
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			if _, err := os.Stat(filepath.Join(p, ResultFile)); errors.Is(err, fs.ErrNotExist) {
				unfinished++
			}
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("report: no finished arm in %s (%s started, none has written %s): run or resume the experiment first",
			dir, reportPlural(unfinished, "arm run"), ResultFile)
	}
	if opt.Title == "" {
		name := dir
		if abs, err := filepath.Abs(dir); err == nil {
			name = abs
		}
		opt.Title = "Memorization experiment: " + filepath.Base(name)
	}

	arms := groupArms(results)
	protos := reportProtocols(arms)
	rep := &Written{
		Markdown:   filepath.Join(dir, MarkdownFile),
		CSV:        filepath.Join(dir, CSVFile),
		Documents:  filepath.Join(dir, DocumentsFile),
		Runs:       len(results),
		Arms:       len(arms),
		Unfinished: unfinished,
	}
	if err := os.MkdirAll(filepath.Join(dir, PlotsDir), 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	docs := readEvalDocs(dir, arms, protos, &rep.Warnings)
	reps := repetitionSets(arms, protos, docs)
	figs, err := writePlots(dir, arms, protos, docs, reps, &rep.Warnings)
	if err != nil {
		return nil, err
	}
	curves := readCurves(dir, arms)
	sizes := sizeArms(arms, curves)
	// A size study's curves are drawn a loss a figure, against passes;
	// any other study's in one figure against the step.
	if fs, err := plotCurvesBySize(dir, arms, curves, sizes); err != nil {
		return nil, err
	} else if len(fs) > 0 {
		figs = append(figs, fs...)
	} else if fig, err := plotExtractionCurves(dir, curves); err != nil {
		return nil, err
	} else if fig != nil {
		figs = append(figs, *fig)
	}
	for _, plot := range []func(string, []*reportArm, []sizeArm) (*reportFigure, error){plotPassesVsSize, plotFirstPassVsSize} {
		if fig, err := plot(dir, arms, sizes); err != nil {
			return nil, err
		} else if fig != nil {
			figs = append(figs, *fig)
		}
	}
	for _, f := range figs {
		rep.Plots = append(rep.Plots, filepath.Join(dir, f.File))
	}
	_, specErr := os.Stat(filepath.Join(dir, "spec.yaml"))
	md := renderMarkdown(opt.Title, arms, protos, curves, sizes, reps, figs, rep, specErr == nil)
	if err := atomicfile.WriteFile(rep.Markdown, md); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	table, err := renderCSV(arms, protos)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if err := atomicfile.WriteFile(rep.CSV, table); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	perDoc, err := renderDocuments(arms, protos, docs)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	if err := atomicfile.WriteFile(rep.Documents, perDoc); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return rep, nil
}

// reportArm is one arm with all its finished seeds. The embedded result is
// the first seed's: the arm's description (loss, k, model, …) is the same
// for every seed.
type reportArm struct {
	*ArmResult
	runs []*ArmResult // by seed
}

// groupArms gathers the seeds of each arm and orders the arms for reading:
// by model size, the standard loss first, then by goldfish k, so that a
// table reads as a sweep.
func groupArms(results []ArmResult) []*reportArm {
	var arms []*reportArm
	byName := map[string]*reportArm{}
	for i := range results {
		r := &results[i]
		a := byName[r.Arm]
		if a == nil {
			a = &reportArm{ArmResult: r}
			byName[r.Arm] = a
			arms = append(arms, a)
		}
		a.runs = append(a.runs, r)
	}
	slices.SortStableFunc(arms, func(a, b *reportArm) int {
		return cmp.Or(
			cmp.Compare(a.Params, b.Params),
			cmp.Compare(lossRank(a.Loss), lossRank(b.Loss)),
			cmp.Compare(a.K, b.K),
			strings.Compare(a.Strategy, b.Strategy),
			cmp.Compare(a.H, b.H),
			strings.Compare(a.Arm, b.Arm),
		)
	})
	return arms
}

// repeatsCell is the setup's repeats of an arm: how many times each target
// was seen; for canaries their counts of copies and the epochs.
func (a *reportArm) repeatsCell() string {
	if len(a.TargetRepetitions) == 0 {
		return strconv.Itoa(a.Repeats)
	}
	counts := slices.Compact(slices.Sorted(slices.Values(a.TargetRepetitions)))
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("canaries: %s copies × %s", strings.Join(parts, ", "), reportPlural(a.Repeats, "epoch"))
}

func lossRank(loss string) int {
	if loss == "standard" {
		return 0
	}
	return 1
}

func (a *reportArm) isStandard() bool { return a.Loss == "standard" }
func (a *reportArm) isGoldfish() bool { return a.Loss == "goldfish" }

// evals returns the evaluation of protocol key of each seed that has it.
func (a *reportArm) evals(key string) []*Eval {
	var out []*Eval
	for _, r := range a.runs {
		if e := r.Eval(key); e != nil {
			out = append(out, e)
		}
	}
	return out
}

// groups returns, for each seed that has it, the members' (or the
// non-members') group of prefix length k of protocol key; groups without
// documents are left out.
func (a *reportArm) groups(key string, k int, members bool) []memorization.Group {
	var out []memorization.Group
	for _, e := range a.evals(key) {
		ps := e.Summary.Prefix(k)
		if ps == nil {
			continue
		}
		g := ps.NonMembers
		if members {
			g = ps.Members
		}
		if g.Documents > 0 {
			out = append(out, g)
		}
	}
	return out
}

// reportProtocol is one protocol of the experiment, as evaluated by any arm.
type reportProtocol struct {
	Key       string // names the eval folder, e.g. goldfish-50
	Name      string // goldfish, pythia, carlini, custom
	Desc      string // memorization.Protocol.String()
	SuffixLen int
	Ks        []int // the prefix lengths (0 alone for goldfish: the rest of each document)
	// Words says whether some arm has word-level ROUGE-L (a decoder was
	// given); otherwise ROUGE-L is over token ids only.
	Words     bool
	Bootstrap memorization.Bootstrap
}

// plotK is the prefix length the plots show: the longest, which extracts
// the most.
func (p *reportProtocol) plotK() int { return p.Ks[len(p.Ks)-1] }

// reportProtocols lists the protocols in the order the arms first show them.
func reportProtocols(arms []*reportArm) []*reportProtocol {
	var out []*reportProtocol
	byKey := map[string]*reportProtocol{}
	for _, a := range arms {
		for _, r := range a.runs {
			for _, e := range r.Evals {
				p := byKey[e.Key]
				if p == nil {
					s := &e.Summary
					p = &reportProtocol{Key: e.Key, Name: s.Name, Desc: s.Protocol, SuffixLen: s.SuffixLen, Bootstrap: s.Bootstrap}
					byKey[e.Key] = p
					out = append(out, p)
				}
				for _, ps := range e.Summary.Prefixes {
					if !slices.Contains(p.Ks, ps.K) {
						p.Ks = append(p.Ks, ps.K)
					}
				}
				p.Words = p.Words || summaryHasWords(&e.Summary)
			}
		}
	}
	for _, p := range out {
		slices.Sort(p.Ks)
	}
	// A protocol without probes (every document skipped) has nothing to
	// show.
	return slices.DeleteFunc(out, func(p *reportProtocol) bool { return len(p.Ks) == 0 })
}

// summaryHasWords tells whether an evaluation scored decoded words: the
// summary does not record it, but the zlib score and word-level ROUGE-L
// exist only then.
func summaryHasWords(s *memorization.Summary) bool {
	if s.MIA.ZlibAUC != 0 {
		return true
	}
	for _, ps := range s.Prefixes {
		if ps.Members.RougeLWords.Hi > 0 || ps.NonMembers.RougeLWords.Hi > 0 {
			return true
		}
	}
	return false
}

// reportStat is one number of a table or plot, aggregated over seeds.
// Mean is the mean over seeds and SD their sample standard deviation
// (memorization.MeanSD: n − 1; NaN with one seed, whose spread over seeds
// is unknown). [Lo, Hi] is what a plot's bar shows: with one seed its
// bootstrap interval (or the value itself when it has none), with several
// Mean ∓ SD.
type reportStat struct {
	Mean, Lo, Hi, SD float64
	Seeds            int  // 0: no value
	CI               bool // one seed with a bootstrap interval
}

func (s reportStat) ok() bool { return s.Seeds > 0 }

func statOfIntervals(ivs []memorization.Interval) reportStat {
	switch len(ivs) {
	case 0:
		return reportStat{}
	case 1:
		iv := ivs[0]
		return reportStat{Mean: iv.Mean, Lo: iv.Lo, Hi: iv.Hi, SD: math.NaN(), Seeds: 1, CI: true}
	}
	vs := make([]float64, len(ivs))
	for i, iv := range ivs {
		vs[i] = iv.Mean
	}
	return statOfValues(vs)
}

func statOfValues(vs []float64) reportStat {
	if len(vs) == 0 {
		return reportStat{}
	}
	m, sd := memorization.MeanSD(vs)
	if len(vs) == 1 {
		return reportStat{Mean: m, Lo: m, Hi: m, SD: sd, Seeds: 1}
	}
	return reportStat{Mean: m, Lo: m - sd, Hi: m + sd, SD: sd, Seeds: len(vs)}
}

// groupStat aggregates one metric of a group over seeds.
func groupStat(gs []memorization.Group, metric func(*memorization.Group) memorization.Interval) reportStat {
	ivs := make([]memorization.Interval, len(gs))
	for i := range gs {
		ivs[i] = metric(&gs[i])
	}
	return statOfIntervals(ivs)
}

// runStat aggregates a per-run number over the seeds that have it (absent:
// zero or negative, e.g. a held-out loss that was not measured).
func runStat(a *reportArm, value func(*ArmResult) float64) reportStat {
	var vs []float64
	for _, r := range a.runs {
		if v := value(r); v > 0 {
			vs = append(vs, v)
		}
	}
	return statOfValues(vs)
}

// summaryStat aggregates a number of protocol key's summaries over seeds
// (absent: zero, e.g. an AUC with an empty side).
func summaryStat(a *reportArm, key string, value func(*memorization.Summary) float64) reportStat {
	var vs []float64
	for _, e := range a.evals(key) {
		if v := value(&e.Summary); v != 0 {
			vs = append(vs, v)
		}
	}
	return statOfValues(vs)
}

const reportDash = "—"

// statStyle is how a table shows a reportStat: an arm's row aggregates its
// seeds, a seed's row shows the seed's own interval.
type statStyle int

const (
	// acrossSeeds: the mean over seeds ± their standard deviation,
	// "85.0% ± 7.1"; with one seed "87.5% ± —" (no spread is known).
	acrossSeeds statStyle = iota
	// perSeed: one seed's value with its bootstrap interval over
	// documents, "87.5% [78.1, 95.3]", or the value alone without one.
	perSeed
)

// cell formats s in style st, each number written by val and the mean
// followed by unit.
func (s reportStat) cell(st statStyle, val func(float64) string, unit string) string {
	if !s.ok() {
		return reportDash
	}
	m := val(s.Mean) + unit
	if st == acrossSeeds {
		sd := reportDash
		if !math.IsNaN(s.SD) {
			sd = val(s.SD)
		}
		return m + " ± " + sd
	}
	if s.CI {
		return fmt.Sprintf("%s [%s, %s]", m, val(s.Lo), val(s.Hi))
	}
	return m
}

// pct formats a fraction as a percentage with one decimal.
func (s reportStat) pct(st statStyle) string {
	return s.cell(st, func(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) }, "%")
}

// num formats a number with prec decimals.
func (s reportStat) num(st statStyle, prec int) string {
	return s.cell(st, func(v float64) string { return strconv.FormatFloat(v, 'f', prec, 64) }, "")
}

// perplexity formats a perplexity with units.FormatPerplexity.
func (s reportStat) perplexity(st statStyle) string {
	return s.cell(st, units.FormatPerplexity, "")
}

// reportPlural writes n and a noun, with an s unless n is 1.
func reportPlural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// mdCell makes text safe inside a Markdown table cell.
func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

func mdRow(b *bytes.Buffer, cells ...string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" ")
		b.WriteString(mdCell(c))
		b.WriteString(" |")
	}
	b.WriteString("\n")
}

func mdHeader(b *bytes.Buffer, cells ...string) {
	mdRow(b, cells...)
	b.WriteString("|")
	for range cells {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
}

// prefixTitle names a prefix length for a heading.
func (p *reportProtocol) prefixTitle(k int) string {
	if p.Name == "goldfish" {
		return fmt.Sprintf("prefix: the rest of each document, suffix %d tokens", p.SuffixLen)
	}
	return fmt.Sprintf("prefix %d tokens, suffix %d tokens", k, p.SuffixLen)
}

func renderMarkdown(title string, arms []*reportArm, protos []*reportProtocol, curves []runCurve, sizes []sizeArm, reps []repetitionSet, figs []reportFigure, rep *Written, spec bool) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", title)
	fmt.Fprintf(&b, "%s (%s × their seeds)", reportPlural(rep.Runs, "finished run"), reportPlural(rep.Arms, "arm"))
	if rep.Unfinished == 1 {
		b.WriteString("; 1 unfinished run is left out")
	} else if rep.Unfinished > 1 {
		fmt.Fprintf(&b, "; %d unfinished runs are left out", rep.Unfinished)
	}
	b.WriteString(". Every number is also in [results.csv](results.csv), every document's outcome in [documents.csv](documents.csv)")
	if spec {
		b.WriteString("; the experiment is [spec.yaml](spec.yaml)")
	}
	b.WriteString(".\n\n")

	b.WriteString("## Setup\n\n")
	mdHeader(&b, "arm", "loss", "k", "strategy", "h", "model", "parameters", "base held-out loss", "targets", "repeats", "steps", "seeds")
	for _, a := range arms {
		k, strategy, h := reportDash, reportDash, reportDash
		if a.isGoldfish() {
			k = strconv.Itoa(a.K)
			strategy = cmp.Or(a.Strategy, reportDash)
			if a.H > 0 {
				h = strconv.Itoa(a.H)
			}
		}
		seeds := make([]string, len(a.runs))
		for i, r := range a.runs {
			seeds[i] = strconv.FormatUint(r.Seed, 10)
		}
		baseLoss := reportDash
		if a.BaseHeldoutLoss > 0 {
			baseLoss = strconv.FormatFloat(a.BaseHeldoutLoss, 'f', 3, 64)
		}
		params := units.ShortCount(a.Params)
		if a.TrainedParams > 0 {
			params += " (" + units.ShortCount(a.TrainedParams) + " trained)"
		}
		mdRow(&b, a.Arm, a.Loss, k, strategy, h, a.ModelLabel(), params, baseLoss, strconv.Itoa(a.Targets),
			a.repeatsCell(), strconv.Itoa(a.Steps), strings.Join(seeds, ", "))
	}
	b.WriteString("\n")

	level, resamples := 0.95, 1000
	if len(protos) > 0 && protos[0].Bootstrap.Level > 0 {
		level, resamples = protos[0].Bootstrap.Level, protos[0].Bootstrap.Resamples
	}
	fmt.Fprintf(&b, "How to read the tables: exact match is the percentage of target (member) documents whose "+
		"suffix greedy decoding reproduces verbatim; token match and ROUGE-L F1 are mean percentages over "+
		"them. The held-out columns are never-trained documents, the control: extraction there is chance, and "+
		"their loss is the utility cost of the arm (the setup gives the base model's, before fine-tuning). Each arm's "+
		"row is the mean over its seeds ± the sample standard deviation of the per-seed values (n − 1; \"± —\" "+
		"with one seed, whose spread over seeds is unknown, not 0); the per-seed tables below give each seed's "+
		"value with its %g%% bootstrap confidence interval over documents (%d resamples). Losses are in nats per token. MIA AUC is the ROC AUC "+
		"with which a membership-inference score (loss, zlib ratio, min-k%% probability) separates members "+
		"from held-out documents: 0.5 is chance, 1 is perfect; MIA TPR at 1%% / 0.1%% FPR is the fraction of members "+
		"a threshold on the score flags while flagging at most 1%% (0.1%%) of the held-out documents, read exactly "+
		"off the empirical ROC (tied scores are never split; with fewer than 1,000 held-out documents 0.1%% allows "+
		"no false positive). The reference attack scores a document's loss minus its loss under a reference model "+
		"(in a study, the arm's base model before fine-tuning): lower is member-like.\n\n", 100*level, resamples)

	for _, p := range protos {
		fmt.Fprintf(&b, "## Protocol %s: %s\n\n", p.Key, p.Desc)
		for _, k := range p.Ks {
			fmt.Fprintf(&b, "### %s\n\n", p.prefixTitle(k))
			var rows [][]string
			for _, a := range arms {
				if row := tableRow(a, p, k, acrossSeeds); row != nil {
					rows = append(rows, row)
				}
			}
			splitTables(&b, tableHeader, rows, 1)
		}
	}
	curveTable(&b, curves)
	sizeTable(&b, arms, sizes)
	utilityTable(&b, arms)
	repetitionTable(&b, reps)
	seedTables(&b, arms, protos)

	if len(figs) > 0 {
		b.WriteString("## Plots\n\n")
		for i, f := range figs {
			fmt.Fprintf(&b, "![%s](%s)\n\n*Figure %d. %s*\n\n", f.Alt, filepath.ToSlash(f.File), i+1, f.Caption)
		}
	}
	if len(rep.Warnings) > 0 {
		b.WriteString("## Warnings\n\n")
		for _, w := range rep.Warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// seedTables is report.md's per-seed section: every table again with a
// row per arm and seed, each value with its bootstrap interval.
func seedTables(b *bytes.Buffer, arms []*reportArm, protos []*reportProtocol) {
	if len(protos) == 0 {
		return
	}
	level := 95.0
	if protos[0].Bootstrap.Level > 0 {
		level = 100 * protos[0].Bootstrap.Level
	}
	b.WriteString("## Per-seed results\n\n")
	fmt.Fprintf(b, "Each seed's own numbers, which the tables above aggregate: brackets are the %g%% bootstrap "+
		"confidence interval over documents; losses and perplexities are one number per run. Every document's "+
		"outcome is in [documents.csv](documents.csv).\n\n", level)
	for _, p := range protos {
		for _, k := range p.Ks {
			fmt.Fprintf(b, "### %s: %s\n\n", p.Key, p.prefixTitle(k))
			var rows [][]string
			for _, a := range arms {
				rows = append(rows, seedRows(a, p, k)...)
			}
			splitTables(b, seedHeader, rows, 2)
		}
	}
}

func exactOf(g *memorization.Group) memorization.Interval { return g.Exact }

// miaColumn is the first of tableHeader's columns that report.md puts in
// a table of their own (membership inference), so that neither table is
// 19 columns wide.
const miaColumn = 10

// splitTables writes rows under header as two tables: extraction and
// loss, then membership inference, each led by the first lead columns
// (the arm, and the seed of a per-seed table).
func splitTables(b *bytes.Buffer, header []string, rows [][]string, lead int) {
	cut := lead + miaColumn - 1
	for _, part := range [][2]int{{lead, cut}, {cut, len(header)}} {
		cols := func(r []string) []string { return append(append([]string(nil), r[:lead]...), r[part[0]:part[1]]...) }
		mdHeader(b, cols(header)...)
		for _, r := range rows {
			mdRow(b, cols(r)...)
		}
		b.WriteString("\n")
	}
}

// tableHeader names the columns of a protocol's table, in report.md and
// on the console (WriteConsole).
var tableHeader = []string{"arm", "documents (members / held-out)", "exact match", "token match",
	"ROUGE-L (tokens)", "ROUGE-L (words)", "held-out exact match", "held-out documents' loss",
	"held-out documents' perplexity", "final train loss", "MIA AUC loss", "MIA AUC zlib", "MIA AUC min-k%",
	"MIA TPR at 1% / 0.1% FPR loss", "MIA TPR at 1% / 0.1% FPR zlib", "MIA TPR at 1% / 0.1% FPR min-k%",
	"MIA AUC reference", "MIA TPR at 1% / 0.1% FPR reference"}

// tableRow is arm a's row of protocol p's table at prefix length k, its
// cells formatted for reading (percentages, losses, perplexities) in style
// st, or nil when the arm did not evaluate it. report.md and the console
// both print it, so they agree on every value.
func tableRow(a *reportArm, p *reportProtocol, k int, st statStyle) []string {
	mem, non := a.groups(p.Key, k, true), a.groups(p.Key, k, false)
	if len(mem) == 0 && len(non) == 0 {
		return nil
	}
	nm, nn := 0, 0
	if len(mem) > 0 {
		nm = mem[0].Documents
	}
	if len(non) > 0 {
		nn = non[0].Documents
	}
	words := reportDash
	if p.Words {
		words = groupStat(mem, func(g *memorization.Group) memorization.Interval { return g.RougeLWords }).pct(st)
	}
	return []string{a.Arm, fmt.Sprintf("%d / %d", nm, nn),
		groupStat(mem, exactOf).pct(st),
		groupStat(mem, func(g *memorization.Group) memorization.Interval { return g.TokenMatch }).pct(st),
		groupStat(mem, func(g *memorization.Group) memorization.Interval { return g.RougeLTokens }).pct(st),
		words,
		groupStat(non, exactOf).pct(st),
		runStat(a, func(r *ArmResult) float64 { return r.HeldoutLoss }).num(st, 3),
		runStat(a, func(r *ArmResult) float64 { return r.HeldoutPerplexity }).perplexity(st),
		runStat(a, func(r *ArmResult) float64 { return r.FinalTrainLoss }).num(st, 3),
		summaryStat(a, p.Key, func(s *memorization.Summary) float64 { return s.MIA.LossAUC }).num(st, 3),
		summaryStat(a, p.Key, func(s *memorization.Summary) float64 { return s.MIA.ZlibAUC }).num(st, 3),
		summaryStat(a, p.Key, func(s *memorization.Summary) float64 { return s.MIA.MinKAUC }).num(st, 3),
		tprCell(a, p.Key, st, hasLossMIA, func(m *memorization.MIA) (float64, float64) { return m.LossTPR1, m.LossTPR01 }),
		tprCell(a, p.Key, st, hasZlibMIA, func(m *memorization.MIA) (float64, float64) { return m.ZlibTPR1, m.ZlibTPR01 }),
		tprCell(a, p.Key, st, hasLossMIA, func(m *memorization.MIA) (float64, float64) { return m.MinKTPR1, m.MinKTPR01 }),
		summaryStatIf(a, p.Key, hasRefMIA, func(s *memorization.Summary) float64 { return s.MIA.RefAUC }).num(st, 3),
		tprCell(a, p.Key, st, hasRefMIA, func(m *memorization.MIA) (float64, float64) { return m.RefTPR1, m.RefTPR01 }),
	}
}

// seedHeader names the columns of a per-seed table: tableHeader's with
// the seed after the arm.
var seedHeader = append([]string{tableHeader[0], "seed"}, tableHeader[1:]...)

// seedRows are arm a's per-seed rows of protocol p's table at prefix
// length k: each seed's own values with their bootstrap intervals.
func seedRows(a *reportArm, p *reportProtocol, k int) [][]string {
	var out [][]string
	for _, r := range a.runs {
		row := tableRow(&reportArm{ArmResult: r, runs: []*ArmResult{r}}, p, k, perSeed)
		if row == nil {
			continue
		}
		out = append(out, append([]string{row[0], strconv.FormatUint(r.Seed, 10)}, row[1:]...))
	}
	return out
}

// Whether an evaluation measured the attacks (both sets non-empty), the
// zlib score (decoded words) and the reference-model score: a TPR of 0 is
// a result, unlike an AUC of 0.
func hasLossMIA(s *memorization.Summary) bool { return s.MIA.LossAUC != 0 }
func hasZlibMIA(s *memorization.Summary) bool { return s.MIA.ZlibAUC != 0 }
func hasRefMIA(s *memorization.Summary) bool  { return s.MIA.Reference }

// summaryStatIf aggregates value over the arm's evaluations of protocol
// key that have it (has), zeros included.
func summaryStatIf(a *reportArm, key string, has func(*memorization.Summary) bool, value func(*memorization.Summary) float64) reportStat {
	var vs []float64
	for _, e := range a.evals(key) {
		if has(&e.Summary) {
			vs = append(vs, value(&e.Summary))
		}
	}
	return statOfValues(vs)
}

// tprCell is a score's true-positive rates at 1% and 0.1% FPR, in
// percent in style st: "12.0% ± 1.4 / 2.0% ± 0.7" over seeds.
func tprCell(a *reportArm, key string, st statStyle, has func(*memorization.Summary) bool, tpr func(*memorization.MIA) (float64, float64)) string {
	at1 := summaryStatIf(a, key, has, func(s *memorization.Summary) float64 { v, _ := tpr(&s.MIA); return v })
	if !at1.ok() {
		return reportDash
	}
	at01 := summaryStatIf(a, key, has, func(s *memorization.Summary) float64 { _, v := tpr(&s.MIA); return v })
	return at1.pct(st) + " / " + at01.pct(st)
}

// WriteConsole writes the finished arms' results as report.md's tables
// show them — the same arms in the same order, the same cells (the mean
// over seeds ± their standard deviation) — one "column: value" line each,
// for a terminal.
// consoleLabelWidth aligns WriteConsole's values: its longest label.
var consoleLabelWidth = func() int {
	n := utf8.RuneCountInString("utility: held-out filler loss ÷ base's")
	for _, h := range tableHeader {
		n = max(n, utf8.RuneCountInString(h))
	}
	return n
}()

func WriteConsole(w io.Writer, results []ArmResult) error {
	arms := groupArms(results)
	var b bytes.Buffer
	for _, p := range reportProtocols(arms) {
		for _, k := range p.Ks {
			fmt.Fprintf(&b, "\n%s — %s\n", p.Desc, p.prefixTitle(k))
			for _, a := range arms {
				row := tableRow(a, p, k, acrossSeeds)
				if row == nil {
					continue
				}
				fmt.Fprintf(&b, "%s (%s loss):\n", row[0], a.Loss)
				for i := 1; i < len(row); i++ {
					fmt.Fprintf(&b, "  %-*s %s\n", consoleLabelWidth, tableHeader[i], row[i])
				}
				if u, ok := a.utility(); ok {
					fmt.Fprintf(&b, "  %-*s %s (%s)\n", consoleLabelWidth, "utility: held-out filler loss ÷ base's",
						statOfValues(u.ratios).num(acrossSeeds, 3), u.verdict())
				}
			}
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// csvHeader names results.csv's columns. Match rates and ROUGE-L are
// fractions in [0, 1], losses nats per token; an empty cell is a number
// that was not measured.
var csvHeader = []string{
	"arm", "seed", "loss", "k", "strategy", "h", "model", "params", "non_embedding_params", "targets", "repeats", "steps",
	"final_train_loss", "heldout_loss", "heldout_perplexity", "seconds",
	"base_heldout_loss", "filler_heldout", "filler_heldout_loss", "base_filler_heldout_loss",
	"adapter", "trained_params",
	"protocol", "protocol_name", "suffix_len", "prefix_len", "group", "documents",
	"exact_mean", "exact_lo", "exact_hi",
	"token_match_mean", "token_match_lo", "token_match_hi",
	"rougeL_tokens_mean", "rougeL_tokens_lo", "rougeL_tokens_hi",
	"rougeL_words_mean", "rougeL_words_lo", "rougeL_words_hi",
	"prefix_match_mean", "prefix_match_lo", "prefix_match_hi",
	"loss_mean", "loss_lo", "loss_hi", "perplexity",
	"mia_loss_auc", "mia_zlib_auc", "mia_min_k_auc", "min_k_percent",
	"mia_loss_tpr_at_1pct_fpr", "mia_loss_tpr_at_0.1pct_fpr", "mia_zlib_tpr_at_1pct_fpr", "mia_zlib_tpr_at_0.1pct_fpr",
	"mia_min_k_tpr_at_1pct_fpr", "mia_min_k_tpr_at_0.1pct_fpr",
	"mia_ref_auc", "mia_ref_tpr_at_1pct_fpr", "mia_ref_tpr_at_0.1pct_fpr",
	"bootstrap_level", "bootstrap_resamples",
}

// renderCSV writes one row per arm × seed × protocol × prefix length ×
// group, in the report's arm order. A group without documents keeps its
// row (so that the count is predictable) with empty metrics.
func renderCSV(arms []*reportArm, protos []*reportProtocol) ([]byte, error) {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.Write(csvHeader); err != nil {
		return nil, err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	opt := func(v float64) string { // zero means not measured
		if v == 0 {
			return ""
		}
		return f(v)
	}
	when := func(present bool, v float64) string { // empty: not measured
		if !present {
			return ""
		}
		return f(v)
	}
	itoa := strconv.Itoa
	optInt := func(n int64) string { // zero means not recorded
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	for _, a := range arms {
		for _, r := range a.runs {
			run := []string{r.Arm, strconv.FormatUint(r.Seed, 10), r.Loss, itoa(r.K), r.Strategy, itoa(r.H), r.Model,
				strconv.FormatInt(r.Params, 10), optInt(r.NonEmbeddingParams), itoa(r.Targets), itoa(r.Repeats), itoa(r.Steps),
				opt(r.FinalTrainLoss), opt(r.HeldoutLoss), opt(r.HeldoutPerplexity), f(r.Seconds),
				opt(r.BaseHeldoutLoss), itoa(r.FillerHeldout), opt(r.FillerHeldoutLoss), opt(r.BaseFillerHeldoutLoss),
				r.Adapter, strconv.FormatInt(r.TrainedParams, 10)}
			for _, p := range protos {
				e := r.Eval(p.Key)
				if e == nil {
					continue
				}
				s := &e.Summary
				words := summaryHasWords(s)
				for _, ps := range s.Prefixes {
					for _, grp := range []struct {
						name string
						g    *memorization.Group
					}{{"members", &ps.Members}, {"non_members", &ps.NonMembers}} {
						g := grp.g
						row := append(slices.Clone(run), p.Key, s.Name, itoa(s.SuffixLen), itoa(ps.K), grp.name, itoa(g.Documents))
						iv := func(v memorization.Interval, present bool) []string {
							if !present {
								return []string{"", "", ""}
							}
							return []string{f(v.Mean), f(v.Lo), f(v.Hi)}
						}
						has := g.Documents > 0
						row = append(row, iv(g.Exact, has)...)
						row = append(row, iv(g.TokenMatch, has)...)
						row = append(row, iv(g.RougeLTokens, has)...)
						row = append(row, iv(g.RougeLWords, has && words)...)
						row = append(row, iv(g.PrefixMatch, has)...)
						row = append(row, iv(g.Loss, has)...)
						ppl := ""
						if has {
							ppl = f(g.Perplexity)
						}
						row = append(row, ppl, opt(s.MIA.LossAUC), opt(s.MIA.ZlibAUC), opt(s.MIA.MinKAUC), f(s.MIA.MinKPercent))
						m := &s.MIA
						row = append(row, when(hasLossMIA(s), m.LossTPR1), when(hasLossMIA(s), m.LossTPR01),
							when(hasZlibMIA(s), m.ZlibTPR1), when(hasZlibMIA(s), m.ZlibTPR01),
							when(hasLossMIA(s), m.MinKTPR1), when(hasLossMIA(s), m.MinKTPR01),
							when(m.Reference, m.RefAUC), when(m.Reference, m.RefTPR1), when(m.Reference, m.RefTPR01))
						row = append(row, f(s.Bootstrap.Level), itoa(s.Bootstrap.Resamples))
						if err := w.Write(row); err != nil {
							return nil, err
						}
					}
				}
			}
		}
	}
	w.Flush()
	return b.Bytes(), w.Error()
}
