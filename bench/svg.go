package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// svg draws one horizontal bar per scenario: how many times better Warren
// is than RabbitMQ (the ratio for throughput, its inverse for latency,
// memory and time), on a log scale, with the target as a tick. Green bars
// meet their target, orange ones do not.
func (r *runner) svg() string {
	const (
		left, right, top, rowH, barH = 330.0, 90.0, 56.0, 30.0, 18.0
		plotW                        = 520.0
	)
	rows := 0
	for _, res := range r.results {
		if res.Ratio > 0 {
			rows++
		}
	}
	width := left + plotW + right
	height := top + rowH*float64(rows) + 40
	// The log scale spans 0.5x to the largest factor or target.
	maxF := 10.0
	for _, res := range r.results {
		if res.Ratio > 0 {
			maxF = math.Max(maxF, math.Max(better(res), goal(res))*1.3)
		}
	}
	minF := 0.5
	x := func(f float64) float64 {
		f = math.Max(f, minF)
		return left + plotW*math.Log(f/minF)/math.Log(maxF/minF)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">Warren vs RabbitMQ on the same machine: times better (log scale)</text>`+"\n", 10.0)
	fmt.Fprintf(&b, `<text x="%.0f" y="40" fill="#555">median of %d rounds; throughput: Warren/RabbitMQ; latency, memory, time: RabbitMQ/Warren; tick = target</text>`+"\n", 10.0, r.o.rounds)
	for _, f := range []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} {
		if f > maxF {
			break
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ddd"/>`+"\n", x(f), top-6, x(f), top+rowH*float64(rows))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#555">%gx</text>`+"\n", x(f), top+rowH*float64(rows)+16, f)
	}
	i := 0
	for _, res := range r.results {
		if res.Ratio <= 0 {
			continue
		}
		y := top + rowH*float64(i)
		i++
		f, g := better(res), goal(res)
		color := "#e8912d"
		if res.Met {
			color = "#3a9a4a"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y+barH-4, html.EscapeString(res.What))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.0f" fill="%s"/>`+"\n", x(minF), y, math.Max(x(f)-x(minF), 1), barH, color)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="2"/>`+"\n", x(g), y-3, x(g), y+barH+3)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%.1fx</text>`+"\n", math.Max(x(f), x(g))+6, y+barH-4, f)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// better is how many times better Warren is.
func better(res *scenarioResult) float64 {
	if res.Higher {
		return res.Ratio
	}
	return 1 / res.Ratio
}

// goal is the target in the same terms as better.
func goal(res *scenarioResult) float64 {
	if res.Higher {
		return res.Target
	}
	return 1 / res.Target
}
