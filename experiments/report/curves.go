package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/memorization"
)

// CurveThreshold is the exact match the tables' "steps to reach" column
// reads off the curves: 50% of the targets.
const CurveThreshold = 0.5

// curvePoint is one extraction measurement of a run during training
// (finetune's extraction block): its step, the epoch (1-based) the step
// trained in, and the exact match of the targets and the held-out
// controls (fractions; held false without controls).
type curvePoint struct {
	step, epoch   int
	members, held float64
	hasHeld       bool
	membersDocs   int
	heldDocs      int
}

// runCurve is a run's extraction curve.
type runCurve struct {
	run      *ArmResult
	arm      int // the arm's index, for its colour
	protocol string
	points   []curvePoint
	// perPass is the optimizer steps of one pass over the training data
	// (stepsPerPass), what a step is divided by to count passes.
	perPass int
}

// stepsPerPass is the number of optimizer steps in a run's first pass over
// its training data, read off its metrics (one line a step): the last
// step of epoch 0. A run that never left its first pass is taken to have
// ended with it (epochs: 1; a max_steps run shorter than a pass would be
// read as one pass). 0 without metrics.
func stepsPerPass(ms []finetune.Metrics) int {
	n := 0
	for _, m := range ms {
		if m.Epoch == 0 {
			n = max(n, m.Step)
		}
	}
	return n
}

// passes is a step of the run counted in passes over its training data
// (NaN when the steps per pass are unknown).
func (c *runCurve) passes(step int) float64 {
	if c.perPass <= 0 {
		return math.NaN()
	}
	return float64(step) / float64(c.perPass)
}

// reachPasses is reach in passes over the training data: the first
// measurement at which the targets' exact match is at least frac, as
// step ÷ steps per pass (2.25: a quarter into the third pass).
func (c *runCurve) reachPasses(frac float64) (float64, bool) {
	step, _, ok := reach(c.points, frac)
	if !ok || c.perPass <= 0 {
		return 0, false
	}
	return c.passes(step), true
}

// firstPass is the measurement that ends the first pass over the training
// data: the last one at or before its last step (the pass's own last step
// when extraction's every divides the steps per pass); false when the
// curve has none.
func (c *runCurve) firstPass() (curvePoint, bool) {
	var out curvePoint
	ok := false
	for _, p := range c.points {
		if c.perPass > 0 && p.step <= c.perPass {
			out, ok = p, true
		}
	}
	return out, ok
}

// trainedPasses is how far the curve goes: its last measurement in passes.
func (c *runCurve) trainedPasses() float64 {
	return c.passes(c.points[len(c.points)-1].step)
}

// extractionCurve is the extraction measurements of a run's metrics, in
// step order, and the protocol they were measured with.
func extractionCurve(ms []finetune.Metrics) (protocol string, pts []curvePoint) {
	for _, m := range ms {
		e := m.Extraction
		if e == nil {
			continue
		}
		protocol = e.Protocol
		p := curvePoint{step: m.Step, epoch: m.Epoch + 1, members: e.Members.Exact, membersDocs: e.Members.Documents}
		if e.NonMembers != nil {
			p.held, p.hasHeld, p.heldDocs = e.NonMembers.Exact, true, e.NonMembers.Documents
		}
		pts = append(pts, p)
	}
	return protocol, pts
}

// reach is the first measurement at which the targets' exact match is at
// least frac: its step and epoch; ok false when none is.
func reach(pts []curvePoint, frac float64) (step, epoch int, ok bool) {
	for _, p := range pts {
		if p.members >= frac {
			return p.step, p.epoch, true
		}
	}
	return 0, 0, false
}

// reachCell is reach as a table cell: "12 (3)", steps and epochs, or —.
func reachCell(pts []curvePoint, frac float64) string {
	step, epoch, ok := reach(pts, frac)
	if !ok {
		return reportDash
	}
	return fmt.Sprintf("%d (%d)", step, epoch)
}

// readCurves reads the extraction curve of every run that measured one.
// Runs whose metrics cannot be read are left out (the loss plot warns of
// them).
func readCurves(dir string, arms []*reportArm) []runCurve {
	var out []runCurve
	for ai, a := range arms {
		for _, r := range a.runs {
			ms, err := r.Metrics(dir)
			if err != nil {
				continue
			}
			if proto, pts := extractionCurve(ms); len(pts) > 0 {
				out = append(out, runCurve{run: r, arm: ai, protocol: proto, points: pts, perPass: stepsPerPass(ms)})
			}
		}
	}
	return out
}

// armCurve is an arm's extraction curve over its seeds: at each step that
// every seed measured, the mean of the seeds' exact match and its range
// (min–max), for the targets and (when measured) the held-out controls.
type armCurve struct {
	run     *ArmResult // the arm's first seed: its name and description
	arm     int        // the arm's index, for its colour
	seeds   int
	perPass int // the steps of a pass, when every seed's are the same (else 0)
	steps   []float64
	members []seedRange
	held    []seedRange // empty without held-out controls
}

// seedRange is a mean over seeds with the range of the seeds' values.
type seedRange struct{ mean, lo, hi float64 }

func rangeOf(vs []float64) seedRange {
	r := seedRange{mean: memorization.Mean(vs), lo: vs[0], hi: vs[0]}
	for _, v := range vs[1:] {
		r.lo, r.hi = min(r.lo, v), max(r.hi, v)
	}
	return r
}

// armCurves gathers the runs' curves by arm: the steps every seed of an
// arm measured (seeds of one arm share their schedule, so these are
// normally all of them), with the mean and range over seeds.
func armCurves(curves []runCurve) []armCurve {
	var out []armCurve
	for i := 0; i < len(curves); {
		j := i
		for j < len(curves) && curves[j].arm == curves[i].arm {
			j++
		}
		group := curves[i:j]
		i = j
		ac := armCurve{run: group[0].run, arm: group[0].arm, seeds: len(group), perPass: group[0].perPass}
		for _, c := range group {
			if c.perPass != ac.perPass {
				ac.perPass = 0
			}
		}
		held := true
		for _, c := range group {
			held = held && slices.ContainsFunc(c.points, func(p curvePoint) bool { return p.hasHeld })
		}
		for _, p := range group[0].points {
			var mem, ctl []float64
			for _, c := range group {
				at := slices.IndexFunc(c.points, func(q curvePoint) bool { return q.step == p.step })
				if at < 0 {
					break
				}
				mem = append(mem, c.points[at].members)
				if c.points[at].hasHeld {
					ctl = append(ctl, c.points[at].held)
				}
			}
			if len(mem) < len(group) {
				continue // a step some seed did not measure
			}
			ac.steps = append(ac.steps, float64(p.step))
			ac.members = append(ac.members, rangeOf(mem))
			if held && len(ctl) == len(group) {
				ac.held = append(ac.held, rangeOf(ctl))
			}
		}
		if len(ac.held) != len(ac.steps) {
			ac.held = nil
		}
		if len(ac.steps) > 0 {
			out = append(out, ac)
		}
	}
	return out
}

// plotExtractionCurves draws the targets' exact match against the step,
// one line per arm: with several seeds their mean, in a shaded band
// spanning the seeds' range (min–max); the held-out controls' mean thin
// and lighter in the arm's colour; and the 50% line the tables read.
func plotExtractionCurves(dir string, curves []runCurve) (*reportFigure, error) {
	arms := armCurves(curves)
	if len(arms) == 0 {
		return nil, nil
	}
	title := "Memorization during training"
	f := newPlotFigure(title, "optimizer step", "exact match (% of targets)")
	held, multi := false, false
	for _, ac := range arms {
		clr := paletteColor(ac.arm)
		dashes := plotDashes[(ac.arm/len(plotPalette))%len(plotDashes)]
		tgt := make(plotter.XYs, len(ac.steps))
		for i, x := range ac.steps {
			tgt[i] = plotter.XY{X: x, Y: 100 * ac.members[i].mean}
		}
		line, points, err := plotter.NewLinePoints(tgt)
		if err != nil {
			return nil, fmt.Errorf("report: plot %s: %w", title, err)
		}
		line.Color, line.Width, line.Dashes = clr, vg.Points(1.5), dashes
		points.Color, points.Radius = clr, vg.Points(3)
		name := ac.run.Arm + " (targets)"
		thumbs := []plot.Thumbnailer{line, points}
		if ac.seeds > 1 {
			multi = true
			band, err := seedBand(ac.steps, ac.members, plotLighten(clr, 0.7))
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			f.p.Add(band)
			name = fmt.Sprintf("%s (targets: mean of %d seeds, band min–max)", ac.run.Arm, ac.seeds)
			thumbs = append([]plot.Thumbnailer{swatch{fill: plotLighten(clr, 0.7), edge: plotLighten(clr, 0.7)}}, thumbs...)
		}
		f.p.Add(line, points)
		f.addLegend(name, thumbs...)
		if len(ac.held) > 0 {
			ctl := make(plotter.XYs, len(ac.steps))
			for i, x := range ac.steps {
				ctl[i] = plotter.XY{X: x, Y: 100 * ac.held[i].mean}
			}
			hl, hp, err := plotter.NewLinePoints(ctl)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			light := plotLighten(clr, 0.45)
			hl.Color, hl.Width, hl.Dashes = light, vg.Points(1), []vg.Length{vg.Points(2), vg.Points(2)}
			hp.Color, hp.Radius, hp.Shape = light, vg.Points(2.5), draw.CircleGlyph{}
			f.p.Add(hl, hp)
			hname := ac.run.Arm + " (held-out)"
			if ac.seeds > 1 {
				hname = ac.run.Arm + " (held-out, mean)"
			}
			f.addLegend(hname, hl, hp)
			held = true
		}
	}
	f.addReference(fmt.Sprintf("%g%% exact match", 100*CurveThreshold), 100*CurveThreshold, color.Gray{0x80}, vg.Points(1), 0)
	f.percentAxis()
	f.p.X.Tick.Marker = plainTicks{}
	file := filepath.Join(PlotsDir, "memorization-vs-step.png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	caption := "Exact match of the targets (members) against the optimizer step, measured during training by greedy decoding " +
		"(protocol " + curves[0].protocol + "), one line per arm"
	if multi {
		caption += "; an arm with several seeds is drawn as their mean, the shaded band spanning the seeds' range (min–max) at each step"
	}
	if held {
		caption += "; circles, lighter: the held-out controls, never trained on"
	}
	caption += "; the grey dotted line is the 50% the table's \"steps to reach\" column reads."
	return &reportFigure{File: file, Alt: title, Caption: caption}, nil
}

// seedBand is the shaded range of a curve over seeds: a polygon along the
// seeds' maxima and back along their minima, without an outline.
func seedBand(xs []float64, rs []seedRange, fill color.Color) (*plotter.Polygon, error) {
	pts := make(plotter.XYs, 0, 2*len(xs))
	for i, x := range xs {
		pts = append(pts, plotter.XY{X: x, Y: 100 * rs[i].hi})
	}
	for i := len(xs) - 1; i >= 0; i-- {
		pts = append(pts, plotter.XY{X: xs[i], Y: 100 * rs[i].lo})
	}
	poly, err := plotter.NewPolygon(pts)
	if err != nil {
		return nil, err
	}
	poly.Color = fill
	poly.LineStyle.Width = 0
	return poly, nil
}

// curveTable is report.md's section on the extraction curves: per run,
// the measurements, the steps (and epochs) to reach 50% exact match of
// the targets, and the last measurement.
func curveTable(b *bytes.Buffer, curves []runCurve) {
	if len(curves) == 0 {
		return
	}
	b.WriteString("## Memorization during training\n\n")
	b.WriteString("Greedy extraction measured every few steps while the arm trained (the `extraction` block of its training " +
		"configuration). Steps (epochs) to reach 50% is the first measured step at which at least half the targets were " +
		"extracted verbatim, with the epoch (pass over the training data, from 1) it fell in; — when no measurement reached it.\n\n")
	mdHeader(b, "arm", "seed", "protocol", "measurements", "steps (epochs) to reach 50% exact match", "last step", "exact match at the last step", "held-out exact match at the last step")
	for _, c := range curves {
		last := c.points[len(c.points)-1]
		heldCell := reportDash
		if last.hasHeld {
			heldCell = strconv.FormatFloat(100*last.held, 'f', 1, 64) + "%"
		}
		mdRow(b, c.run.Arm, strconv.FormatUint(c.run.Seed, 10), c.protocol, strconv.Itoa(len(c.points)), reachCell(c.points, CurveThreshold),
			strconv.Itoa(last.step), strconv.FormatFloat(100*last.members, 'f', 1, 64)+"%", heldCell)
	}
	b.WriteString("\n")
	// Arms of several seeds: the steps to reach 50% and the last
	// measurement aggregated as the protocol tables are.
	var multi []runCurve
	for i := 0; i < len(curves); {
		j := i
		for j < len(curves) && curves[j].arm == curves[i].arm {
			j++
		}
		if j-i > 1 {
			multi = append(multi, curves[i:j]...)
		}
		i = j
	}
	if len(multi) == 0 {
		return
	}
	b.WriteString("Over seeds (mean ± sample standard deviation; steps to reach 50% over the seeds that reached it):\n\n")
	mdHeader(b, "arm", "seeds", "seeds that reached 50%", "steps to reach 50% exact match", "epochs to reach 50% exact match", "exact match at the last step")
	for i := 0; i < len(multi); {
		j := i
		for j < len(multi) && multi[j].arm == multi[i].arm {
			j++
		}
		var steps, epochs, last []float64
		for _, c := range multi[i:j] {
			if step, epoch, ok := reach(c.points, CurveThreshold); ok {
				steps, epochs = append(steps, float64(step)), append(epochs, float64(epoch))
			}
			last = append(last, c.points[len(c.points)-1].members)
		}
		mdRow(b, multi[i].run.Arm, strconv.Itoa(j-i), fmt.Sprintf("%d of %d", len(steps), j-i),
			statOfValues(steps).num(acrossSeeds, 1), statOfValues(epochs).num(acrossSeeds, 1), statOfValues(last).pct(acrossSeeds))
		i = j
	}
	b.WriteString("\n")
}
