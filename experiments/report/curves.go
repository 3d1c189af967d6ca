package report

import (
	"bytes"
	"fmt"
	"image/color"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/memtrain/memtrain/finetune"
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
	seed     int // the seed's index within the arm, for its dashes
	protocol string
	points   []curvePoint
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
		for si, r := range a.runs {
			ms, err := r.Metrics(dir)
			if err != nil {
				continue
			}
			if proto, pts := extractionCurve(ms); len(pts) > 0 {
				out = append(out, runCurve{run: r, arm: ai, seed: si, protocol: proto, points: pts})
			}
		}
	}
	return out
}

// plotExtractionCurves draws the targets' exact match against the step,
// one line per arm and seed (colour for the arm, dashes for the seed), the
// held-out controls thin and lighter in the arm's colour, and the 50%
// line the tables read.
func plotExtractionCurves(dir string, curves []runCurve, multi bool) (*reportFigure, error) {
	if len(curves) == 0 {
		return nil, nil
	}
	title := "Memorization during training"
	f := newPlotFigure(title, "optimizer step", "exact match (% of documents)")
	held := false
	for _, c := range curves {
		name := c.run.Arm
		if multi {
			name = c.run.Name()
		}
		clr := paletteColor(c.arm)
		tgt := make(plotter.XYs, len(c.points))
		for i, p := range c.points {
			tgt[i] = plotter.XY{X: float64(p.step), Y: 100 * p.members}
		}
		line, points, err := plotter.NewLinePoints(tgt)
		if err != nil {
			return nil, fmt.Errorf("report: plot %s: %w", title, err)
		}
		line.Color, line.Width = clr, vg.Points(1.5)
		line.Dashes = plotDashes[(c.seed+c.arm/len(plotPalette))%len(plotDashes)]
		points.Color, points.Radius = clr, vg.Points(3)
		f.p.Add(line, points)
		f.addLegend(name+" (targets)", line, points)
		var ctl plotter.XYs
		for _, p := range c.points {
			if p.hasHeld {
				ctl = append(ctl, plotter.XY{X: float64(p.step), Y: 100 * p.held})
			}
		}
		if len(ctl) > 0 {
			hl, hp, err := plotter.NewLinePoints(ctl)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			light := plotLighten(clr, 0.45)
			hl.Color, hl.Width, hl.Dashes = light, vg.Points(1), []vg.Length{vg.Points(2), vg.Points(2)}
			hp.Color, hp.Radius, hp.Shape = light, vg.Points(2.5), draw.CircleGlyph{}
			f.p.Add(hl, hp)
			f.addLegend(name+" (held-out)", hl, hp)
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
		caption += " and seed (dashes tell seeds apart)"
	}
	if held {
		caption += "; circles, lighter: the held-out controls, never trained on"
	}
	caption += "; the grey dotted line is the 50% the table's \"steps to reach\" column reads."
	return &reportFigure{File: file, Alt: title, Caption: caption}, nil
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
}
