package report

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// A model-size study (arms of several base-model sizes, with extraction
// curves) is read here against the size: how many passes over the
// training data each size takes to memorize half its targets, and how
// much one pass memorizes — the quantities behind the claim that a large
// enough model memorizes in a single pass. The numbers come from the
// curves (curves.go); nothing here measures anything else.

// sizeOf is the size a scaling study compares: the non-embedding
// parameters when the result records them, else every parameter.
func sizeOf(r *ArmResult) int64 {
	if r.NonEmbeddingParams > 0 {
		return r.NonEmbeddingParams
	}
	return r.Params
}

// sizeAxis names the x axis of arms' sizes: non-embedding parameters
// when every arm records them.
func sizeAxis(arms []*reportArm) string {
	for _, a := range arms {
		if a.NonEmbeddingParams <= 0 {
			return "parameters"
		}
	}
	return "non-embedding parameters"
}

// lossLabel names the series an arm belongs to in a plot against size:
// "standard", or "goldfish k=4" (with the strategy and h when the arms
// use several).
func lossLabel(a *reportArm, arms []*reportArm) string {
	switch {
	case a.isStandard():
		return "standard"
	case !a.isGoldfish():
		return a.Loss
	}
	label := fmt.Sprintf("goldfish k=%d", a.K)
	several := slices.ContainsFunc(arms, func(b *reportArm) bool {
		return b.isGoldfish() && (b.Strategy != a.Strategy || b.H != a.H)
	})
	if several {
		label += " " + a.Strategy
		if a.H > 0 {
			label += " h=" + strconv.Itoa(a.H)
		}
	}
	return label
}

// sizeArm is one arm's curves read against its model's size.
type sizeArm struct {
	arm      *reportArm
	size     int64
	series   string
	protocol string // the curves' protocol
	seeds    int
	// reached: passes to 50% of the seeds that got there; missed: the
	// passes trained by the seeds that did not (censored: more than that).
	reached, missed []float64
	// first, firstHeld: exact match of the targets and of the held-out
	// controls after the first pass, one value a seed (firstHeld only for
	// seeds that measured controls); firstShort: a seed's measurement
	// ending the first pass came before its last step.
	first, firstHeld []float64
	firstShort       bool
	trained          []float64 // passes trained, one a seed
}

// sizeArms reads every arm's curves against its size, in the order the
// table shows them: by series (standard first, then goldfish k), then by
// size. Nil unless the curves span at least two sizes.
func sizeArms(arms []*reportArm, curves []runCurve) []sizeArm {
	var out []sizeArm
	sizes := map[int64]bool{}
	for ai, a := range arms {
		sa := sizeArm{arm: a, size: sizeOf(a.ArmResult), series: lossLabel(a, arms)}
		for i := range curves {
			c := &curves[i]
			if c.arm != ai || c.perPass <= 0 {
				continue
			}
			sa.seeds++
			sa.protocol = c.protocol
			if p, ok := c.reachPasses(CurveThreshold); ok {
				sa.reached = append(sa.reached, p)
			} else {
				sa.missed = append(sa.missed, c.trainedPasses())
			}
			if p, ok := c.firstPass(); ok {
				sa.first = append(sa.first, p.members)
				if p.hasHeld {
					sa.firstHeld = append(sa.firstHeld, p.held)
				}
				sa.firstShort = sa.firstShort || p.step < c.perPass
			}
			sa.trained = append(sa.trained, c.trainedPasses())
		}
		if sa.seeds == 0 || sa.size <= 0 {
			continue
		}
		sizes[sa.size] = true
		out = append(out, sa)
	}
	if len(sizes) < 2 {
		return nil
	}
	slices.SortStableFunc(out, func(x, y sizeArm) int {
		return cmp.Or(cmp.Compare(lossRank(x.arm.Loss), lossRank(y.arm.Loss)), cmp.Compare(x.arm.K, y.arm.K),
			cmp.Compare(x.series, y.series), cmp.Compare(x.size, y.size))
	})
	return out
}

// spanOf is the mean of vs with the range of its values: what the plots
// against size draw (the line through the mean, bars from min to max).
func spanOf(vs []float64) reportStat {
	if len(vs) == 0 {
		return reportStat{}
	}
	r := rangeOf(vs)
	return reportStat{Mean: r.mean, Lo: r.lo, Hi: r.hi, Seeds: len(vs)}
}

// rangeCell writes the range of vs, "2.25–3.5", or the one value.
func rangeCell(vs []float64, val func(float64) string) string {
	if len(vs) == 0 {
		return reportDash
	}
	r := rangeOf(vs)
	if r.lo == r.hi {
		return val(r.lo)
	}
	return val(r.lo) + "–" + val(r.hi)
}

// passesText writes a number of passes with at most 4 significant digits
// ("2.25", "12").
func passesText(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

// pctText writes a fraction as a percentage with one decimal.
func pctText(v float64) string { return strconv.FormatFloat(100*v, 'f', 1, 64) + "%" }

// sizeTable is report.md's section on memorization against model size.
func sizeTable(b *bytes.Buffer, arms []*reportArm, sas []sizeArm) {
	if len(sas) == 0 {
		return
	}
	axis := sizeAxis(arms)
	b.WriteString("## Memorization against model size\n\n")
	b.WriteString("Read off the extraction curves (the section above): *passes to 50%* is the first measurement at which " +
		"at least half the targets were extracted verbatim, counted in passes over the training data (its step ÷ the " +
		"steps of one pass: 2.25 is a quarter into the third pass); *after one pass* is the exact match measured at the end " +
		"of the first pass. Means are over seeds ± the sample standard deviation (n − 1; \"± —\" with one value), beside the " +
		"seeds' range (min–max). Passes to 50% averages the seeds that reached it; the others are counted in *seeds that " +
		"reached 50%* and did not get there within the passes trained.\n\n")
	mdHeader(b, "arm", "loss", axis, "parameters", "seeds", "seeds that reached 50%", "passes to 50% exact match",
		"passes to 50%, range over seeds", "exact match after one pass", "after one pass, range over seeds",
		"held-out exact match after one pass", "passes trained")
	short := false
	for _, sa := range sas {
		held := reportDash
		if len(sa.firstHeld) > 0 {
			held = statOfValues(sa.firstHeld).pct(acrossSeeds)
		}
		mdRow(b, sa.arm.Arm, sa.series, units.Commas(sa.size), units.ShortCount(sa.arm.Params), strconv.Itoa(sa.seeds),
			fmt.Sprintf("%d of %d", len(sa.reached), sa.seeds),
			statOfValues(sa.reached).num(acrossSeeds, 2), rangeCell(sa.reached, passesText),
			statOfValues(sa.first).pct(acrossSeeds), rangeCell(sa.first, pctText), held,
			rangeCell(sa.trained, passesText))
		short = short || sa.firstShort
	}
	b.WriteString("\n")
	if short {
		b.WriteString("Some runs measured extraction last before the end of their first pass (extraction's `every` does not " +
			"divide the steps of a pass): their *after one pass* is that earlier measurement.\n\n")
	}
}

// sizeSeries gathers the size arms of each series, in order.
func sizeSeries(sas []sizeArm) (names []string, by map[string][]sizeArm) {
	by = map[string][]sizeArm{}
	for _, sa := range sas {
		if _, ok := by[sa.series]; !ok {
			names = append(names, sa.series)
		}
		by[sa.series] = append(by[sa.series], sa)
	}
	return names, by
}

// sizeFigure starts a plot against the arms' sizes: a log x axis marked
// at the sizes themselves.
func sizeFigure(title, yLabel string, arms []*reportArm, sas []sizeArm) *plotFigure {
	var sizes []float64
	for _, sa := range sas {
		if !slices.Contains(sizes, float64(sa.size)) {
			sizes = append(sizes, float64(sa.size))
		}
	}
	slices.Sort(sizes)
	f := newPlotFigure(title, sizeAxis(arms)+" (log scale)", yLabel)
	f.setLogX(sizes[0], sizes[len(sizes)-1])
	f.p.X.Tick.Marker = f.valueTicks(sizes, func(x float64) string { return units.ShortCount(int64(x)) })
	return f
}

// plotPassesVsSize draws the passes to 50% exact match against the size,
// a line per series through the mean over the seeds that reached it with
// bars over their range; an open triangle at the passes trained marks a
// size where some seed did not reach it (censored: it would take more).
func plotPassesVsSize(dir string, arms []*reportArm, sas []sizeArm) (*reportFigure, error) {
	if len(sas) == 0 {
		return nil, nil
	}
	f, caption, err := passesFigure(arms, sas)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(PlotsDir, "passes-to-50-vs-params.png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	return &reportFigure{File: file, Alt: f.p.Title.Text, Caption: caption}, nil
}

// passesFigure is plotPassesVsSize's figure and caption.
func passesFigure(arms []*reportArm, sas []sizeArm) (*plotFigure, string, error) {
	title := "Passes to 50% extraction, by model size"
	f := sizeFigure(title, "passes to 50% exact match", arms, sas)
	top := 0.0
	for _, sa := range sas {
		for _, v := range sa.trained {
			top = max(top, v)
		}
	}
	f.p.Y.Min, f.p.Y.Max = 0, 1.1*top
	f.p.Y.Tick.Marker = plainTicks{}
	names, by := sizeSeries(sas)
	for i, name := range names {
		clr := paletteColor(i)
		var xs []float64
		var st []reportStat
		var censored plotter.XYs
		for _, sa := range by[name] {
			x := dodge(float64(sa.size), i, len(names), sas)
			if len(sa.reached) > 0 {
				xs = append(xs, x)
				st = append(st, spanOf(sa.reached))
			}
			if len(sa.missed) > 0 {
				censored = append(censored, plotter.XY{X: f.x(x), Y: slices.Max(sa.missed)})
			}
		}
		if len(xs) > 0 {
			if err := f.addSeries(name+": mean, bars min–max", xs, st, 1, 0, 0, clr,
				plotDashes[(i/len(plotPalette))%len(plotDashes)], plotGlyphs[i%len(plotGlyphs)]); err != nil {
				return nil, "", err
			}
		}
		if len(censored) > 0 {
			sc, err := plotter.NewScatter(censored)
			if err != nil {
				return nil, "", fmt.Errorf("report: plot %s: %w", title, err)
			}
			sc.Color, sc.Shape, sc.Radius = clr, hollowTriangle{}, vg.Points(5)
			f.p.Add(sc)
			f.addLegend(name+": 50% not reached by some or all seeds", sc)
		}
	}
	f.addReference(fmt.Sprintf("passes trained (%s)", passesText(top)), top, color.Gray{0x80}, vg.Points(1), 0)
	return f, fmt.Sprintf("Passes over the training data until greedy decoding extracts at least half the targets verbatim "+
		"(protocol %s, measured during training), against the base model's %s; a line per loss through the mean over "+
		"the seeds that reached 50%%, bars spanning their range (min–max); an open triangle at the passes trained: a size "+
		"where some seed had not reached 50%% when training ended (the table counts them). The losses' points are set "+
		"slightly apart at each size so that neither hides the other.", sas[0].protocol, sizeAxis(arms)), nil
}

// plotFirstPassVsSize draws the targets' exact match after one pass over
// the training data against the size, a line per series through the mean
// over seeds with bars over their range, and the held-out controls' mean
// as the floor.
func plotFirstPassVsSize(dir string, arms []*reportArm, sas []sizeArm) (*reportFigure, error) {
	if len(sas) == 0 {
		return nil, nil
	}
	f, caption, err := firstPassFigure(arms, sas)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(PlotsDir, "first-pass-vs-params.png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	return &reportFigure{File: file, Alt: f.p.Title.Text, Caption: caption}, nil
}

// firstPassFigure is plotFirstPassVsSize's figure and caption.
func firstPassFigure(arms []*reportArm, sas []sizeArm) (*plotFigure, string, error) {
	title := "Memorization after one pass, by model size"
	f := sizeFigure(title, "exact match after one pass (% of targets)", arms, sas)
	f.percentAxis()
	names, by := sizeSeries(sas)
	var held []float64
	for i, name := range names {
		var xs []float64
		var st []reportStat
		for _, sa := range by[name] {
			if len(sa.first) > 0 {
				xs = append(xs, dodge(float64(sa.size), i, len(names), sas))
				st = append(st, spanOf(sa.first))
			}
			held = append(held, sa.firstHeld...)
		}
		if len(xs) == 0 {
			continue
		}
		if err := f.addSeries(name+": mean, bars min–max", xs, st, 100, 0, 100, paletteColor(i),
			plotDashes[(i/len(plotPalette))%len(plotDashes)], plotGlyphs[i%len(plotGlyphs)]); err != nil {
			return nil, "", err
		}
	}
	caption := fmt.Sprintf("Exact match of the targets after one pass over the training data (protocol %s, measured "+
		"during training), against the base model's %s; a line per loss through the mean over seeds, bars spanning the "+
		"seeds' range (min–max), the losses' points set slightly apart at each size", sas[0].protocol, sizeAxis(arms))
	if len(held) > 0 {
		f.addReference("held-out passages (never trained), mean", 100*memorization.Mean(held), color.Gray{0x60}, vg.Points(1.5), 0)
		caption += "; dotted grey: the held-out controls' exact match at the same step, the floor"
	}
	return f, caption + ".", nil
}

// dodge moves the point of series i of n at size x a little along the
// log axis (2% of the sizes' span between neighbours), so that series at
// the same size do not hide each other.
func dodge(x float64, i, n int, sas []sizeArm) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, sa := range sas {
		lo, hi = min(lo, float64(sa.size)), max(hi, float64(sa.size))
	}
	return x * math.Exp((float64(i)-float64(n-1)/2)*0.02*math.Log(hi/lo))
}

// hollowTriangle is an open upward triangle: a value censored from above
// (the quantity is more than where it is drawn).
type hollowTriangle struct{}

func (hollowTriangle) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.2)})
	r := sty.Radius
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r*0.87, Y: pt.Y - r/2})
	p.Line(vg.Point{X: pt.X - r*0.87, Y: pt.Y - r/2})
	p.Close()
	c.Stroke(p)
}

// plotCurvesBySize draws, for a size study, the extraction curves of each
// loss in a figure of their own against passes over the training data: a
// line per size (the arm's mean over its seeds) in a band spanning the
// seeds' range (min–max), the held-out controls thin and dotted in the
// arm's colour, the 50% line the tables read. Every figure shares its
// axes, and a size keeps its colour across them. It draws nothing unless
// the curves span two sizes and every arm's seeds share their steps per
// pass.
func plotCurvesBySize(dir string, arms []*reportArm, curves []runCurve, sas []sizeArm) ([]reportFigure, error) {
	if len(sas) == 0 {
		return nil, nil
	}
	acs := armCurves(curves)
	var sizes []int64
	top := 0.0
	for _, ac := range acs {
		if ac.perPass <= 0 {
			return nil, nil
		}
		if sz := sizeOf(ac.run); !slices.Contains(sizes, sz) {
			sizes = append(sizes, sz)
		}
		top = max(top, ac.steps[len(ac.steps)-1]/float64(ac.perPass))
	}
	slices.Sort(sizes)
	names, _ := sizeSeries(sas)
	var figs []reportFigure
	for _, name := range names {
		title := "Memorization during training, " + name + " loss"
		f := newPlotFigure(title, "passes over the training data", "exact match (% of targets)")
		f.p.X.Min, f.p.X.Max = 0, top
		held := false
		for _, ac := range acs {
			if lossLabel(arms[ac.arm], arms) != name {
				continue
			}
			si := slices.Index(sizes, sizeOf(ac.run))
			clr := paletteColor(si)
			xs := make([]float64, len(ac.steps))
			tgt := make(plotter.XYs, len(ac.steps))
			for i, step := range ac.steps {
				xs[i] = step / float64(ac.perPass)
				tgt[i] = plotter.XY{X: xs[i], Y: 100 * ac.members[i].mean}
			}
			if ac.seeds > 1 {
				band, err := seedBand(xs, ac.members, plotLighten(clr, 0.75))
				if err != nil {
					return nil, fmt.Errorf("report: plot %s: %w", title, err)
				}
				f.p.Add(band)
			}
			line, points, err := plotter.NewLinePoints(tgt)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			line.Color, line.Width = clr, vg.Points(1.5)
			points.Color, points.Radius, points.Shape = clr, vg.Points(2.5), plotGlyphs[si%len(plotGlyphs)]
			f.p.Add(line, points)
			label := fmt.Sprintf("%s (%s): mean of %s", ac.run.Arm, units.ShortCount(sizeOf(ac.run)), reportPlural(ac.seeds, "seed"))
			f.addLegend(label, line, points)
			if len(ac.held) > 0 {
				ctl := make(plotter.XYs, len(xs))
				for i, x := range xs {
					ctl[i] = plotter.XY{X: x, Y: 100 * ac.held[i].mean}
				}
				hl, err := plotter.NewLine(ctl)
				if err != nil {
					return nil, fmt.Errorf("report: plot %s: %w", title, err)
				}
				hl.Color, hl.Width, hl.Dashes = plotLighten(clr, 0.35), vg.Points(1), []vg.Length{vg.Points(1), vg.Points(2)}
				f.p.Add(hl)
				held = true
			}
		}
		if held {
			hl, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}})
			hl.Color, hl.Width, hl.Dashes = color.Gray{0x80}, vg.Points(1), []vg.Length{vg.Points(1), vg.Points(2)}
			f.addLegend("held-out controls (thin dotted, the arm's colour)", hl)
		}
		f.addReference(fmt.Sprintf("%g%% exact match", 100*CurveThreshold), 100*CurveThreshold, color.Gray{0x80}, vg.Points(1), 0)
		f.percentAxis()
		f.p.X.Tick.Marker = plainTicks{}
		file := filepath.Join(PlotsDir, "memorization-vs-pass-"+plotSlug(name)+".png")
		if err := f.save(dir, file); err != nil {
			return nil, err
		}
		caption := fmt.Sprintf("Exact match of the targets against passes over the training data (optimizer steps ÷ the steps "+
			"of a pass), %s loss, measured during training by greedy decoding (protocol %s): a line per model size, the mean "+
			"over its seeds, the shaded band spanning the seeds' range (min–max)", name, sas[0].protocol)
		if held {
			caption += "; thin dotted lines: the held-out controls, never trained on"
		}
		caption += "; the grey dashed line is the 50% the tables read. The figures of every loss share their axes."
		figs = append(figs, reportFigure{File: file, Alt: title, Caption: caption})
	}
	return figs, nil
}
