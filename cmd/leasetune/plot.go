package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // PNG
	_ "gonum.org/v1/plot/vg/vgsvg" // SVG
)

// panel is one quantity drawn against the lease size.
type panel struct {
	title string
	value func(result) float64
}

var panels = []panel{
	{"Redis calls/s (all instances)", func(r result) float64 { return r.CallsPerSec }},
	{"worst window past Burst + Rate·w (units)", func(r result) float64 { return max(r.Overshoot, 0) }},
	{"units stranded (lapsed unused)", func(r result) float64 { return float64(r.Stranded) }},
	{"served ÷ exact limiter", func(r result) float64 { return r.Served }},
}

// drawPlot draws each panel's quantity against Refresh, one line per TTL,
// into path (.svg or .png). One legend, in a strip of its own above the
// panels, names the lines of all of them: a legend inside a panel sits on
// whatever curve passes its corner.
func drawPlot(path string, s scenario, ttls []time.Duration, results []result) error {
	format := plotFormat(path) // checked by tune
	row := make([]*plot.Plot, len(panels))
	legend := plot.NewLegend()
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.X.Label.Text = "Refresh (lease size, ms)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		for j, ttl := range ttls {
			var xys plotter.XYs
			for _, r := range results {
				if r.Lease.TTL == ttl {
					xys = append(xys, plotter.XY{X: float64(r.Lease.Refresh.Milliseconds()), Y: pn.value(r)})
				}
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, points.Color = plotutil.Color(j), plotutil.Color(j)
			line.Dashes = plotutil.Dashes(j)
			points.Shape = plotutil.Shape(j)
			p.Add(line, points)
			if i == 0 {
				legend.Add("TTL "+ttl.String(), line, points)
			}
		}
		row[i] = p
	}
	const cols = 2
	grid := make([][]*plot.Plot, (len(row)+cols-1)/cols)
	for i, p := range row {
		grid[i/cols] = append(grid[i/cols], p)
	}
	width, height := 10*vg.Inch, 8*vg.Inch
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	title := fmt.Sprintf("ratelease leases: %d/%v burst %d, %d instances, %s demand at %.0f%%",
		s.Rate, s.Period, s.Burst, s.Instances, s.Profile, s.Load*100)
	titleFont := plot.DefaultFont
	titleFont.Size = vg.Points(14)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: titleFont, XAlign: draw.XLeft, YAlign: draw.YTop,
		Handler: plot.DefaultTextHandler}, vg.Point{X: vg.Points(8), Y: height - vg.Points(4)}, title)
	// The legend: top right, in the strip above the panels (the title is
	// on the left of it).
	strip := vg.Points(14) * vg.Length(len(ttls)+1)
	legend.Top = true
	legend.Draw(draw.Crop(dc, 0, -vg.Points(8), height-strip, 0))
	tiles := draw.Tiles{Rows: len(grid), Cols: cols, PadTop: strip + vg.Points(8), PadX: vg.Points(16), PadY: vg.Points(16),
		PadLeft: vg.Points(4), PadRight: vg.Points(8), PadBottom: vg.Points(4)}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			p.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
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
