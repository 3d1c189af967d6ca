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
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// Every plot is one PNG of this size: 7 × 4 inches at 150 dots per inch
// (1050 × 600 pixels), large enough for 10-point text to stay legible when
// a Markdown viewer scales it down.
const (
	plotWidth  = 7 * vg.Inch
	plotHeight = 4 * vg.Inch
	plotDPI    = 150
)

// plotPalette is Okabe and Ito's colour-blind-safe palette, in an order
// that keeps neighbouring series apart (yellow, weak on white, comes last).
var plotPalette = []color.Color{
	color.RGBA{0x00, 0x72, 0xB2, 0xFF}, // blue
	color.RGBA{0xD5, 0x5E, 0x00, 0xFF}, // vermillion
	color.RGBA{0x00, 0x9E, 0x73, 0xFF}, // bluish green
	color.RGBA{0xE6, 0x9F, 0x00, 0xFF}, // orange
	color.RGBA{0xCC, 0x79, 0xA7, 0xFF}, // reddish purple
	color.RGBA{0x56, 0xB4, 0xE9, 0xFF}, // sky blue
	color.RGBA{0x00, 0x00, 0x00, 0xFF}, // black
	color.RGBA{0xF0, 0xE4, 0x42, 0xFF}, // yellow
}

// plotDashes tell apart series that share a colour (seeds of an arm, the
// palette's second round).
var plotDashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)},
}

var plotGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.PyramidGlyph{}}

func paletteColor(i int) color.Color { return plotPalette[i%len(plotPalette)] }

// The standard arm's reference lines are dotted.
var standardDash = []vg.Length{vg.Points(2), vg.Points(2)}

// reportFigure is one plot of the report.
type reportFigure struct {
	File    string // relative to the experiment's folder: plots/NAME.png
	Alt     string // the image's alternative text
	Caption string
}

// plotFigure is a plot with its legend kept apart, so that the legend is drawn
// under the data, never over it.
type plotFigure struct {
	p       *plot.Plot
	entries int
	names   []string             // the legend's entries, in order
	thumbs  [][]plot.Thumbnailer // and each entry's samples
	// logX draws x on a log scale by plotting log x on a linear axis:
	// gonum's LogScale centres the axis label at the arithmetic mean of
	// the range, which pushes it off the plot.
	logX bool
}

// x maps a data value to the x axis.
func (f *plotFigure) x(v float64) float64 {
	if f.logX {
		return math.Log(v)
	}
	return v
}

// setLogX puts x on a log scale over [lo, hi] with a margin of a fraction
// of the span, so that the end points stay off the frame.
func (f *plotFigure) setLogX(lo, hi float64) {
	f.logX = true
	span := math.Log(hi / lo)
	f.p.X.Min, f.p.X.Max = math.Log(lo)-0.08*span, math.Log(hi)+0.08*span
}

var plotFont = font.Font{Typeface: "Liberation", Variant: "Sans"}

func newPlotFigure(title, xLabel, yLabel string) *plotFigure {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font = font.From(plotFont, 14)
	p.Title.Padding = vg.Points(6)
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = font.From(plotFont, 12)
		ax.Tick.Label.Font = font.From(plotFont, 10)
	}
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	grid := plotter.NewGrid()
	grid.Vertical.Color = color.Gray{0xE0}
	grid.Horizontal.Color = color.Gray{0xE0}
	p.Add(grid)
	return &plotFigure{p: p}
}

func (f *plotFigure) addLegend(name string, thumbs ...plot.Thumbnailer) {
	f.entries++
	f.names = append(f.names, name)
	f.thumbs = append(f.thumbs, thumbs)
}

// legendColumns lays the legend's entries out in n columns (filled down,
// then across) at the given font size.
func (f *plotFigure) legendColumns(n int, size vg.Length) []plot.Legend {
	rows := (f.entries + n - 1) / n
	cols := make([]plot.Legend, 0, n)
	for c := 0; c*rows < f.entries; c++ {
		leg := plot.NewLegend()
		leg.TextStyle.Font = font.From(plotFont, size)
		leg.Top, leg.Left = true, true
		leg.Padding = vg.Points(3)
		for i := c * rows; i < min((c+1)*rows, f.entries); i++ {
			leg.Add(f.names[i], f.thumbs[i]...)
		}
		cols = append(cols, leg)
	}
	return cols
}

// percentAxis fixes the y axis to 0–100 %, so that plots of a sweep share
// a scale and a reference line always shows.
func (f *plotFigure) percentAxis() {
	f.p.Y.Min, f.p.Y.Max = 0, 100
	f.p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 25, Label: "25"},
		{Value: 50, Label: "50"}, {Value: 75, Label: "75"}, {Value: 100, Label: "100"}}
}

// render draws the figure as a PNG and as an SVG (for a paper: it scales):
// the plot above and, when it has entries, the legend in columns under it
// (where it hides no data and takes no width from the plot).
func (f *plotFigure) render() (png, svg []byte, err error) {
	c := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))
	f.draw(draw.New(c))
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&b); err != nil {
		return nil, nil, err
	}
	s := vgsvg.New(plotWidth, plotHeight)
	f.draw(draw.New(s))
	var sb bytes.Buffer
	if _, err := s.WriteTo(&sb); err != nil {
		return nil, nil, err
	}
	return b.Bytes(), sb.Bytes(), nil
}

// draw draws the figure on dc: the legend under the plot in as few rows
// as fit the width (up to four columns; the font shrunk down to 8 points
// before a column is given up).
func (f *plotFigure) draw(dc draw.Canvas) {
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if f.entries == 0 {
		f.p.Draw(dc)
		return
	}
	pad := vg.Points(6)
	width := dc.Size().X - 2*pad
	var cols []plot.Legend
	var widths []vg.Length
	var height vg.Length
layout:
	for n := min(4, f.entries); n >= 1; n-- {
		for _, size := range []float64{10, 9, 8} {
			cols = f.legendColumns(n, vg.Points(size))
			widths, height = widths[:0], 0
			var total vg.Length
			for _, leg := range cols {
				r := leg.Rectangle(dc).Size()
				widths = append(widths, r.X)
				total += r.X + pad
				height = max(height, r.Y)
			}
			if total <= width {
				break layout
			}
		}
	}
	f.p.Draw(draw.Crop(dc, 0, 0, height+2*pad, 0))
	x := dc.Min.X + pad
	for i, leg := range cols {
		leg.Draw(draw.Crop(dc, x-dc.Min.X, -(dc.Max.X - x - widths[i]), pad, -(dc.Size().Y - height - 2*pad)))
		x += widths[i] + pad
	}
}

// save writes the figure as file (a .png) and beside it the same name
// with .svg.
func (f *plotFigure) save(dir, file string) error {
	png, svg, err := f.render()
	if err != nil {
		return fmt.Errorf("report: plot %s: %w", file, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, file), png); err != nil {
		return fmt.Errorf("report: plot %s: %w", file, err)
	}
	svgFile := strings.TrimSuffix(file, filepath.Ext(file)) + ".svg"
	if err := atomicfile.WriteFile(filepath.Join(dir, svgFile), svg); err != nil {
		return fmt.Errorf("report: plot %s: %w", svgFile, err)
	}
	return nil
}

// valueTicks marks the x axis at the data's own values (k, parameter
// counts) rather than at round numbers, which may fall between them.
// Values too close to the previous labelled one, for the axis's scale
// and range (set before), keep an unlabelled tick: the labels would
// overlap.
func (f *plotFigure) valueTicks(xs []float64, label func(float64) string) plot.ConstantTicks {
	// The data area is at least this wide: the plot less its y axis and a
	// legend column.
	const dataWidth = 4 * vg.Inch
	ax := &f.p.X
	sty := ax.Tick.Label
	ticks := make(plot.ConstantTicks, len(xs))
	right := vg.Length(math.Inf(-1))
	for i, x := range xs {
		ticks[i].Value = f.x(x)
		text := label(x)
		w := sty.Width(text)
		pos := vg.Length(ax.Scale.Normalize(ax.Min, ax.Max, f.x(x))) * dataWidth
		if pos-w/2 < right+sty.Width(" ") {
			continue
		}
		ticks[i].Label = text
		right = pos + w/2
	}
	return ticks
}

// errPoints are points with asymmetric y errors, for plotter.NewYErrorBars.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// addSeries draws a line through (x, stat) with points and error bars
// (the stats' [Lo, Hi], clamped to [lo, hi] when lo < hi), all scaled by
// scale (100 for percentages), and gives it a legend entry.
func (f *plotFigure) addSeries(name string, xs []float64, st []reportStat, scale, lo, hi float64, clr color.Color, dashes []vg.Length, glyph draw.GlyphDrawer) error {
	pts := errPoints{XYs: make(plotter.XYs, len(xs)), YErrors: make(plotter.YErrors, len(xs))}
	for i, x := range xs {
		m, l, h := scale*st[i].Mean, scale*st[i].Lo, scale*st[i].Hi
		if lo < hi {
			l, h = max(l, lo), min(h, hi)
		}
		pts.XYs[i] = plotter.XY{X: f.x(x), Y: m}
		pts.YErrors[i].Low, pts.YErrors[i].High = max(m-l, 0), max(h-m, 0)
	}
	line, points, err := plotter.NewLinePoints(pts.XYs)
	if err != nil {
		return fmt.Errorf("report: plot series %q: %w", name, err)
	}
	line.Color, line.Width, line.Dashes = clr, vg.Points(1.5), dashes
	points.Color, points.Shape, points.Radius = clr, glyph, vg.Points(3.5)
	bars, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return fmt.Errorf("report: plot series %q: %w", name, err)
	}
	bars.Color, bars.Width, bars.CapWidth = clr, vg.Points(1), vg.Points(6)
	f.p.Add(line, bars, points)
	f.addLegend(name, line, points)
	return nil
}

// addReference draws a horizontal dotted line at y across the plot. The
// i-th reference's dots are shifted by half a period from the previous
// one's, so that references at the same height interleave instead of
// hiding each other.
func (f *plotFigure) addReference(name string, y float64, clr color.Color, width vg.Length, i int) {
	fn := plotter.NewFunction(func(float64) float64 { return y })
	fn.Color, fn.Width, fn.Dashes = clr, width, standardDash
	fn.DashOffs = vg.Length(i) * (standardDash[0] + standardDash[1]) / 2
	fn.Samples = 2
	f.p.Add(fn)
	f.addLegend(name, fn)
}

// swatch is a legend thumbnail for filled shapes (box plots have none).
type swatch struct{ fill, edge color.Color }

func (s swatch) Thumbnail(c *draw.Canvas) {
	h := c.Max.Y - c.Min.Y
	r := vg.Rectangle{Min: vg.Point{X: c.Min.X + h*0.1, Y: c.Min.Y + h*0.1}, Max: vg.Point{X: c.Max.X - h*0.1, Y: c.Max.Y - h*0.1}}
	c.SetColor(s.fill)
	c.Fill(r.Path())
	c.SetLineStyle(draw.LineStyle{Color: s.edge, Width: vg.Points(0.8)})
	c.Stroke(r.Path())
}

// plotSlug makes a name safe in a file name.
func plotSlug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, s)
}

func plotModelName(m string) string { return filepath.Base(filepath.Clean(m)) }

// writePlots draws every plot that the experiment's arms allow and returns
// them in the order the report shows them. Missing per-run inputs
// (metrics.jsonl, docs.jsonl) are warnings: the plots are drawn without
// them.
func writePlots(dir string, arms []*reportArm, protos []*reportProtocol, docs evalDocs, reps []repetitionSet, warnings *[]string) ([]reportFigure, error) {
	var figs []reportFigure
	for _, set := range reps {
		fig, err := plotMemorizationVsRepetitions(dir, set)
		if err != nil {
			return nil, err
		}
		if fig != nil {
			figs = append(figs, *fig)
		}
	}
	for _, p := range protos {
		fs, err := plotMemorizationVsK(dir, arms, p)
		if err != nil {
			return nil, err
		}
		figs = append(figs, fs...)
	}
	for _, p := range protos {
		fig, err := plotMemorizationVsParams(dir, arms, p)
		if err != nil {
			return nil, err
		}
		if fig != nil {
			figs = append(figs, *fig)
		}
	}
	for _, p := range protos {
		fig, err := plotRougeDistribution(dir, arms, p, docs)
		if err != nil {
			return nil, err
		}
		if fig != nil {
			figs = append(figs, *fig)
		}
	}
	fig, err := plotTrainingLoss(dir, arms, warnings)
	if err != nil {
		return nil, err
	}
	if fig != nil {
		figs = append(figs, *fig)
	}
	return figs, nil
}

// rougeOf returns the ROUGE-L the plots of p show: over words when the
// evaluation decoded text, the paper's measure, else over token ids.
func (p *reportProtocol) rougeOf() (func(*memorization.Group) memorization.Interval, string) {
	if p.Words {
		return func(g *memorization.Group) memorization.Interval { return g.RougeLWords }, "words"
	}
	return func(g *memorization.Group) memorization.Interval { return g.RougeLTokens }, "tokens"
}

// intervalNote says what the error bars of a plot of these arms are.
func intervalNote(arms []*reportArm, p *reportProtocol) string {
	level := 95.0
	if p.Bootstrap.Level > 0 {
		level = 100 * p.Bootstrap.Level
	}
	single, multi := false, false
	for _, a := range arms {
		single = single || len(a.runs) == 1
		multi = multi || len(a.runs) > 1
	}
	ci := fmt.Sprintf("%g%% bootstrap CIs over documents", level)
	switch {
	case single && multi:
		return "bars: " + ci + " (one seed) or ± s.d. over seeds"
	case multi:
		return "bars: ± s.d. over seeds"
	}
	return "bars: " + ci
}

func (p *reportProtocol) prefixNote() string {
	if p.Name == "goldfish" {
		return fmt.Sprintf("protocol %s: each document's last %d tokens decoded from the rest", p.Key, p.SuffixLen)
	}
	return fmt.Sprintf("protocol %s: %d tokens decoded from a %d-token prefix", p.Key, p.SuffixLen, p.plotK())
}

// plotMemorizationVsK draws, for each base model with goldfish arms,
// the members' exact match and ROUGE-L against goldfish k, with the
// standard arm of the same model as dotted reference lines — except in a
// study of several models that trains one k, where each figure would
// have one x value.
func plotMemorizationVsK(dir string, arms []*reportArm, p *reportProtocol) ([]reportFigure, error) {
	k := p.plotK()
	rouge, unit := p.rougeOf()
	has := func(a *reportArm) bool { return len(a.groups(p.Key, k, true)) > 0 }
	var models []string
	for _, a := range arms {
		if a.isGoldfish() && has(a) && !slices.Contains(models, a.ModelLabel()) {
			models = append(models, a.ModelLabel())
		}
	}
	var figs []reportFigure
	for _, model := range models {
		// Families of goldfish arms that differ only in k.
		type family struct {
			label string
			arms  []*reportArm
		}
		var fams []*family
		var std *reportArm
		var used []*reportArm
		for _, a := range arms {
			if a.ModelLabel() != model || !has(a) {
				continue
			}
			if a.isStandard() {
				if std == nil {
					std = a
				}
				continue
			}
			if !a.isGoldfish() {
				continue
			}
			label := a.Strategy
			if a.H > 0 {
				label += " h=" + strconv.Itoa(a.H)
			}
			i := slices.IndexFunc(fams, func(f *family) bool { return f.label == label })
			if i < 0 {
				fams = append(fams, &family{label: label})
				i = len(fams) - 1
			}
			fams[i].arms = append(fams[i].arms, a)
			used = append(used, a)
		}
		title := "Memorization against goldfish k (" + p.Key + ")"
		if len(models) > 1 {
			title = "Memorization against k: " + plotModelName(model) + " (" + p.Key + ")"
		}
		f := newPlotFigure(title, "goldfish k (1 in k tokens dropped)", "members memorized (%)")
		f.percentAxis()
		// The axis first: a log axis changes the coordinates of the series.
		var ks []float64
		for _, fam := range fams {
			for _, a := range fam.arms {
				if !slices.Contains(ks, float64(a.K)) {
					ks = append(ks, float64(a.K))
				}
			}
		}
		slices.Sort(ks)
		if len(ks) == 1 && len(models) > 1 {
			// One k and several models: a study of size, not of k. A figure
			// a model with one x value says nothing the figures against
			// model size (sizes.go, plotMemorizationVsParams) do not.
			continue
		}
		if len(ks) == 1 {
			// One k: a figure against k would have one x value. The arms
			// side by side say what it would.
			fig, err := plotMemorizationByArm(dir, model, std, used, p, len(models) > 1)
			if err != nil {
				return nil, err
			}
			figs = append(figs, fig)
			continue
		}
		switch lo, hi := ks[0], ks[len(ks)-1]; {
		case lo > 0 && hi/lo >= 4:
			// k sweeps are usually geometric (2, 4, 8, … 128): a log axis
			// spaces them evenly.
			f.setLogX(lo, hi)
			f.p.X.Label.Text += ", log scale"
		default:
			f.p.X.Min, f.p.X.Max = lo-0.5, hi+0.5
		}
		f.p.X.Tick.Marker = f.valueTicks(ks, func(x float64) string { return strconv.Itoa(int(x)) })
		metrics := []struct {
			label string
			get   func(*memorization.Group) memorization.Interval
		}{{"exact match (% of targets)", exactOf}, {"ROUGE-L F1, " + unit + " (%)", rouge}}
		for fi, fam := range fams {
			suffix := ""
			if len(fams) > 1 {
				suffix = ", " + fam.label
			}
			for mi, m := range metrics {
				var xs []float64
				var st []reportStat
				for _, a := range fam.arms {
					xs = append(xs, float64(a.K))
					st = append(st, groupStat(a.groups(p.Key, k, true), m.get))
				}
				clr := paletteColor(2*fi + mi)
				if err := f.addSeries(m.label+suffix, xs, st, 100, 0, 100, clr, plotDashes[(mi+2*fi/len(plotPalette))%len(plotDashes)], plotGlyphs[mi]); err != nil {
					return nil, err
				}
			}
		}
		if std != nil {
			for mi, m := range metrics {
				s := groupStat(std.groups(p.Key, k, true), m.get)
				// With one family the reference shares its metric's colour;
				// with several, black and grey keep it apart from them.
				clr := paletteColor(mi)
				if len(fams) > 1 {
					clr = []color.Color{color.Black, color.Gray{0x80}}[mi]
				}
				name := "standard: exact match"
				if mi == 1 {
					name = "standard: ROUGE-L"
				}
				f.addReference(name, 100*s.Mean, clr, vg.Points(1.5), mi)
			}
		}
		// The held-out floor: the ROUGE-L of never-trained documents, what
		// no memorization reads as (their exact match is 0, the axis).
		floor, n := 0.0, 0
		for _, a := range append(slices.Clone(used), std) {
			if a == nil {
				continue
			}
			if held := a.groups(p.Key, k, false); len(held) > 0 {
				floor += groupStat(held, rouge).Mean
				n++
			}
		}
		if n > 0 {
			f.addReference("held-out floor: ROUGE-L", 100*floor/float64(n), color.Gray{0x99}, vg.Points(1.2), 2)
		}
		file := "memorization-vs-k-" + plotSlug(p.Key)
		if len(models) > 1 {
			file += "-" + plotSlug(plotModelName(model))
		}
		file = filepath.Join(PlotsDir, file+".png")
		if err := f.save(dir, file); err != nil {
			return nil, err
		}
		ref := "no standard arm of this model to compare with"
		if std != nil {
			ref = "dotted: the standard arm " + std.Arm
		}
		if n > 0 {
			ref += "; grey: the held-out floor, the ROUGE-L of never-trained documents"
		}
		figs = append(figs, reportFigure{File: file, Alt: title,
			Caption: fmt.Sprintf("Targets memorized against goldfish k, model %s (%s); %s; %s.",
				model, p.prefixNote(), ref, intervalNote(used, p))})
	}
	return figs, nil
}

// plotMemorizationByArm draws, for a study of one goldfish k, each arm's
// members memorized (exact match, ROUGE-L) as bars side by side, the
// standard arm first, with the held-out floor.
func plotMemorizationByArm(dir, model string, std *reportArm, gold []*reportArm, p *reportProtocol, several bool) (reportFigure, error) {
	k := p.plotK()
	rouge, unit := p.rougeOf()
	arms := gold
	if std != nil {
		arms = append([]*reportArm{std}, gold...)
	}
	title := "Memorization by arm (" + p.Key + ")"
	if several {
		title = "Memorization by arm: " + plotModelName(model) + " (" + p.Key + ")"
	}
	f := newPlotFigure(title, "", "members memorized (%)")
	f.percentAxis()
	names := make([]string, len(arms))
	for i, a := range arms {
		names[i] = a.Arm
	}
	f.p.NominalX(names...)
	f.p.X.Min, f.p.X.Max = -0.7, float64(len(arms))-0.3
	metrics := []struct {
		label string
		get   func(*memorization.Group) memorization.Interval
	}{{"exact match (% of targets)", exactOf}, {"ROUGE-L F1, " + unit + " (%)", rouge}}
	width := vg.Points(28)
	for mi, m := range metrics {
		vals := make(plotter.Values, len(arms))
		for i, a := range arms {
			vals[i] = 100 * groupStat(a.groups(p.Key, k, true), m.get).Mean
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return reportFigure{}, fmt.Errorf("report: plot %s: %w", title, err)
		}
		bars.Color, bars.LineStyle.Width = paletteColor(mi), 0
		bars.Offset = vg.Length(float64(mi)-0.5) * width
		f.p.Add(bars)
		f.addLegend(m.label, bars)
	}
	floor, n := 0.0, 0
	for _, a := range arms {
		if held := a.groups(p.Key, k, false); len(held) > 0 {
			floor += groupStat(held, rouge).Mean
			n++
		}
	}
	if n > 0 {
		f.addReference("held-out floor: ROUGE-L", 100*floor/float64(n), color.Gray{0x99}, vg.Points(1.2), 2)
	}
	file := "memorization-by-arm-" + plotSlug(p.Key)
	if several {
		file += "-" + plotSlug(plotModelName(model))
	}
	file = filepath.Join(PlotsDir, file+".png")
	if err := f.save(dir, file); err != nil {
		return reportFigure{}, err
	}
	caption := fmt.Sprintf("Targets memorized by each arm, model %s, goldfish k = %d (%s); bars: the mean over seeds",
		model, gold[0].K, p.prefixNote())
	if std == nil {
		caption += "; no standard arm of this model to compare with"
	}
	if n > 0 {
		caption += "; grey: the held-out floor, the ROUGE-L of never-trained documents"
	}
	return reportFigure{File: file, Alt: title, Caption: caption + "."}, nil
}

// plotMemorizationVsParams draws the members' exact match against the base
// model's parameter count, one series for the standard loss and one per
// goldfish setting, when the arms use base models of at least two sizes.
func plotMemorizationVsParams(dir string, arms []*reportArm, p *reportProtocol) (*reportFigure, error) {
	k := p.plotK()
	type series struct {
		label string
		arms  []*reportArm
	}
	var ss []*series
	var sizes []float64
	var used []*reportArm
	for _, a := range arms {
		if len(a.groups(p.Key, k, true)) == 0 || sizeOf(a.ArmResult) <= 0 {
			continue
		}
		label := lossLabel(a, arms)
		i := slices.IndexFunc(ss, func(s *series) bool { return s.label == label })
		if i < 0 {
			ss = append(ss, &series{label: label})
			i = len(ss) - 1
		}
		// One point per size and series: the first arm (in report order).
		if slices.ContainsFunc(ss[i].arms, func(b *reportArm) bool { return sizeOf(b.ArmResult) == sizeOf(a.ArmResult) }) {
			continue
		}
		ss[i].arms = append(ss[i].arms, a)
		used = append(used, a)
		if !slices.Contains(sizes, float64(sizeOf(a.ArmResult))) {
			sizes = append(sizes, float64(sizeOf(a.ArmResult)))
		}
	}
	if len(sizes) < 2 {
		return nil, nil
	}
	slices.Sort(sizes)
	title := "Memorization against model size (" + p.Key + ")"
	f := newPlotFigure(title, sizeAxis(used)+" (log scale)", "exact match after training (% of targets)")
	f.percentAxis()
	f.setLogX(sizes[0], sizes[len(sizes)-1])
	for i, s := range ss {
		slices.SortFunc(s.arms, func(a, b *reportArm) int { return cmp.Compare(sizeOf(a.ArmResult), sizeOf(b.ArmResult)) })
		xs := make([]float64, len(s.arms))
		st := make([]reportStat, len(s.arms))
		for j, a := range s.arms {
			xs[j] = float64(sizeOf(a.ArmResult))
			st[j] = groupStat(a.groups(p.Key, k, true), exactOf)
		}
		if err := f.addSeries(s.label, xs, st, 100, 0, 100, paletteColor(i), plotDashes[(i/len(plotPalette))%len(plotDashes)], plotGlyphs[i%len(plotGlyphs)]); err != nil {
			return nil, err
		}
	}
	f.p.X.Tick.Marker = f.valueTicks(sizes, func(x float64) string { return units.ShortCount(int64(x)) })
	file := filepath.Join(PlotsDir, "memorization-vs-params-"+plotSlug(p.Key)+".png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	return &reportFigure{File: file, Alt: title,
		Caption: fmt.Sprintf("Exact match of the targets at the end of training against the base model's %s (%s; %s).",
			sizeAxis(used), p.prefixNote(), intervalNote(used, p))}, nil
}

// plotRougeDistribution draws per-document ROUGE-L of members and held-out
// documents side by side for each arm (all seeds pooled), as box plots:
// the members' box should sit high for memorization, the held-out box is
// the chance level.
func plotRougeDistribution(dir string, arms []*reportArm, p *reportProtocol, docs evalDocs) (*reportFigure, error) {
	k := p.plotK()
	_, unit := p.rougeOf()
	var names []string
	var mem, non [][]float64
	for _, a := range arms {
		var m, n []float64
		for _, r := range a.runs {
			for _, d := range docs.of(r, p.Key) {
				if d.Skipped != "" {
					continue
				}
				for _, pr := range d.Probes {
					if p.Name != "goldfish" && pr.K != k {
						continue
					}
					v := pr.RougeLIDs
					if p.Words {
						v = pr.RougeLText
					}
					if d.Member {
						m = append(m, 100*v)
					} else {
						n = append(n, 100*v)
					}
				}
			}
		}
		if len(m) == 0 && len(n) == 0 {
			continue
		}
		names = append(names, a.Arm)
		mem, non = append(mem, m), append(non, n)
	}
	if len(names) == 0 {
		return nil, nil
	}
	title := "Per-document ROUGE-L (" + p.Key + ")"
	f := newPlotFigure(title, "arm", "ROUGE-L F1 per document, "+unit+" (%)")
	f.percentAxis()
	f.p.NominalX(names...)
	f.p.X.Min, f.p.X.Max = -0.7, float64(len(arms))-0.3
	f.p.X.Min, f.p.X.Max = -0.5, float64(len(names))-0.5
	f.p.X.Label.Text = ""
	// Rotate the arm names when they would not fit side by side.
	dataW := plotWidth - 2.5*vg.Inch
	labelW := vg.Length(0)
	for _, n := range names {
		labelW = max(labelW, f.p.X.Tick.Label.Width(n))
	}
	if labelW*vg.Length(len(names)) > 0.9*dataW {
		f.p.X.Tick.Label.Rotation = math.Pi / 6
		f.p.X.Tick.Label.XAlign = draw.XRight
		f.p.X.Tick.Label.YAlign = draw.YCenter
	}
	boxW := min(dataW/vg.Length(len(names))*0.3, 0.5*vg.Inch)
	groups := []struct {
		label  string
		values [][]float64
		offset float64
	}{{"members (trained)", mem, -0.18}, {"held-out (not trained)", non, 0.18}}
	for gi, g := range groups {
		fill := plotLighten(paletteColor(gi), 0.55)
		edge := paletteColor(gi)
		for i, vs := range g.values {
			if len(vs) == 0 {
				continue
			}
			box, err := plotter.NewBoxPlot(boxW, float64(i)+g.offset, plotter.Values(vs))
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			box.FillColor = fill
			box.BoxStyle.Color, box.BoxStyle.Width = edge, vg.Points(1.2)
			box.WhiskerStyle.Color, box.WhiskerStyle.Width = edge, vg.Points(1.2)
			box.MedianStyle.Color, box.MedianStyle.Width = color.Black, vg.Points(2)
			box.GlyphStyle.Color, box.GlyphStyle.Radius = edge, vg.Points(2)
			f.p.Add(box)
		}
		f.addLegend(g.label, swatch{fill: fill, edge: edge})
	}
	file := filepath.Join(PlotsDir, "rougeL-distribution-"+plotSlug(p.Key)+".png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	return &reportFigure{File: file, Alt: title,
		Caption: fmt.Sprintf("Per-document ROUGE-L F1 over %s, members against held-out documents, seeds pooled (%s); box: quartiles, black: median, whiskers: 1.5 × IQR.",
			unit, p.prefixNote())}, nil
}

// plotLighten mixes c with white: t = 0 keeps c, 1 gives white.
func plotLighten(c color.Color, t float64) color.Color {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8(float64(v>>8) + t*(255-float64(v>>8))) }
	return color.RGBA{mix(r), mix(g), mix(b), 0xFF}
}

// plotTrainingLoss draws the training loss against the step, one line per
// arm and seed: colour for the arm, dash for the seed.
func plotTrainingLoss(dir string, arms []*reportArm, warnings *[]string) (*reportFigure, error) {
	multi := slices.ContainsFunc(arms, func(a *reportArm) bool { return len(a.runs) > 1 })
	title := "Training loss"
	f := newPlotFigure(title, "step", "loss (nats/token, log scale)")
	lines, goldfish, held := 0, false, false
	// With several seeds an arm has one legend entry (its seeds share its
	// colour, dashes telling them apart) and the held-out circles one in
	// all: a legend of every run would not fit beside a study of many arms.
	var heldThumbs []plot.Thumbnailer
	for ai, a := range arms {
		named := false
		for si, r := range a.runs {
			ms, err := r.Metrics(dir)
			if err != nil {
				*warnings = append(*warnings, fmt.Sprintf("%s: no training metrics (%v); left out of the loss curves", r.Name(), err))
				continue
			}
			xys, evals := lossSeries(ms)
			if len(xys) == 0 {
				*warnings = append(*warnings, fmt.Sprintf("%s: training metrics without a step; left out of the loss curves", r.Name()))
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("report: plot %s: %w", title, err)
			}
			clr := paletteColor(ai)
			// Each arm's line narrower than the one drawn before it, so
			// that arms whose curves coincide (a goldfish arm tracks the
			// standard one closely) all stay visible.
			line.Color, line.Width = clr, vg.Points(max(1, 3.5-float64(ai)))
			line.Dashes = plotDashes[(si+ai/len(plotPalette))%len(plotDashes)]
			f.p.Add(line)
			thumbs := []plot.Thumbnailer{line}
			if len(xys) == 1 { // a line of one point draws nothing
				points.Color, points.Radius = clr, vg.Points(3)
				f.p.Add(points)
				thumbs = append(thumbs, points)
			}
			name := r.Arm
			switch {
			case !multi:
				f.addLegend(name, thumbs...)
			case !named:
				f.addLegend(fmt.Sprintf("%s (%s)", r.Arm, reportPlural(len(a.runs), "seed")), thumbs...)
				named = true
			}
			if len(evals) > 0 {
				el, ep, err := plotter.NewLinePoints(evals)
				if err != nil {
					return nil, fmt.Errorf("report: plot %s: %w", title, err)
				}
				el.Color, el.Width, el.Dashes = clr, vg.Points(1), []vg.Length{vg.Points(2), vg.Points(2)}
				ep.Color, ep.Radius, ep.Shape = clr, vg.Points(2.5), draw.CircleGlyph{}
				f.p.Add(el, ep)
				if !multi {
					f.addLegend(name+" (held-out)", el, ep)
				} else if heldThumbs == nil {
					gl, gp, _ := plotter.NewLinePoints(evals)
					gl.Color, gl.Width, gl.Dashes = color.Gray{0x80}, el.Width, el.Dashes
					gp.Color, gp.Radius, gp.Shape = color.Gray{0x80}, ep.Radius, ep.Shape
					heldThumbs = []plot.Thumbnailer{gl, gp}
				}
				held = true
			}
			lines++
			goldfish = goldfish || a.isGoldfish()
		}
	}
	if lines == 0 {
		return nil, nil
	}
	if heldThumbs != nil {
		f.addLegend("held-out loss (circles, the arm's colour)", heldThumbs...)
	}
	// A log axis: memorization takes the loss from ~10 to ~0.01, and a
	// linear one flattens everything after the first fifth of training.
	f.p.Y.Scale = plot.LogScale{}
	f.p.Y.Tick.Marker = logTicks{}
	f.p.X.Tick.Marker = plainTicks{}
	file := filepath.Join(PlotsDir, "training-loss.png")
	if err := f.save(dir, file); err != nil {
		return nil, err
	}
	caption := "Training loss against the optimizer step (log scale), one line per arm"
	if multi {
		caption += " and seed (an arm's seeds share its colour, dashes tell them apart)"
	}
	if goldfish {
		caption += "; goldfish arms: the mean over the kept tokens only"
	}
	if held {
		caption += "; circles: the loss on the held-out documents at each periodic evaluation"
	}
	caption += "."
	return &reportFigure{File: file, Alt: title, Caption: caption}, nil
}

// lossSeries are a run's curves: the training loss at every logged step,
// and the held-out loss at the steps that evaluated it (NaN and ±Inf, as
// a diverged run logs, and 0, which a log axis cannot show and only a step
// without a kept target logs, are left out).
func lossSeries(ms []finetune.Metrics) (train, heldout plotter.XYs) {
	finite := func(v float64) bool { return v > 0 && !math.IsInf(v, 0) }
	for _, m := range ms {
		if finite(m.Loss) {
			train = append(train, plotter.XY{X: float64(m.Step), Y: m.Loss})
		}
		if m.EvalLoss != 0 && finite(m.EvalLoss) {
			heldout = append(heldout, plotter.XY{X: float64(m.Step), Y: m.EvalLoss})
		}
	}
	return train, heldout
}

// logTicks marks a log axis at 1, 2 and 5 times each power of ten in its
// range, labelled with at most 4 significant digits ("0.02", "5", "10"),
// and unlabelled ticks at the other integer multiples (all labelled when
// the range holds fewer than two of the others).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi >= lo) {
		return nil
	}
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for d := 1; d <= 9; d++ {
			v := float64(d) * p
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if d == 1 || d == 2 || d == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 4, 64)
			}
			ticks = append(ticks, t)
		}
	}
	labelled := 0
	for _, t := range ticks {
		if t.Label != "" {
			labelled++
		}
	}
	if labelled < 2 { // a range inside one decade: label every tick
		for i := range ticks {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 4, 64)
		}
	}
	return ticks
}

// plainTicks are gonum's default ticks labelled with at most 4 significant
// digits and no trailing zeros ("250", not "250.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 4, 64)
		}
	}
	return ticks
}
