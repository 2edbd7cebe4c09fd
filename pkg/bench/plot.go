package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// CDFSeries is one latency sample to draw as a CDF (milliseconds).
type CDFSeries struct {
	Name string
	Ms   []float64
	// Dashed draws a predicted (modelled) series apart from measured ones.
	Dashed bool
}

// PlotLatencyCDF writes a PNG of the empirical CDFs of series (log-scaled
// milliseconds on x) to path. Empty series are skipped; it returns an error
// when none is left or the file cannot be written.
func PlotLatencyCDF(path, title string, series []CDFSeries) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "commit → applied (ms, log scale)"
	p.Y.Label.Text = "share of events"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Points(8), -vg.Points(6)
	p.Add(plotter.NewGrid())
	n := 0
	for i, s := range series {
		if len(s.Ms) == 0 {
			continue
		}
		ms := append([]float64(nil), s.Ms...)
		sort.Float64s(ms)
		pts := make(plotter.XYs, 0, len(ms))
		for j, v := range ms {
			pts = append(pts, plotter.XY{X: math.Max(v, 0.1), Y: float64(j+1) / float64(len(ms))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.8)
		if s.Dashed {
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (n=%d)", s.Name, len(ms)), l)
		n++
	}
	if n == 0 {
		return fmt.Errorf("bench: latency plot %s: no samples", path)
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// LoadPoint is one load level's throughput and calls.
type LoadPoint struct {
	Label string
	// Offered is the offered events/s (0: closed loop, drawn at Achieved).
	Offered, Achieved float64
	// RelayCallsPer1000 is the relay's AWS calls per 1,000 events;
	// P99Ms the commit → applied p99.
	RelayCallsPer1000, P99Ms float64
}

// PlotThroughputCalls writes a PNG with two panels against achieved
// events/s: offered vs achieved events/s, and the relay's calls per 1,000
// events with the p99 latency as labels.
func PlotThroughputCalls(path string, pts []LoadPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("bench: throughput plot %s: no levels", path)
	}
	top := plot.New()
	top.Title.Text = "Throughput: offered vs applied events/s (closed loop: offered = applied)"
	top.X.Label.Text = "events applied per second"
	top.Y.Label.Text = "events offered per second"
	top.Add(plotter.NewGrid())
	bottom := plot.New()
	bottom.Title.Text = "Relay AWS calls per 1,000 events (label: p99 commit → applied)"
	bottom.X.Label.Text = "events applied per second"
	bottom.Y.Label.Text = "relay calls / 1,000 events"
	bottom.Add(plotter.NewGrid())
	var xy1, xy2 plotter.XYs
	var lab1, lab2 []string
	maxX := 0.0
	for _, p := range pts {
		off := p.Offered
		if off == 0 {
			off = p.Achieved
		}
		xy1 = append(xy1, plotter.XY{X: p.Achieved, Y: off})
		xy2 = append(xy2, plotter.XY{X: p.Achieved, Y: p.RelayCallsPer1000})
		lab1 = append(lab1, p.Label)
		lab2 = append(lab2, fmt.Sprintf("%s, p99 %.0f ms", p.Label, p.P99Ms))
		maxX = math.Max(maxX, math.Max(p.Achieved, off))
	}
	ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxX * 1.1, Y: maxX * 1.1}})
	if err != nil {
		return err
	}
	ref.Color = color.Gray{Y: 160}
	ref.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	top.Add(ref)
	top.Legend.Add("offered = applied", ref)
	top.Legend.Top, top.Legend.Left = true, true
	for i, d := range []struct {
		p   *plot.Plot
		xy  plotter.XYs
		lab []string
	}{{top, xy1, lab1}, {bottom, xy2, lab2}} {
		s, err := plotter.NewScatter(d.xy)
		if err != nil {
			return err
		}
		s.Color = plotutil.Color(i)
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(4)
		l, err := plotter.NewLabels(plotter.XYLabels{XYs: d.xy, Labels: d.lab})
		if err != nil {
			return err
		}
		l.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(2)}
		d.p.Add(s, l)
		d.p.X.Min, d.p.X.Max = 0, maxX*1.45
		d.p.Y.Min = 0
	}
	top.Y.Max = maxX * 1.1
	img := vgimgCanvas(9*vg.Inch, 8*vg.Inch)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, draw.New(img))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return savePNG(img, path)
}

// CostPoint is the cost model at one rate.
type CostPoint struct {
	EventsPerSec, USDPerMonth float64
}

// PlotCost writes a log-log PNG of USD per month against events/s.
func PlotCost(path string, pts []CostPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("bench: cost plot %s: no points", path)
	}
	p := plot.New()
	p.Title.Text = "Cost per month (on-demand list prices, us-east-1)"
	p.X.Label.Text = "events per second (log)"
	p.Y.Label.Text = "USD per month (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var xy plotter.XYs
	var labs []string
	for _, c := range pts {
		xy = append(xy, plotter.XY{X: c.EventsPerSec, Y: c.USDPerMonth})
		labs = append(labs, fmt.Sprintf("$%.0f", c.USDPerMonth))
	}
	lp, sc, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	lp.Color, sc.Color = plotutil.Color(0), plotutil.Color(0)
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xy, Labels: labs})
	if err != nil {
		return err
	}
	l.Offset = vg.Point{X: vg.Points(-40), Y: vg.Points(6)}
	p.Add(lp, sc, l)
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func vgimgCanvas(w, h vg.Length) *vgimg.Canvas { return vgimg.New(w, h) }

func savePNG(c *vgimg.Canvas, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
