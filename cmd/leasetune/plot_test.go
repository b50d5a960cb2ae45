package main

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratelease/ratelease"
)

// niceMantissa reports whether step is 1, 2, 2.5 or 5 × 10^k.
func niceMantissa(step float64) bool {
	m := step / math.Pow(10, math.Floor(math.Log10(step)+1e-9))
	for _, want := range []float64{1, 2, 2.5, 5} {
		if math.Abs(m-want) < 1e-9 {
			return true
		}
	}
	return false
}

// multiple reports whether v is a whole multiple of step.
func multiple(v, step float64) bool {
	k := v / step
	return math.Abs(k-math.Round(k)) < 1e-6
}

// The y axis's ticks are every multiple of a step of 1, 2, 2.5 or 5 ×
// 10^k, from a multiple of it (0 for a count), in at most maxTicks
// intervals, with the finest such step.
func TestNiceAxis(t *testing.T) {
	for _, c := range []struct {
		lo, hi         float64
		min, max, step float64
		labels         string
	}{
		{0, 380, 0, 400, 100, "0 100 200 300 400"},
		{50, 350, 0, 400, 100, "0 100 200 300 400"}, // once 50, 200, 350
		{0.965, 0.995, 0.96, 1, 0.01, "0.96 0.97 0.98 0.99 1.00"},
		{0.897, 0.999, 0.875, 1, 0.025, "0.875 0.900 0.925 0.950 0.975 1.000"},
		{0, 0, 0, 1, 0.2, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{1, 1, 0.95, 1.05, 0.025, "0.950 0.975 1.000 1.025 1.050"},
		{-3, 7, -5, 7.5, 2.5, "-5.0 -2.5 0.0 2.5 5.0 7.5"},
		{0, 283, 0, 300, 100, "0 100 200 300"},
		{0, 1e9, 0, 1e9, 2e8, "0 200000000 400000000 600000000 800000000 1000000000"},
	} {
		min, max, step := niceAxis(c.lo, c.hi, maxTicks)
		if math.Abs(min-c.min) > 1e-9 || math.Abs(max-c.max) > 1e-9 || math.Abs(step-c.step) > 1e-12 {
			t.Errorf("niceAxis(%v, %v): %v..%v step %v, want %v..%v step %v", c.lo, c.hi, min, max, step, c.min, c.max, c.step)
			continue
		}
		var labels []string
		for _, tk := range (niceTicks{step: step}).Ticks(min, max) {
			labels = append(labels, tk.Label)
		}
		if got := strings.Join(labels, " "); got != c.labels {
			t.Errorf("niceAxis(%v, %v): ticks %q, want %q", c.lo, c.hi, got, c.labels)
		}
	}
	// Any range: a nice step, the axis's ends multiples of it around the
	// data, and no finer nice step would do.
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		// Spans from 10^-4 to 10^8, starting up to a hundred spans from 0.
		span := r.Float64() * math.Pow(10, float64(r.IntN(12)-4))
		lo := (r.Float64()*100 - 30) * span
		hi := lo + span
		min, max, step := niceAxis(lo, hi, maxTicks)
		n := math.Round((max - min) / step)
		switch {
		case !niceMantissa(step):
			t.Fatalf("niceAxis(%v, %v): step %v is not 1, 2, 2.5 or 5 × 10^k", lo, hi, step)
		case !multiple(min, step) || !multiple(max, step):
			t.Fatalf("niceAxis(%v, %v): %v..%v, not multiples of %v", lo, hi, min, max, step)
		case hi > lo && (min > lo+step*1e-6 || max < hi-step*1e-6):
			t.Fatalf("niceAxis(%v, %v): %v..%v does not hold the data", lo, hi, min, max)
		case n > maxTicks:
			t.Fatalf("niceAxis(%v, %v): %v intervals of %v, more than %d", lo, hi, n, step, maxTicks)
		}
		if hi > lo {
			finer := finerNice(step)
			if m := math.Ceil(hi/finer-1e-9) - math.Floor(lo/finer+1e-9); m <= maxTicks {
				t.Fatalf("niceAxis(%v, %v): step %v, but %v takes %v intervals", lo, hi, step, finer, m)
			}
		}
		ticks := (niceTicks{step: step}).Ticks(min, max)
		if len(ticks) != int(n)+1 || ticks[0].Value != min {
			t.Fatalf("niceAxis(%v, %v): ticks %v from %v..%v step %v", lo, hi, ticks, min, max, step)
		}
	}
}

// finerNice returns the nice step before step: 5 → 2.5 → 2 → 1 → 0.5.
func finerNice(step float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(step)+1e-9))
	switch m := math.Round(step/e*10) / 10; m {
	case 5:
		return 2.5 * e
	case 2.5:
		return 2 * e
	case 2:
		return e
	default:
		return 0.5 * e
	}
}

// overlap reports whether two boxes share any area.
func overlap(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// The legend's box meets neither the title's nor any panel's (its title,
// axes and every marker), whatever the title's length, the number of TTLs
// and where the data sit (here in every corner of every panel).
func TestFigureLayout(t *testing.T) {
	refreshes := []time.Duration{25 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for _, c := range []struct {
		name string
		s    scenario
		ttls []time.Duration
	}{
		{"docs", scenario{Rate: 1000, Period: time.Second, Burst: 1000, Instances: 4, Profile: "bursty", Load: 1.5},
			[]time.Duration{250 * time.Millisecond, time.Second, 1500 * time.Millisecond, 5 * time.Second}},
		{"long title, many TTLs", scenario{Rate: 1000000000, Period: time.Hour, Burst: 1000000000, Instances: 1024, Profile: "skewed", Load: 12.5},
			[]time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second, 6 * time.Second,
				7 * time.Second, 8 * time.Second, 9 * time.Second, 10 * time.Second, 11 * time.Second, 1500 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var results []result
			for i, ttl := range c.ttls {
				for j, refresh := range refreshes {
					hi := float64((i + j) % 2) // a high and a low point in each corner
					results = append(results, result{Lease: ratelease.LeaseConfig{Refresh: refresh, TTL: ttl},
						CallsPerSec: 400 * hi, Overshoot: 100 * hi, Stranded: uint64(500 * hi), Served: 0.9 + 0.1*hi})
				}
			}
			f, err := newFigure(c.s, c.ttls, results)
			if err != nil {
				t.Fatal(err)
			}
			figure := vg.Rectangle{Max: vg.Point{X: figWidth, Y: figHeight}}
			for name, box := range map[string]vg.Rectangle{"title": f.titleBox, "legend": f.legendBox} {
				if box.Min.X < 0 || box.Min.Y < 0 || box.Max.X > figWidth || box.Max.Y > figHeight || box.Size().X <= 0 || box.Size().Y <= 0 {
					t.Errorf("the %s's box %v is not inside the figure %v", name, box, figure)
				}
			}
			if overlap(f.legendBox, f.titleBox) {
				t.Errorf("the legend %v meets the title %v", f.legendBox, f.titleBox)
			}
			// Each entry's thumbnail and text (kept legendSlop times as
			// wide as the font makes it) are in the legend's box, and meet
			// no other entry's, nor each other.
			var boxes []vg.Rectangle
			for _, e := range f.legend {
				boxes = append(boxes, e.thumb, e.text)
			}
			for i, b := range boxes {
				if b.Min.X < f.legendBox.Min.X || b.Min.Y < f.legendBox.Min.Y || b.Max.X > f.legendBox.Max.X || b.Max.Y > f.legendBox.Max.Y {
					t.Errorf("legend entry %q: %v is outside the legend's box %v", f.legend[i/2].name, b, f.legendBox)
				}
				for j, o := range boxes[i+1:] {
					if overlap(b, o) {
						t.Errorf("legend entries %q and %q meet: %v, %v", f.legend[i/2].name, f.legend[(i+1+j)/2].name, b, o)
					}
				}
			}
			dc := draw.New(vgimg.New(figWidth, figHeight))
			markers := 0
			for i, row := range f.panels(dc) {
				for j, tile := range row {
					if overlap(tile.Rectangle, f.legendBox) || overlap(tile.Rectangle, f.titleBox) {
						t.Errorf("panel %q's tile %v meets the legend %v or the title %v", f.grid[i][j].Title.Text, tile.Rectangle, f.legendBox, f.titleBox)
					}
					p := f.grid[i][j]
					// The y axis runs from tick to tick, a nice step apart.
					ticks := p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max)
					if len(ticks) < 2 || ticks[0].Value != p.Y.Min || ticks[len(ticks)-1].Value != p.Y.Max {
						t.Errorf("panel %q: y ticks %v on %v..%v", p.Title.Text, ticks, p.Y.Min, p.Y.Max)
					} else if step := ticks[1].Value - ticks[0].Value; !niceMantissa(step) || !multiple(p.Y.Min, step) {
						t.Errorf("panel %q: y ticks %v, a step of %v", p.Title.Text, ticks, step)
					}
					data := p.DataCanvas(tile)
					x, y := p.Transforms(&data)
					for _, m := range f.marks[i][j*len(c.ttls) : (j+1)*len(c.ttls)] {
						for _, xy := range m.XYs {
							at := vg.Point{X: x(xy.X), Y: y(xy.Y)}
							r := m.GlyphStyle.Radius
							glyph := vg.Rectangle{Min: vg.Point{X: at.X - r, Y: at.Y - r}, Max: vg.Point{X: at.X + r, Y: at.Y + r}}
							if overlap(glyph, f.legendBox) || overlap(glyph, f.titleBox) {
								t.Errorf("panel %q: the marker at %v meets the legend %v or the title %v", p.Title.Text, glyph, f.legendBox, f.titleBox)
							}
							if !overlap(glyph, tile.Rectangle) {
								t.Errorf("panel %q: the marker at %v is outside its tile %v", p.Title.Text, glyph, tile.Rectangle)
							}
							markers++
						}
					}
				}
			}
			if want := len(panels) * len(results); markers != want {
				t.Errorf("checked %d markers, want %d", markers, want)
			}
		})
	}
}
