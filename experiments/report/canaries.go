package report

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/memtrain/memtrain/memorization"
)

// The utility of an arm on held-out filler, as its loss there over the
// base model's: UtilityAim is what a canary study aims to stay within
// (training on the canaries leaves the model as useful as it was); above
// CollapseRatio the arm's utility collapsed, and the report flags it
// instead of comparing its memorization with the other arms'.
const (
	UtilityAim    = 1.05
	CollapseRatio = 1.5
)

// fillerRatio is the run's held-out filler loss over its base model's;
// false when the study held no filler out.
func (r *ArmResult) fillerRatio() (float64, bool) {
	if r.FillerHeldout == 0 || r.FillerHeldoutLoss <= 0 || r.BaseFillerHeldoutLoss <= 0 {
		return 0, false
	}
	return r.FillerHeldoutLoss / r.BaseFillerHeldoutLoss, true
}

// utility is an arm's utility on held-out filler: the ratio of each seed
// that measured it, and the verdict on the worst.
type utility struct {
	ratios []float64
	worst  float64
}

func (a *reportArm) utility() (utility, bool) {
	var u utility
	for _, r := range a.runs {
		if v, ok := r.fillerRatio(); ok {
			u.ratios = append(u.ratios, v)
			u.worst = max(u.worst, v)
		}
	}
	return u, len(u.ratios) > 0
}

// collapsed says whether some seed's held-out filler loss exceeds
// CollapseRatio × the base model's.
func (u utility) collapsed() bool { return u.worst > CollapseRatio }

// verdict is the utility in words, for the tables.
func (u utility) verdict() string {
	switch {
	case u.collapsed():
		return fmt.Sprintf("collapsed (%s× the base's): not compared", strconv.FormatFloat(u.worst, 'f', 2, 64))
	case u.worst > UtilityAim:
		return fmt.Sprintf("degraded (above %g×)", UtilityAim)
	}
	return fmt.Sprintf("kept (within %g×)", UtilityAim)
}

// repetitionArm is an arm's memorization by canary count: for each count
// (ascending), the canaries' group of each seed, scored by
// memorization.Summarize over the canaries of that count alone, so each
// has its bootstrap interval.
type repetitionArm struct {
	arm    *reportArm
	index  int // in the report's arm order, for its colour
	counts []int
	groups [][]seedGroup // [count][seed]
	// held is each seed's held-out controls' group: the floor.
	held []seedGroup
}

// seedGroup is one seed's group.
type seedGroup struct {
	seed uint64
	g    memorization.Group
}

// groupsOf drops the seeds.
func groupsOf(sgs []seedGroup) []memorization.Group {
	out := make([]memorization.Group, len(sgs))
	for i, sg := range sgs {
		out[i] = sg.g
	}
	return out
}

// repetitionSet is the canary results of one protocol, at its plotted
// prefix length.
type repetitionSet struct {
	proto *reportProtocol
	arms  []repetitionArm
}

// repetitionSets groups every canary study's targets by their count of
// repetitions, per protocol; nil when no run records counts
// (ArmResult.TargetRepetitions).
func repetitionSets(arms []*reportArm, protos []*reportProtocol, docs evalDocs) []repetitionSet {
	var out []repetitionSet
	for _, p := range protos {
		k := p.plotK()
		set := repetitionSet{proto: p}
		for ai, a := range arms {
			ra := repetitionArm{arm: a, index: ai}
			byCount := map[int][]seedGroup{}
			for _, r := range a.runs {
				e := r.Eval(p.Key)
				ds := docs.of(r, p.Key)
				if e == nil || len(ds) == 0 || len(r.TargetRepetitions) == 0 {
					continue
				}
				sub := map[int][]memorization.DocResult{}
				for _, d := range ds {
					if n, ok := r.repetitions(d); ok {
						sub[n] = append(sub[n], d)
					}
				}
				s := &e.Summary
				proto := memorization.Protocol{Name: s.Name, SuffixLen: s.SuffixLen}
				for n, ds := range sub {
					sum := memorization.Summarize(ds, proto, s.MIA.MinKPercent, s.Bootstrap, summaryHasWords(s))
					if ps := sum.Prefix(k); ps != nil && ps.Members.Documents > 0 {
						byCount[n] = append(byCount[n], seedGroup{r.Seed, ps.Members})
					}
				}
				if ps := s.Prefix(k); ps != nil && ps.NonMembers.Documents > 0 {
					ra.held = append(ra.held, seedGroup{r.Seed, ps.NonMembers})
				}
			}
			for n := range byCount {
				ra.counts = append(ra.counts, n)
			}
			if len(ra.counts) == 0 {
				continue
			}
			slices.Sort(ra.counts)
			for _, n := range ra.counts {
				ra.groups = append(ra.groups, byCount[n])
			}
			set.arms = append(set.arms, ra)
		}
		if len(set.arms) > 0 {
			out = append(out, set)
		}
	}
	return out
}

func tokenMatchOf(g *memorization.Group) memorization.Interval { return g.TokenMatch }

// perSeedCell lists each seed's value of metric with its bootstrap
// interval: "s1 62.5% [25.0, 87.5]; s2 50.0% [12.5, 75.0]".
func perSeedCell(sgs []seedGroup, metric func(*memorization.Group) memorization.Interval) string {
	parts := make([]string, len(sgs))
	for i, sg := range sgs {
		parts[i] = "s" + strconv.FormatUint(sg.seed, 10) + " " + groupStat([]memorization.Group{sg.g}, metric).pct(perSeed)
	}
	return strings.Join(parts, "; ")
}

// utilityTable is report.md's section on utility on held-out filler: per
// arm, the base model's loss on it, the arm's, their ratio and the verdict;
// a collapse is stated in words.
func utilityTable(b *bytes.Buffer, arms []*reportArm) {
	var rows []*reportArm
	for _, a := range arms {
		if _, ok := a.utility(); ok {
			rows = append(rows, a)
		}
	}
	if len(rows) == 0 {
		return
	}
	b.WriteString("## Utility on held-out filler\n\n")
	fmt.Fprintf(b, "The loss (nats per token) on filler documents held out of the training data, after fine-tuning, against the "+
		"base model's on the same documents: a ratio of 1 means training on the targets left the model as good at "+
		"the filler's text as it was. The study aims at %g× at most; above %g× the arm's utility collapsed, and its "+
		"memorization is not compared with the other arms' (a broken model's numbers say nothing about the loss). "+
		"Ratios are the mean over seeds ± their standard deviation; the verdict is the worst seed's.\n\n", UtilityAim, CollapseRatio)
	mdHeader(b, "arm", "seeds", "held-out filler documents", "base model's held-out filler loss", "held-out filler loss", "ratio to the base", "utility")
	var collapsed []string
	for _, a := range rows {
		u, _ := a.utility()
		mdRow(b, a.Arm, strconv.Itoa(len(u.ratios)), strconv.Itoa(a.FillerHeldout),
			runStat(a, func(r *ArmResult) float64 { return r.BaseFillerHeldoutLoss }).num(acrossSeeds, 3),
			runStat(a, func(r *ArmResult) float64 { return r.FillerHeldoutLoss }).num(acrossSeeds, 3),
			statOfValues(u.ratios).num(acrossSeeds, 3), u.verdict())
		if u.collapsed() {
			collapsed = append(collapsed, fmt.Sprintf("%s (%s×)", a.Arm, strconv.FormatFloat(u.worst, 'f', 2, 64)))
		}
	}
	b.WriteString("\n")
	if len(collapsed) > 0 {
		fmt.Fprintf(b, "**Utility collapse:** %s lost the filler's text (held-out filler loss above %g× the base model's); "+
			"its memorization is marked and left out of the figures rather than compared.\n\n", strings.Join(collapsed, ", "), CollapseRatio)
	}
}

// repetitionTable is report.md's section on memorization against the
// canaries' repetitions: per protocol, a row per arm and count.
func repetitionTable(b *bytes.Buffer, sets []repetitionSet) {
	if len(sets) == 0 {
		return
	}
	b.WriteString("## Memorization against repetitions\n\n")
	b.WriteString("Canaries: targets hidden in the filler corpus, each in the training data a controlled number of times " +
		"(its copies; times seen is copies × epochs). Exact match and token match are over the canaries of each count; " +
		"each cell is the mean over seeds ± their standard deviation (— with one seed), and beside it each seed's value with its " +
		"bootstrap interval over those canaries. Held out: the never-trained controls, the floor.\n\n")
	for _, set := range sets {
		p := set.proto
		fmt.Fprintf(b, "### %s: %s\n\n", p.Key, p.prefixTitle(p.plotK()))
		mdHeader(b, "arm", "copies in the training data", "times seen", "canaries", "exact match", "exact match per seed",
			"token match", "token match per seed", "utility on held-out filler")
		for _, ra := range set.arms {
			a := ra.arm
			verdict := reportDash
			if u, ok := a.utility(); ok {
				verdict = u.verdict()
			}
			rows := func(label, seen string, sgs []seedGroup) {
				gs := groupsOf(sgs)
				n := reportDash
				if len(gs) > 0 {
					n = strconv.Itoa(gs[0].Documents)
				}
				mdRow(b, a.Arm, label, seen, n, groupStat(gs, exactOf).pct(acrossSeeds), perSeedCell(sgs, exactOf),
					groupStat(gs, tokenMatchOf).pct(acrossSeeds), perSeedCell(sgs, tokenMatchOf), verdict)
			}
			for ci, n := range ra.counts {
				rows(strconv.Itoa(n), strconv.Itoa(n*max(a.Repeats, 1)), ra.groups[ci])
			}
			if len(ra.held) > 0 {
				rows("0 (held out)", "0", ra.held)
			}
		}
		b.WriteString("\n")
	}
}

// plotMemorizationVsRepetitions draws, for one protocol, the canaries'
// exact match and token match against their copies in the training data
// (log scale), one colour per arm, with each arm's held-out token match
// as its floor. Arms whose utility collapsed are left out, and said so.
func plotMemorizationVsRepetitions(dir string, set repetitionSet) (*reportFigure, error) {
	p := set.proto
	var shown []repetitionArm
	var left []string
	for _, ra := range set.arms {
		if u, ok := ra.arm.utility(); ok && u.collapsed() {
			left = append(left, fmt.Sprintf("%s (held-out filler loss %s× the base's)", ra.arm.Arm, strconv.FormatFloat(u.worst, 'f', 2, 64)))
			continue
		}
		shown = append(shown, ra)
	}
	if len(shown) == 0 {
		return nil, nil
	}
	var counts []float64
	for _, ra := range shown {
		for _, n := range ra.counts {
			if !slices.Contains(counts, float64(n)) {
				counts = append(counts, float64(n))
			}
		}
	}
	slices.Sort(counts)
	title := "Memorization against repetitions (" + p.Key + ")"
	f := newPlotFigure(title, "copies of each canary in the training data", "canaries memorized (%)")
	f.percentAxis()
	lo, hi := counts[0], counts[len(counts)-1]
	switch {
	case len(counts) == 1:
		f.p.X.Min, f.p.X.Max = lo-1, hi+1
	case lo > 0 && hi/lo >= 4:
		f.setLogX(lo, hi)
		f.p.X.Label.Text += " (log scale)"
	default:
		f.p.X.Min, f.p.X.Max = lo-0.5, hi+0.5
	}
	f.p.X.Tick.Marker = f.valueTicks(counts, func(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) })
	var used []*reportArm
	for i, ra := range shown {
		clr := paletteColor(ra.index)
		xs := make([]float64, len(ra.counts))
		exact := make([]reportStat, len(ra.counts))
		token := make([]reportStat, len(ra.counts))
		for ci, n := range ra.counts {
			xs[ci] = float64(n)
			exact[ci] = groupStat(groupsOf(ra.groups[ci]), exactOf)
			token[ci] = groupStat(groupsOf(ra.groups[ci]), tokenMatchOf)
		}
		if err := f.addSeries(ra.arm.Arm+": exact match", xs, exact, 100, 0, 100, clr, nil, plotGlyphs[0]); err != nil {
			return nil, err
		}
		if err := f.addSeries(ra.arm.Arm+": token match", xs, token, 100, 0, 100, clr, plotDashes[1], plotGlyphs[1]); err != nil {
			return nil, err
		}
		if len(ra.held) > 0 {
			floor := groupStat(groupsOf(ra.held), tokenMatchOf)
			f.addReference(ra.arm.Arm+": held-out floor", 100*floor.Mean, plotLighten(clr, 0.35), vg.Points(1.2), i)
		}
		used = append(used, ra.arm)
	}
	file := filepath.Join(PlotsDir, "memorization-vs-repetitions-"+plotSlug(p.Key)+".png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	caption := fmt.Sprintf("Canaries memorized against their copies in the training data (%s): exact match (solid, circles) "+
		"and token match (dashed, triangles) over the canaries of each count, one colour per arm; dotted, lighter: the arm's "+
		"token match on the held-out controls, never trained on (the floor); %s.", p.prefixNote(), intervalNote(used, p))
	if len(left) > 0 {
		caption += " Left out, their utility collapsed: " + strings.Join(left, ", ") + "."
	}
	return &reportFigure{File: file, Alt: title, Caption: caption}, nil
}
