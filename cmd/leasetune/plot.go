package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // PNG
	_ "gonum.org/v1/plot/vg/vgsvg" // SVG
)

// panel is one quantity drawn against the lease size; zero puts 0 on its
// y axis, for a count, whose size next to 0 is what the eye compares.
type panel struct {
	title string
	value func(result) float64
	zero  bool
}

var panels = []panel{
	{"Redis calls/s (all instances)", func(r result) float64 { return r.CallsPerSec }, true},
	{"worst window past Burst + Rate·w (units)", func(r result) float64 { return max(r.Overshoot, 0) }, true},
	{"units stranded (lapsed unused)", func(r result) float64 { return float64(r.Stranded) }, true},
	{"served ÷ exact limiter", func(r result) float64 { return r.Served }, false},
}

// The figure's size and spacing.
const (
	figWidth   = 10 * vg.Inch
	figHeight  = 8 * vg.Inch
	figMargin  = vg.Length(8) // points: the title's and legend's left edge, and the gap under each
	figCols    = 2            // panels per row
	maxTicks   = 5            // most intervals between the y axis's labelled ticks
	legendSlop = 1.3          // text widths are reserved at this many times their width in the figure's font
)

// figure is the laid-out plot: a title, under it a one-row legend (more
// rows if it does not fit), and under that the panels. Title, legend and
// panels each have a band of their own, so none can overlap another; the
// legend's entries are spaced for text legendSlop times as wide as the
// figure's font makes it, since an SVG viewer without Liberation Serif
// draws the text in a wider font, from the same left edge.
type figure struct {
	title      string
	titleStyle text.Style
	titleBox   vg.Rectangle

	legendStyle text.Style
	legend      []legendEntry
	legendBox   vg.Rectangle

	grid  [][]*plot.Plot
	marks [][]*plotter.Scatter // each panel's markers, by grid position
	tiles draw.Tiles
}

// legendEntry is one legend entry: its thumbnail's box, and the box kept
// for its text, to the thumbnail's right (legendSlop times its width).
type legendEntry struct {
	name        string
	thumbs      []plot.Thumbnailer
	thumb, text vg.Rectangle
}

// newFigure lays out the plot of results: each panel's quantity against
// Refresh, one line per TTL.
func newFigure(s scenario, ttls []time.Duration, results []result) (*figure, error) {
	f := &figure{
		title: fmt.Sprintf("ratelease leases: %d/%v burst %d, %d instances, %s demand at %.0f%%",
			s.Rate, s.Period, s.Burst, s.Instances, s.Profile, s.Load*100),
		titleStyle:  text.Style{Font: font.From(plot.DefaultFont, 14), Handler: plot.DefaultTextHandler, XAlign: draw.XLeft, YAlign: draw.YTop},
		legendStyle: text.Style{Font: font.From(plot.DefaultFont, 12), Handler: plot.DefaultTextHandler, XAlign: draw.XLeft},
	}
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "Refresh (lease size, ms)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		var marks []*plotter.Scatter
		lo, hi := math.Inf(1), math.Inf(-1)
		for j, ttl := range ttls {
			var xys plotter.XYs
			for _, r := range results {
				if r.Lease.TTL == ttl {
					y := pn.value(r)
					xys = append(xys, plotter.XY{X: float64(r.Lease.Refresh.Milliseconds()), Y: y})
					lo, hi = min(lo, y), max(hi, y)
				}
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = plotutil.Color(j), plotutil.Color(j)
			line.Dashes = plotutil.Dashes(j)
			points.Shape = plotutil.Shape(j)
			p.Add(line, points)
			marks = append(marks, points)
			if i == 0 {
				f.legend = append(f.legend, legendEntry{name: "TTL " + ttl.String(), thumbs: []plot.Thumbnailer{line, points}})
			}
		}
		if pn.zero {
			lo = min(lo, 0)
		}
		var step float64
		p.Y.Min, p.Y.Max, step = niceAxis(lo, hi, maxTicks)
		p.Y.Tick.Marker = niceTicks{step: step}
		if i%figCols == 0 {
			f.grid = append(f.grid, nil)
			f.marks = append(f.marks, nil)
		}
		f.grid[i/figCols] = append(f.grid[i/figCols], p)
		f.marks[i/figCols] = append(f.marks[i/figCols], marks...)
	}
	f.layout()
	return f, nil
}

// layout places the title at the top left, the legend's rows under it,
// and the panels' tiles under the legend.
func (f *figure) layout() {
	top := figHeight - figMargin/2
	tr := f.titleStyle.Rectangle(f.title) // YTop: drawn down from top
	f.titleBox = vg.Rectangle{
		Min: vg.Point{X: figMargin, Y: top + tr.Min.Y},
		Max: vg.Point{X: min(figMargin+tr.Size().X*legendSlop, figWidth), Y: top},
	}
	// The legend's entries in columns of one width (the widest entry's),
	// as many to a row as fit.
	em := f.legendStyle.Width("M")
	thumbW := 2 * em
	var textW, rowH vg.Length
	for _, e := range f.legend {
		r := f.legendStyle.Rectangle(e.name)
		textW, rowH = max(textW, r.Size().X), max(rowH, r.Size().Y)
	}
	col := thumbW + em/2 + textW*legendSlop + 2*em
	perRow := max(1, int((figWidth-2*figMargin)/col))
	y := f.titleBox.Min.Y - figMargin/2
	f.legendBox = vg.Rectangle{Min: vg.Point{X: figMargin, Y: y}, Max: vg.Point{X: figMargin, Y: y}}
	for i := range f.legend {
		e := &f.legend[i]
		x := figMargin + vg.Length(i%perRow)*col
		if i%perRow == 0 {
			y -= rowH
		}
		e.thumb = vg.Rectangle{Min: vg.Point{X: x, Y: y}, Max: vg.Point{X: x + thumbW, Y: y + rowH}}
		e.text = vg.Rectangle{Min: vg.Point{X: e.thumb.Max.X + em/2, Y: y}, Max: vg.Point{X: e.thumb.Max.X + em/2 + textW*legendSlop, Y: y + rowH}}
		f.legendBox.Min.Y = y
		f.legendBox.Max.X = max(f.legendBox.Max.X, e.text.Max.X)
	}
	f.tiles = draw.Tiles{Rows: len(f.grid), Cols: figCols,
		PadTop: figHeight - f.legendBox.Min.Y + figMargin, PadX: vg.Points(16), PadY: vg.Points(16),
		PadLeft: vg.Points(4), PadRight: vg.Points(8), PadBottom: vg.Points(4)}
}

// panels returns the canvas of each panel, by grid position, on dc.
func (f *figure) panels(dc draw.Canvas) [][]draw.Canvas { return plot.Align(f.grid, f.tiles, dc) }

// draw draws the figure on dc.
func (f *figure) draw(dc draw.Canvas) {
	dc.FillText(f.titleStyle, vg.Point{X: f.titleBox.Min.X, Y: f.titleBox.Max.Y}, f.title)
	for _, e := range f.legend {
		thumb := draw.Canvas{Canvas: dc.Canvas, Rectangle: e.thumb}
		for _, t := range e.thumbs {
			t.Thumbnail(&thumb)
		}
		// The text's box, from its baseline, starts below it by
		// Rectangle's Min.Y: its bottom is the thumbnail's.
		below := -f.legendStyle.Rectangle(e.name).Min.Y
		dc.FillText(f.legendStyle, vg.Point{X: e.text.Min.X, Y: e.text.Min.Y + below}, e.name)
	}
	for i, row := range f.panels(dc) {
		for j, c := range row {
			f.grid[i][j].Draw(c)
		}
	}
}

// drawPlot draws each panel's quantity against Refresh, one line per TTL,
// into path (.svg or .png).
func drawPlot(path string, s scenario, ttls []time.Duration, results []result) error {
	f, err := newFigure(s, ttls, results)
	if err != nil {
		return err
	}
	c, err := draw.NewFormattedCanvas(figWidth, figHeight, plotFormat(path)) // format checked by tune
	if err != nil {
		return err
	}
	f.draw(draw.New(c))
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(out); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// niceAxis returns the y axis of data from lo to hi: the fewest ticks'
// step, from 1, 2, 2.5 and 5 × 10^k, that spans them in at most n
// intervals, and the multiples of it that enclose them. A range of one
// value is widened around it first (to 0..1 for 0).
func niceAxis(lo, hi float64, n int) (min, max, step float64) {
	if hi <= lo {
		if w := math.Abs(lo) / 20; w > 0 {
			lo, hi = lo-w, lo+w
		} else {
			lo, hi = 0, 1
		}
	}
	// rel absorbs the rounding of lo/step, so that a value that is a
	// multiple of step is taken as one.
	const rel = 1e-9
	for e := math.Floor(math.Log10((hi - lo) / float64(n))); ; e++ {
		for _, m := range []float64{1, 2, 2.5, 5} {
			s := m * math.Pow(10, e)
			a, b := math.Floor(lo/s+rel), math.Ceil(hi/s-rel)
			if b-a <= float64(n) {
				return a*s + 0, b*s + 0, s // + 0: no -0
			}
		}
	}
}

// niceTicks labels every multiple of step on an axis (niceAxis's).
type niceTicks struct{ step float64 }

// Ticks returns the multiples of t.step from min to max.
func (t niceTicks) Ticks(min, max float64) []plot.Tick {
	// Digits after the point: as many as the step has (0.25: two).
	prec := 0
	for f := t.step; prec < 15 && math.Abs(f-math.Round(f)) > 1e-6*f; f *= 10 {
		prec++
	}
	var ticks []plot.Tick
	for k := math.Ceil(min/t.step - 1e-9); k <= math.Floor(max/t.step+1e-9); k++ {
		v := k*t.step + 0
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', prec, 64)})
	}
	return ticks
}

func plotFormat(path string) string {
	return strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")
}

// plotFormatOK checks that path, if any, names a format drawPlot writes.
func plotFormatOK(path string) error {
	if f := plotFormat(path); path != "" && f != "svg" && f != "png" {
		return fmt.Errorf("%w: -plot %q: want a .svg or .png file", errUsage, path)
	}
	return nil
}
