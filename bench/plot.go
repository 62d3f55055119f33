package main

import (
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

var (
	colorNoderollout = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorBaseline    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorHistory     = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorPeer        = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colorFloor       = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

// writePlot draws two panels against N (log scale): makespan / ideal of both systems, and
// what each node costs (own API writes and reads, Temporal history events).
func writePlot(path string, results []*result) error {
	ratio := newPanel("makespan / ideal", "makespan ÷ (ceil(N/P)·D)")
	cost := newPanel("cost per node", "per node")
	series := func(system string, value func(*result) float64) plotter.XYs {
		var xys plotter.XYs
		for _, r := range results {
			if r.System == system && r.MakespanS > 0 {
				xys = append(xys, plotter.XY{X: float64(r.Nodes), Y: value(r)})
			}
		}
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
		return xys
	}
	drawn := 0
	add := func(p *plot.Plot, label string, xys plotter.XYs, c color.Color, dashed bool, shape draw.GlyphDrawer) error {
		if len(xys) == 0 {
			return nil
		}
		drawn++
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width = c, vg.Points(1.5)
		if dashed {
			line.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		points.Color, points.Shape, points.Radius = c, shape, vg.Points(3)
		p.Add(line, points)
		p.Legend.Add(label, line, points)
		return nil
	}
	steps := []struct {
		p      *plot.Plot
		label  string
		system string
		value  func(*result) float64
		color  color.Color
		dashed bool
		shape  draw.GlyphDrawer
	}{
		{ratio, "noderollout", systemNoderollout, func(r *result) float64 { return r.Ratio }, colorNoderollout, false, draw.CircleGlyph{}},
		{ratio, "baseline (client-go)", systemBaseline, func(r *result) float64 { return r.Ratio }, colorBaseline, true, draw.SquareGlyph{}},
		{ratio, "system-upgrade-controller, rate limit raised", systemSUCQPS, func(r *result) float64 { return r.Ratio }, colorPeer, false, draw.PyramidGlyph{}},
		{ratio, "system-upgrade-controller as shipped", systemSUC, func(r *result) float64 { return r.Ratio }, colorPeer, true, draw.PyramidGlyph{}},
		{ratio, "temporal-floor", systemTemporalFloor, func(r *result) float64 { return r.Ratio }, colorFloor, true, draw.RingGlyph{}},
		{cost, "noderollout API writes", systemNoderollout, func(r *result) float64 { return r.OwnWritesPerNode }, colorNoderollout, false, draw.CircleGlyph{}},
		{cost, "noderollout API reads", systemNoderollout, func(r *result) float64 { return r.OwnReadsPerNode }, colorNoderollout, true, draw.TriangleGlyph{}},
		{cost, "baseline API writes", systemBaseline, func(r *result) float64 { return r.OwnWritesPerNode }, colorBaseline, false, draw.SquareGlyph{}},
		{cost, "baseline API reads", systemBaseline, func(r *result) float64 { return r.OwnReadsPerNode }, colorBaseline, true, draw.TriangleGlyph{}},
		{cost, "noderollout history events", systemNoderollout, func(r *result) float64 { return r.HistoryEventsPerNode }, colorHistory, false, draw.CrossGlyph{}},
		{cost, "noderollout Temporal actions", systemNoderollout, func(r *result) float64 { return r.ActionsPerNode }, colorHistory, true, draw.PlusGlyph{}},
		{cost, "system-upgrade-controller API writes (rate limit raised)", systemSUCQPS, func(r *result) float64 { return r.OwnWritesPerNode }, colorPeer, false, draw.PyramidGlyph{}},
	}
	for _, s := range steps {
		if err := add(s.p, s.label, series(s.system, s.value), s.color, s.dashed, s.shape); err != nil {
			return err
		}
	}
	if drawn == 0 {
		return nil // nothing a log-scale axis can show
	}
	ideal := plotter.NewFunction(func(float64) float64 { return 1 })
	ideal.Color, ideal.Dashes = color.Gray{Y: 0x80}, []vg.Length{vg.Points(2), vg.Points(2)}
	ratio.Add(ideal)
	ratio.Legend.Add("ideal", ideal)
	// Head room above the data for the legends, top right.
	ratio.Y.Min, cost.Y.Min = 0, 0
	for _, r := range results {
		ratio.Y.Max = max(ratio.Y.Max, 1.4*r.Ratio)
		cost.Y.Max = max(cost.Y.Max, 1.5*r.HistoryEventsPerNode, 1.5*r.OwnWritesPerNode)
	}
	ratio.Y.Max, cost.Y.Max = math.Ceil(2*ratio.Y.Max)/2, math.Ceil(cost.Y.Max/5)*5

	const width, height = 11 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 2,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	panels := [][]*plot.Plot{{ratio, cost}}
	canvases := plot.Align(panels, tiles, dc)
	ratio.Draw(canvases[0][0])
	cost.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPanel(title, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "nodes (N, log scale)"
	p.Y.Label.Text = ylabel
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p
}
