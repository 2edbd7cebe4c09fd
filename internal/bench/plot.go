package bench

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

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
// milliseconds on x) to path, the legend below the plot area so it never
// covers a curve. Empty series are skipped; it returns an error when none
// is left or the file cannot be written.
func PlotLatencyCDF(path, title string, series []CDFSeries) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "commit → applied (ms, log scale)"
	p.Y.Label.Text = "share of events"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = commaTicks{plot.LogTicks{Prec: -1}}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
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
		leg.Add(fmt.Sprintf("%s (n=%s)", s.Name, commaInt(len(ms))), l)
		n++
	}
	if n == 0 {
		return fmt.Errorf("bench: latency plot %s: no samples", path)
	}
	return savePNG(withLegendBelow(p, leg, 9*vg.Inch, 5*vg.Inch), path)
}

// LoadPoint is one load level's throughput and calls.
type LoadPoint struct {
	// Label names the level on the x axis; "\n" breaks it into lines.
	Label string
	// Committed is the events/s the load committed (2 per order: the
	// paced rate offered, or what a closed loop achieved), Applied the
	// events/s the consumers applied.
	Committed, Applied float64
	// RelayCallsPer1000 is the relay's AWS calls per 1,000 events;
	// P99Ms the commit → applied p99 in ms.
	RelayCallsPer1000, P99Ms float64
}

// PlotThroughputCalls writes a PNG with two bar panels, one group per load
// level (x: the levels, named by orders/s or the closed loop): events/s
// committed beside events/s applied, and the relay's AWS calls per 1,000
// events labelled with the level's p99 commit → applied.
func PlotThroughputCalls(path string, pts []LoadPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("bench: throughput plot %s: no levels", path)
	}
	names := make([]string, len(pts))
	var committed, applied, calls plotter.Values
	var callLabels []string
	for i, p := range pts {
		names[i] = p.Label
		committed = append(committed, p.Committed)
		applied = append(applied, p.Applied)
		calls = append(calls, p.RelayCallsPer1000)
		callLabels = append(callLabels, fmt.Sprintf("%s calls\np99 %s ms", commaFloat(math.Round(p.RelayCallsPer1000*10)/10), commaInt(int(math.Round(p.P99Ms)))))
	}
	const groupWidth = 0.7 // of one x unit
	w := vg.Length(0)
	top := plot.New()
	top.Title.Text = "Events per second by level: committed by the load (2 per order) and applied by the consumers"
	top.Y.Label.Text = "events per second"
	top.Add(horizontalGrid())
	leg := plot.NewLegend()
	leg.Top, leg.Left = true, true
	bottom := plot.New()
	bottom.Title.Text = "Relay AWS calls per 1,000 events (label: the level's p99 commit → applied)"
	bottom.Y.Label.Text = "relay calls per 1,000 events"
	bottom.Add(horizontalGrid())

	img := vgimgCanvas(10*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	// Bar widths in canvas units: the plot area is about the canvas width
	// less the axes; one level gets 1/len(pts) of it.
	w = (10*vg.Inch - 1.2*vg.Inch) / vg.Length(len(pts)) * groupWidth
	for i, d := range []struct {
		v    plotter.Values
		name string
	}{{committed, "events/s committed"}, {applied, "events/s applied"}} {
		b, err := plotter.NewBarChart(d.v, w/2)
		if err != nil {
			return err
		}
		b.Color = plotutil.Color(i)
		b.LineStyle.Width = 0
		b.Offset = (vg.Length(i) - 0.5) * w / 2
		top.Add(b)
		leg.Add(d.name, b)
	}
	cb, err := plotter.NewBarChart(calls, w/2)
	if err != nil {
		return err
	}
	cb.Color = plotutil.Color(2)
	cb.LineStyle.Width = 0
	bottom.Add(cb)
	var lxy plotter.XYs
	for i, v := range calls {
		lxy = append(lxy, plotter.XY{X: float64(i), Y: v})
	}
	labels, err := plotter.NewLabels(plotter.XYLabels{XYs: lxy, Labels: callLabels})
	if err != nil {
		return err
	}
	for i := range labels.TextStyle {
		labels.TextStyle[i].XAlign = draw.XCenter
		labels.TextStyle[i].Font.Size = vg.Points(9)
	}
	labels.Offset = vg.Point{Y: vg.Points(4)}
	bottom.Add(labels)
	for _, pl := range []*plot.Plot{top, bottom} {
		pl.NominalX(names...)
		pl.X.Min, pl.X.Max = -0.6, float64(len(pts))-0.4
		pl.Y.Min = 0
		pl.Y.Tick.Marker = commaTicks{plot.DefaultTicks{}}
	}
	top.Y.Max = math.Max(maxOf(committed), maxOf(applied)) * 1.15
	bottom.Y.Max = maxOf(calls) * 1.3 // room for the two-line labels

	const legendH = 0.45 * vg.Inch
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 10, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 4, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	// The legend of the upper panel above it, outside the data.
	area := draw.Crop(dc, 0, 0, 0, -legendH)
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, area)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	leg.XOffs = vg.Inch * 0.9
	leg.YOffs = -vg.Points(6)
	leg.Draw(draw.Crop(dc, 0, 0, 9*vg.Inch-legendH, 0))
	return savePNG(img, path)
}

// horizontalGrid is a grid of horizontal lines only (bars need no
// vertical ones).
func horizontalGrid() *plotter.Grid {
	g := plotter.NewGrid()
	g.Vertical.Color = nil
	return g
}

func maxOf(v plotter.Values) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// CostPoint is the cost model at one rate.
type CostPoint struct {
	EventsPerSec, USDPerMonth float64
}

// PlotCost writes a log-log PNG of the producer side's USD per month
// (writes, EventBridge, the relay's Lambda: section d's model) against
// events/s, each point labelled with its cost.
func PlotCost(path string, pts []CostPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("bench: cost plot %s: no points", path)
	}
	p := plot.New()
	p.Title.Text = "Producer-side cost per month (writes, EventBridge, relay Lambda; on-demand list prices, us-east-1)"
	p.X.Label.Text = "events per second (log)"
	p.Y.Label.Text = "USD per month (log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = commaTicks{plot.LogTicks{Prec: -1}}, commaTicks{plot.LogTicks{Prec: -1}}
	p.Add(plotter.NewGrid())
	var xy plotter.XYs
	var labs []string
	lo, hi := math.Inf(1), 0.0
	for _, c := range pts {
		xy = append(xy, plotter.XY{X: c.EventsPerSec, Y: c.USDPerMonth})
		labs = append(labs, "$"+commaInt(int(math.Round(c.USDPerMonth))))
		lo, hi = math.Min(lo, c.USDPerMonth), math.Max(hi, c.USDPerMonth)
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
	// Below and to the right of each point: the line rises to the right,
	// so the space under it is free.
	l.Offset = vg.Point{X: vg.Points(8), Y: vg.Points(-14)}
	p.Add(lp, sc, l)
	// Room for the last label on the right and the first one below.
	p.X.Max = xy[len(xy)-1].X * 4
	p.Y.Min = lo / 4
	p.Y.Max = hi * 2
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

// withLegendBelow draws p on a w × h canvas with leg under its plot area
// (outside the data), and returns the canvas.
func withLegendBelow(p *plot.Plot, leg plot.Legend, w, h vg.Length) *vgimg.Canvas {
	img := vgimgCanvas(w, h)
	dc := draw.New(img)
	r := leg.Rectangle(dc)
	lh := r.Max.Y - r.Min.Y + vg.Points(10)
	p.Draw(draw.Crop(dc, 0, 0, lh, 0))
	leg.XOffs = vg.Points(50)
	leg.Draw(draw.Crop(dc, 0, 0, vg.Points(4), -(h - lh)))
	return img
}

// commaTicks are Ticker's ticks with labels printed with thousands
// separators and no exponent ("1,000,000", not "1e+06").
type commaTicks struct{ plot.Ticker }

func (t commaTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := t.Ticker.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = commaFloat(ts[i].Value)
		}
	}
	return ts
}

func commaFloat(v float64) string {
	if v >= 1 && v == math.Trunc(v) {
		return commaInt(int(v))
	}
	str := strconv.FormatFloat(v, 'f', -1, 64)
	if i := strings.IndexByte(str, '.'); i > 0 && math.Abs(v) >= 1000 {
		return commaInt(int(math.Trunc(v))) + str[i:]
	}
	return str
}

// commaInt prints n with thousands separators.
func commaInt(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
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
