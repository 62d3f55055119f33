package main

import (
	"fmt"
	"slices"
	"strings"
)

// spread is a measure over the repetitions of one row: its median, the middle value (the mean
// of the two middle ones for an even count), and its range.
type spread struct {
	Median, Min, Max float64
	N                int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// format is "median (min–max)", or the value alone for one repetition.
func (s spread) format(prec int) string {
	f := func(v float64) string { return fmt.Sprintf("%.*f", prec, v) }
	if s.N <= 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

// row is one system at one setting (N, P, D) over its repetitions.
type row struct {
	System      string
	Nodes       int
	Parallelism int
	JobSeconds  float64
	Makespan    spread // seconds
	VsBaseline  spread // paired: each repetition against the baseline of the same repetition
	VsSUC       spread // paired: each repetition against the faster peer run of the same repetition
	ClientCPU   spread // ms per node: the worker, the baseline or the peer's process
	TemporalCPU spread // ms per node
	AllCPU      spread // ms per node: every process of the stack and the client
	Actions     spread // Temporal actions per node, queries left out
	Events      spread // history events per node
	HistoryKiB  spread // history KiB per node
}

// rows groups the results by system and setting, in the order they first appear.
func rows(results []*result) []row {
	type key struct {
		system string
		n, p   int
		d      float64
	}
	var order []key
	groups := map[key][]*result{}
	for _, r := range results {
		k := key{r.System, r.Nodes, r.Parallelism, r.JobSeconds}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []row
	for _, k := range order {
		var mk, vs, vp, cl, tc, all, act, ev, kib []float64
		for _, r := range groups[k] {
			perNode := 1000 / float64(max(1, r.Nodes))
			mk = append(mk, r.MakespanS)
			if r.VsBaseline > 0 {
				vs = append(vs, r.VsBaseline)
			}
			if r.VsSUC > 0 {
				vp = append(vp, r.VsSUC)
			}
			cl = append(cl, r.Process.CPU*perNode)
			tc = append(tc, r.temporalCPU()*perNode)
			all = append(all, r.allCPU()*perNode)
			if usesTemporal(r.System) {
				act = append(act, r.ActionsPerNode)
			}
			if r.History != nil {
				ev = append(ev, r.HistoryEventsPerNode)
				kib = append(kib, r.HistoryBytesPerNode/1024)
			}
		}
		out = append(out, row{System: k.system, Nodes: k.n, Parallelism: k.p, JobSeconds: k.d,
			Makespan: spreadOf(mk), VsBaseline: spreadOf(vs), VsSUC: spreadOf(vp), ClientCPU: spreadOf(cl), TemporalCPU: spreadOf(tc),
			AllCPU: spreadOf(all), Actions: spreadOf(act), Events: spreadOf(ev), HistoryKiB: spreadOf(kib)})
	}
	return out
}

// markdownRows is the headline table: medians with their ranges over the repetitions.
func markdownRows(results []*result) string {
	var b strings.Builder
	b.WriteString("| N | P | D s | system | runs | makespan s | vs baseline | vs SUC | client CPU ms / node | Temporal CPU ms / node | all CPU ms / node | Temporal actions / node | history events / node | history KiB / node |\n")
	b.WriteString("|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	ratio := func(s spread) string {
		if s.N == 0 {
			return "–"
		}
		return s.format(2) + "×"
	}
	orDash := func(s spread, prec int) string {
		if s.N == 0 {
			return "–"
		}
		return s.format(prec)
	}
	for _, r := range rows(results) {
		fmt.Fprintf(&b, "| %s | %d | %g | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			thousands(r.Nodes), r.Parallelism, r.JobSeconds, r.System, r.Makespan.N, r.Makespan.format(1), ratio(r.VsBaseline),
			ratio(r.VsSUC), r.ClientCPU.format(1), r.TemporalCPU.format(1), r.AllCPU.format(0),
			orDash(r.Actions, 2), orDash(r.Events, 1), orDash(r.HistoryKiB, 1))
	}
	return b.String()
}
