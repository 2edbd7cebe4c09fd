package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"testing"
)

// The plots are real PNG files of the size asked for; a plot without data
// is an error, not an empty image.
func TestPlotsWritePNG(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cdf := filepath.Join(dir, "cdf.png")
	if err := PlotLatencyCDF(cdf, "t", []CDFSeries{{Name: "a", Ms: []float64{1, 2, 3, 40}}, {Name: "b", Ms: []float64{200, 300}, Dashed: true}}); err != nil {
		t.Fatal(err)
	}
	tp := filepath.Join(dir, "tp.png")
	if err := PlotThroughputCalls(tp, []LoadPoint{{Label: "25 orders/s", Committed: 50, Applied: 50, RelayCallsPer1000: 900, P99Ms: 90}, {Label: "closed loop", Committed: 260, Applied: 240, RelayCallsPer1000: 180, P99Ms: 300}}); err != nil {
		t.Fatal(err)
	}
	cost := filepath.Join(dir, "cost.png")
	if err := PlotCost(cost, []CostPoint{{100, 1500}, {1000, 15000}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{cdf, tp, cost} {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 300 {
			t.Errorf("%s is %v, too small", p, b)
		}
	}
	if err := PlotLatencyCDF(filepath.Join(dir, "none.png"), "t", []CDFSeries{{Name: "empty"}}); err == nil {
		t.Error("a CDF without samples was written")
	}
}

// Numbers on the plots carry thousands separators and no exponent.
func TestPlotNumbers(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{1229.2: "1,229.2", 1e6: "1,000,000", 140: "140", 0.5: "0.5", 12.25: "12.25"} {
		if got := commaFloat(v); got != want {
			t.Errorf("commaFloat(%v) = %q, want %q", v, got, want)
		}
	}
}
