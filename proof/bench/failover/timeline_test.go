// SPDX-License-Identifier: Apache-2.0

package failover

import (
	"context"
	"fmt"
	"image/color"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/v2bridge/v2bridge/v2bridgetest"
)

const (
	// timelineEvery is how often the timeline samples the bridge's metrics.
	timelineEvery = 50 * time.Millisecond
	// timelineRead is the pace of the reader the timeline adds.
	timelineRead = 20 * time.Millisecond
	// timelineMargin is how long the timeline runs before the fault and
	// after the bridge is healthy again.
	timelineMargin = 2 * time.Second
)

// point is one sample of the bridge's own metrics, as a scrape of /metrics
// would see them.
type point struct {
	when              time.Time
	at                time.Duration // since the fault
	watchers, up      float64       // v2bridge_v2_watchers, v2bridge_backend_up
	losses            float64       // v2bridge_backend_losses_total
	answered, errored float64       // v2bridge_http_requests_total, codes below 500 and 5xx
}

// timeline runs one more fault of member bad, outside the table's trials,
// with a reader added (a GET through the bridge every timelineRead) and the
// bridge's metrics sampled every timelineEvery, and draws it to png. heal
// lifts the fault and waits until the bridge is healthy.
func timeline(t *testing.T, br *v2bridgetest.Bridge, bad int, breakIt, heal func(int), png string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { // the reader
		c := &http.Client{Timeout: 5 * time.Second}
		for ctx.Err() == nil {
			if resp, err := c.Get(br.URL + "/v2/keys" + prefix + "/k000000"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			select {
			case <-ctx.Done():
			case <-time.After(timelineRead):
			}
		}
	})
	var mu sync.Mutex // guards pts
	var pts []point
	wg.Go(func() { // the sampler
		tick := time.NewTicker(timelineEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p, err := sampleBridge(br)
			if err != nil {
				continue
			}
			p.when = time.Now()
			mu.Lock()
			pts = append(pts, p)
			mu.Unlock()
		}
	})
	time.Sleep(timelineMargin)
	losses := func() float64 {
		p, err := sampleBridge(br)
		if err != nil {
			t.Fatal(err)
		}
		return p.losses
	}
	l0 := losses()
	t0 := time.Now()
	breakIt(bad)
	// The fault lasts until the bridge has declared the member lost and
	// serves from another one, and a second more.
	waitFor(t, "the bridge to declare the member lost", func() bool { return losses() > l0 })
	lost := time.Since(t0)
	waitFor(t, "the bridge to serve again during the fault", br.Backend.Ready)
	time.Sleep(time.Second)
	lifted := time.Since(t0)
	heal(bad)
	time.Sleep(timelineMargin)
	cancel()
	wg.Wait()
	for i := range pts {
		pts[i].at = pts[i].when.Sub(t0)
	}
	if err := drawTimeline(pts, lost, lifted, png); err != nil {
		t.Fatal(err)
	}
	t.Logf("timeline of one fault: %s (%d samples)", png, len(pts))
}

func sampleBridge(br *v2bridgetest.Bridge) (point, error) {
	fams, err := br.Registry.Gather()
	if err != nil {
		return point{}, err
	}
	var p point
	for _, f := range fams {
		switch f.GetName() {
		case "v2bridge_v2_watchers":
			p.watchers = f.GetMetric()[0].GetGauge().GetValue()
		case "v2bridge_backend_up":
			p.up = f.GetMetric()[0].GetGauge().GetValue()
		case "v2bridge_backend_losses_total":
			p.losses = f.GetMetric()[0].GetCounter().GetValue()
		case "v2bridge_http_requests_total":
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() != "code" {
						continue
					}
					if l.GetValue() >= "500" {
						p.errored += m.GetCounter().GetValue()
					} else {
						p.answered += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return p, nil
}

// drawTimeline draws three panels over the same time axis: the backend
// up (and losses declared), the v2 watches open, and the requests answered
// and failed per second; lines mark the fault, the loss declared and the
// fault lifted.
func drawTimeline(pts []point, lost, lifted time.Duration, file string) error {
	if len(pts) < 2 {
		return fmt.Errorf("timeline: %d samples", len(pts))
	}
	xy := func(f func(i int) float64) plotter.XYs {
		out := make(plotter.XYs, 0, len(pts))
		for i, p := range pts {
			out = append(out, plotter.XY{X: p.at.Seconds(), Y: f(i)})
		}
		return out
	}
	// per second over the last half second
	const w = 5
	rate := func(f func(p point) float64) func(i int) float64 {
		return func(i int) float64 {
			j := max(i-w, 0)
			dt := (pts[i].at - pts[j].at).Seconds()
			if dt <= 0 {
				return 0
			}
			return (f(pts[i]) - f(pts[j])) / dt
		}
	}
	blue := color.RGBA{B: 200, A: 255}
	red := color.RGBA{R: 220, A: 255}
	green := color.RGBA{G: 150, A: 255}
	grey := color.RGBA{R: 120, G: 120, B: 120, A: 255}

	type labelled struct {
		l     *plotter.Line
		label string
	}
	panel := func(title, ylabel string, ymax float64, lines ...labelled) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		p.X.Label.Text = "seconds since the member was frozen (SIGSTOP); grey dashes: frozen, thawed; red dots: loss declared"
		p.Y.Min, p.Y.Max = 0, ymax
		p.X.Tick.Marker = secondTicks{}
		p.Add(plotter.NewGrid())
		for _, m := range []struct {
			at   time.Duration
			c    color.Color
			dash []vg.Length
		}{{0, grey, []vg.Length{vg.Points(4), vg.Points(3)}}, {lost, red, []vg.Length{vg.Points(1), vg.Points(2)}},
			{lifted, grey, []vg.Length{vg.Points(4), vg.Points(3)}}} {
			v, _ := plotter.NewLine(plotter.XYs{{X: m.at.Seconds(), Y: 0}, {X: m.at.Seconds(), Y: ymax}})
			v.Color, v.Dashes = m.c, m.dash
			p.Add(v)
		}
		for _, l := range lines {
			p.Add(l.l)
			if l.label != "" {
				p.Legend.Add(l.label, l.l)
			}
		}
		p.Legend.Top = true
		return p
	}
	line := func(xys plotter.XYs, c color.Color, label string, step bool) labelled {
		l, _ := plotter.NewLine(xys)
		l.Color, l.Width = c, vg.Points(1.5)
		if step {
			l.StepStyle = plotter.PostStep
		}
		return labelled{l, label}
	}
	var maxW, maxR float64
	answered := xy(rate(func(p point) float64 { return p.answered }))
	errored := xy(rate(func(p point) float64 { return p.errored }))
	for i, p := range pts {
		maxW = max(maxW, p.watchers)
		maxR = max(maxR, answered[i].Y, errored[i].Y)
	}
	up := line(xy(func(i int) float64 { return pts[i].up }), green, "up", true)
	losses := line(xy(func(i int) float64 { return pts[i].losses - pts[0].losses }), red, "losses declared", true)
	watchers := line(xy(func(i int) float64 { return pts[i].watchers }), blue, "", true)
	plots := [][]*plot.Plot{
		{panel("backend up (v2bridge_backend_up), losses declared (v2bridge_backend_losses_total)", "", 1.6, up, losses)},
		{panel("v2 watches open (v2bridge_v2_watchers)", "watches", maxW+1, watchers)},
		{panel("v2 requests per second (v2bridge_http_requests_total)", "per second", maxR*1.15+1,
			line(answered, blue, "answered (below 500)", false), line(errored, red, "errors (5xx)", false))},
	}
	img := vgimg.New(vg.Points(720), vg.Points(720))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadX: vg.Millimeter, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	cs := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(cs[i][0])
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// secondTicks marks every whole second.
type secondTicks struct{}

func (secondTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for s := math.Ceil(lo); s <= hi; s++ {
		ts = append(ts, plot.Tick{Value: s, Label: strconv.FormatFloat(s, 'f', 0, 64)})
	}
	return ts
}
