package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// writeResults writes results.{md,csv,json,png} into cfg.out.
func writeResults(cfg config, run string, date time.Time, results []*result) error {
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	if err := writeCSV(filepath.Join(cfg.out, "results.csv"), results); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(map[string]any{"run": run, "date": date, "config": cfgSummary(cfg), "results": results}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "results.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, "results.md"), []byte(markdownReport(cfg, run, date, results)), 0o644); err != nil {
		return err
	}
	if len(results) > 0 {
		if err := writePlot(filepath.Join(cfg.out, "results.png"), results); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return nil
}

// savedCfg is the part of the configuration results.json records.
type savedCfg struct {
	Mode        string   `json:"mode"`
	Sizes       []int    `json:"sizes"`
	Parallelism int      `json:"parallelism"`
	JobSeconds  float64  `json:"jobSeconds"`
	FailPercent int      `json:"failPercent"`
	Systems     []string `json:"systems"`
	CPUs        int      `json:"cpus"`
}

func cfgSummary(cfg config) savedCfg {
	return savedCfg{Mode: cfg.mode, Sizes: cfg.sizes, Parallelism: cfg.parallelism, JobSeconds: cfg.jobSeconds,
		FailPercent: cfg.failPercent, Systems: cfg.systems, CPUs: runtime.NumCPU()}
}

// csvHeader is the CSV's column order, which tools reading it depend on.
var csvHeader = []string{"system", "nodes", "parallelism", "job_seconds", "makespan_s", "ideal_s", "makespan_ratio",
	"api_writes_per_node", "api_reads_per_node", "history_events_per_node", "worker_rss_mb", "worker_cpu_s", "continue_as_new",
	"temporal_actions_per_node", "temporal_queries_per_node", "history_bytes_per_node", "scheduler_cpu_s", "vs_suc"}

func writeCSV(path string, results []*result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(csvHeader)
	num := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	for _, r := range results {
		_ = w.Write([]string{
			r.System, strconv.Itoa(r.Nodes), strconv.Itoa(r.Parallelism), num(r.JobSeconds, -1),
			num(r.MakespanS, 1), num(r.IdealS, 0), num(r.Ratio, 3),
			num(r.OwnWritesPerNode, 2), num(r.OwnReadsPerNode, 2), num(r.HistoryEventsPerNode, 1),
			num(r.Process.PeakMB, 1), num(r.Process.CPU, 1), strconv.Itoa(r.ContinueAsNew),
			num(r.ActionsPerNode, 2), num(r.QueriesPerNode, 2), num(r.HistoryBytesPerNode, 0),
			num(r.StackCPU["kube-scheduler"], 1), num(r.VsSUC, 3),
		})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// markdownSummary is the main table.
func markdownSummary(results []*result) string {
	var b strings.Builder
	b.WriteString("| N | D s | rep | system | makespan s | ideal s | makespan / ideal | vs baseline | vs SUC | own writes / node | own reads / node | own Job GETs | all-client writes / node | all-client reads / node | history events / node | history KiB / node | Temporal actions / node | queries / node | activity attempts / node | peak RSS MB | CPU s | Temporal CPU s | apiserver CPU s | scheduler CPU s | continue-as-new | succeeded / failed / other of N |\n")
	b.WriteString("|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, r := range results {
		hist, kib, attempts, can := "–", "–", "–", "–"
		if r.History != nil {
			hist, kib, attempts, can = f1(r.HistoryEventsPerNode), f1(r.HistoryBytesPerNode/1024), f2(r.ActivityAttemptsPerNode), strconv.Itoa(r.ContinueAsNew)
		}
		actions, queries := "–", "–"
		if usesTemporal(r.System) {
			actions, queries = f2(r.ActionsPerNode), f2(r.QueriesPerNode)
		}
		vs, vsSUC := "–", "–"
		if r.VsBaseline > 0 {
			vs = f2(r.VsBaseline) + "×"
		}
		if r.VsSUC > 0 {
			vsSUC = f2(r.VsSUC) + "×"
		}
		fmt.Fprintf(&b, "| %s | %g | %d | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d / %d of %d |\n",
			thousands(r.Nodes), r.JobSeconds, r.Rep+1, r.System, f1(r.MakespanS), f1(r.IdealS), idealRatio(r), vs, vsSUC,
			f2(r.OwnWritesPerNode), f2(r.OwnReadsPerNode), r.OwnJobGets, f2(r.AllWritesPerNode), f2(r.AllReadsPerNode),
			hist, kib, actions, queries, attempts, f1(r.Process.PeakMB), f1(r.Process.CPU), f1(r.temporalCPU()), f1(r.StackCPU["kube-apiserver"]),
			f1(r.StackCPU["kube-scheduler"]), can, r.Succeeded, r.Failed, r.Other, r.Nodes)
	}
	return b.String()
}

func markdownReport(cfg config, run string, date time.Time, results []*result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# noderollout scale benchmark\n\n")
	mode, fake := cfg.mode, onFakeFleet(results)
	if fake {
		mode = "scale"
	}
	fmt.Fprintf(&b, "`dev/bench.sh %s` (run `%s`, %s) on the local stack: %d CPUs, %s. P = %d Jobs in flight, "+
		"D = %g s per Job, %s, `keepJobs: never`. The worker and the baseline are "+
		"separate processes with client QPS 1000 / burst 2000. What each column counts: README.md, section \"Benchmark\".\n\n",
		mode, run, date.Format("2006-01-02 15:04 UTC"), runtime.NumCPU(), memTotal(), cfg.parallelism, cfg.jobSeconds,
		failingNodes(cfg.failPercent))
	if fake {
		b.WriteString("On a fake fleet at the activity boundary (bench/fakeworker; bench/README.md, \"100,000 nodes\"): " +
			"noderollout's workflows and its ListNodes on the real Temporal server, no Node, Job or Pod on the API server, " +
			"so the API request columns count nothing of the rollout's.\n\n")
	}
	b.WriteString("Medians over the repetitions with their range; the systems alternate A B, B A, A B across repetitions " +
		"and \"vs baseline\" pairs each run with the full baseline of the same repetition. Both clocks start at the start " +
		"request (`ExecuteWorkflow`, or the start line to the ready baseline process), with both systems' informers " +
		"already started and synced, outside the clock. The machine is shared: " + loadSummary(results) + ".\n\n")
	b.WriteString(markdownRows(results))
	b.WriteString("\nEvery run:\n\n")
	b.WriteString(markdownSummary(results))
	b.WriteString("\n![makespan ratio and per-node cost against N](results.png)\n")

	b.WriteString("\n## Targets\n\n")
	for _, line := range targets(results) {
		b.WriteString("- " + line + "\n")
	}

	b.WriteString(fakeFleetSection(results))
	if traced(results) {
		b.WriteString(slotSection(results))
	}

	b.WriteString(historyBytesSection(results))

	var nr []*result
	for _, r := range results {
		if isNoderollout(r.System) && r.History != nil {
			nr = append(nr, r)
		}
	}
	if len(nr) > 0 {
		b.WriteString("\n## Inside noderollout, from the workflow histories\n\n")
		b.WriteString("Mean / p95 seconds between history events (Temporal server timestamps). Child: one NodeRollout. " +
			"Parent: the Rollout runs.\n\n")
		b.WriteString("| step | " + joinN(nr, func(r *result) string { return "N=" + thousands(r.Nodes) }) + " |\n")
		b.WriteString("|---|" + strings.Repeat("--:|", len(nr)) + "\n")
		row := func(name string, pick func(h *historyStats) stat) {
			b.WriteString("| " + name + " | " + joinN(nr, func(r *result) string {
				s := pick(r.History)
				return f2(s.Mean) + " / " + f2(s.P95)
			}) + " |\n")
		}
		row("child: started → first workflow task started", func(h *historyStats) stat { return h.Child.StartToFirstWFT })
		row("child: first task (CreateJob local activity) → completed", func(h *historyStats) stat { return h.Child.FirstWFT })
		row("child: WaitJob scheduled → started", func(h *historyStats) stat { return h.Child.WaitScheduleToStart })
		row("child: WaitJob started → completed", func(h *historyStats) stat { return h.Child.WaitRun })
		row("child: WaitJob completed → next task started", func(h *historyStats) stat { return h.Child.WaitDoneToWFT })
		row("child: that task (FinalizeJob local activity) → child closed", func(h *historyStats) stat { return h.Child.FinalizeToClose })
		row("child: started → closed", func(h *historyStats) stat { return h.Child.StartToClose })
		row("child: workflow task schedule → start", func(h *historyStats) stat { return h.Child.WFTScheduleToStart })
		row("child: workflow task start → complete", func(h *historyStats) stat { return h.Child.WFTStartToComplete })
		row("parent: child closed → next child initiated", func(h *historyStats) stat { return h.Parent.ChildClosedToNext })
		row("parent: child initiated → child started", func(h *historyStats) stat { return h.Parent.InitiatedToStarted })
		row("parent: workflow task schedule → start", func(h *historyStats) stat { return h.Parent.WFTScheduleToStart })
		row("parent: workflow task start → complete", func(h *historyStats) stat { return h.Parent.WFTStartToComplete })

		b.WriteString("\nHistories: events, runs and sizes.\n\n")
		b.WriteString("| N | runs | parent events | child events | events / node | largest run (events) | largest run (KiB) | total MiB | activities / attempts | local activities / attempts | continue-as-new drain s | gap s | history-limit warnings | read in s |\n")
		b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, r := range nr {
			h := r.History
			fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %.0f | %.1f | %d / %d | %d / %d | %.1f | %.1f | %d | %.0f |\n", thousands(r.Nodes),
				h.Runs, h.ParentEvents, h.ChildEvents, f1(r.HistoryEventsPerNode), h.MaxRunEvents, float64(h.MaxRunBytes)/1024,
				float64(h.TotalBytes)/(1<<20), h.ActivityTasks, h.ActivityAttempts, h.LocalActivities, h.LocalAttempts,
				h.CANDrainSeconds, h.CANGapSeconds, len(r.HistoryWarnings), h.ReadSeconds)
		}
		b.WriteString("\nEvents per node by type (parent share, then children):\n\n")
		for _, r := range nr {
			fmt.Fprintf(&b, "- N=%s parent: %s\n", thousands(r.Nodes), perNodeTypes(r.History.ParentByType, r.Nodes))
			fmt.Fprintf(&b, "- N=%s children: %s\n", thousands(r.Nodes), perNodeTypes(r.History.ChildByType, r.Nodes))
		}
		for _, r := range nr {
			for _, w := range r.HistoryWarnings {
				fmt.Fprintf(&b, "- N=%s Temporal server warning: `%s`\n", thousands(r.Nodes), w)
			}
		}

		b.WriteString("\n## Worker SDK metrics (means over the rollout)\n\n")
		b.WriteString("| metric | key | " + joinN(nr, func(r *result) string { return "N=" + thousands(r.Nodes) }) + " |\n")
		b.WriteString("|---|---|" + strings.Repeat("--:|", len(nr)) + "\n")
		type id struct{ name, key string }
		var ids []id
		seen := map[id]bool{}
		for _, r := range nr {
			for _, t := range r.SDKTimers {
				if k := (id{t.Name, t.Key}); !seen[k] {
					seen[k] = true
					ids = append(ids, k)
				}
			}
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i].name+ids[i].key < ids[j].name+ids[j].key })
		for _, k := range ids {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", strings.TrimPrefix(k.name, "temporal_"), k.key, joinN(nr, func(r *result) string {
				for _, t := range r.SDKTimers {
					if t.Name == k.name && t.Key == k.key {
						return fmt.Sprintf("%.3f s (%.0f)", t.Mean, t.Count)
					}
				}
				return "–"
			}))
		}
		for _, r := range nr {
			var parts []string
			for _, c := range r.SDKCounters {
				name := strings.TrimPrefix(c.Name, "temporal_")
				if c.Key != "" {
					name += "{" + c.Key + "}"
				}
				parts = append(parts, fmt.Sprintf("%s %.0f", name, c.Value))
			}
			fmt.Fprintf(&b, "\nN=%s counters: %s\n", thousands(r.Nodes), strings.Join(parts, ", "))
		}
	}

	if len(nr) > 0 {
		b.WriteString("\n## Temporal server: where its time goes during the rollout\n\n")
		b.WriteString("From the dev server's own Prometheus metrics, before/after difference; the 15 largest by total time. " +
			"task_latency_queue: how long a history task (e.g. TransferActiveTaskStartChildExecution) waited before it ran; " +
			"persistence_latency: time in the SQLite persistence per operation.\n\n")
		for _, r := range nr {
			var ts []timer
			var attempts []string
			for _, t := range r.ServerTimers {
				if t.Name == "task_attempt" {
					attempts = append(attempts, fmt.Sprintf("%s %.2f (%.0f tasks)", t.Key, t.Mean, t.Count))
				} else {
					ts = append(ts, t)
				}
			}
			sort.Slice(ts, func(i, j int) bool { return ts[i].Sum > ts[j].Sum })
			if len(ts) > 15 {
				ts = ts[:15]
			}
			fmt.Fprintf(&b, "N=%s:\n\n| metric | key | count | mean ms | total s |\n|---|---|--:|--:|--:|\n", thousands(r.Nodes))
			for _, t := range ts {
				fmt.Fprintf(&b, "| %s | %s | %.0f | %.1f | %.1f |\n", t.Name, t.Key, t.Count, 1000*t.Mean, t.Sum)
			}
			sort.Strings(attempts)
			fmt.Fprintf(&b, "\nAttempts per history task: %s.\n", strings.Join(attempts, ", "))
			var busy []string
			for k, v := range r.ServerCounters {
				busy = append(busy, fmt.Sprintf("%s %.0f", k, v))
			}
			sort.Strings(busy)
			fmt.Fprintf(&b, "\nRefused because the workflow was busy (locked): %s.\n\n", strings.Join(busy, ", "))
		}
	}

	b.WriteString("\n## CPU seconds during the rollout, by process\n\n")
	b.WriteString("CPU floor: all these CPU seconds spread over every core, the makespan if the machine did the same work and never idled.\n\n")
	b.WriteString("| N | system | worker, baseline or peer | temporal (its PostgreSQL included) | kube-apiserver | etcd | kube-controller-manager | kube-scheduler | kwok | bench (proxy, watch) | all | CPU floor s | makespan s | machine busy |\n")
	b.WriteString("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		c := r.StackCPU
		all := r.allCPU()
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% |\n", thousands(r.Nodes), r.System, f1(r.Process.CPU),
			f1(r.temporalCPU()), f1(c["kube-apiserver"]), f1(c["etcd"]), f1(c["kube-controller-manager"]), f1(c["kube-scheduler"]), f1(c["kwok"]), f1(c["bench"]),
			f1(all), f1(r.cpuFloor()), f1(r.MakespanS), r.MachineBusyPct)
	}

	b.WriteString(actionsSection(results))
	b.WriteString(peerSection(results))

	b.WriteString("\n## API requests by verb and resource\n\n")
	for _, r := range results {
		fmt.Fprintf(&b, "- N=%s %s, own: %s\n", thousands(r.Nodes), r.System, strings.Join(r.Own.sorted(), ", "))
		all := r.All.sorted()
		if len(all) > 14 {
			all = append(all[:14], "…")
		}
		fmt.Fprintf(&b, "- N=%s %s, all clients: %s\n", thousands(r.Nodes), r.System, strings.Join(all, ", "))
	}
	b.WriteString("\nMean API server time per own request, as the proxy saw it (request to end of response; watches left out):\n\n")
	for _, r := range results {
		var parts []string
		for k, v := range r.OwnLatency {
			parts = append(parts, fmt.Sprintf("%s %.1f ms", k, 1000*v))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "- N=%s %s: %s\n", thousands(r.Nodes), r.System, strings.Join(parts, ", "))
	}
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(&b, "\nN=%s %s error: %s\n", thousands(r.Nodes), r.System, r.Error)
		}
	}
	return b.String()
}

// targets checks the targets against what was measured.
func targets(results []*result) []string {
	find := func(system string, n int) *result {
		for _, r := range results {
			if r.System == system && r.Nodes == n {
				return r
			}
		}
		return nil
	}
	verdict := func(ok bool) string {
		if ok {
			return "**met**"
		}
		return "**missed**"
	}
	var out []string
	for _, c := range []struct {
		n     int
		limit float64
	}{{1000, 1.05}, {10000, 1.15}} {
		for _, row := range rows(results) {
			if row.System != systemNoderollout || row.Nodes != c.n || row.VsBaseline.N == 0 || row.Parallelism < 100 {
				continue
			}
			out = append(out, fmt.Sprintf("makespan at N=%s ≤ %.2f× the fair baseline's: median %s× over %d runs — %s; "+
				"Temporal CPU %s ms / node (target ≤ 20), worker CPU %s ms / node (target ≤ 6)",
				thousands(c.n), c.limit, row.VsBaseline.format(2), row.VsBaseline.N, verdict(row.VsBaseline.Median <= c.limit),
				row.TemporalCPU.format(1), row.ClientCPU.format(1)))
		}
	}
	for _, r := range results {
		if r.System != systemNoderollout {
			continue
		}
		out = append(out, fmt.Sprintf("N=%s: worker API writes per node ≤ 4: %.2f — %s; polling GETs (Job GETs) = 0: %.0f — %s; "+
			"history events per node ≤ 25: %.1f — %s; history-limit warnings: %d — %s",
			thousands(r.Nodes), r.OwnWritesPerNode, verdict(r.OwnWritesPerNode <= 4), r.OwnJobGets, verdict(r.OwnJobGets == 0),
			r.HistoryEventsPerNode, verdict(r.HistoryEventsPerNode <= 25), len(r.HistoryWarnings), verdict(len(r.HistoryWarnings) == 0)))
	}
	for _, r := range results {
		if r.System == systemNoderollout && r.JobSeconds <= 5 && len(r.Actions) > 0 {
			out = append(out, fmt.Sprintf("N=%s D=%g s (repetition %d): Temporal actions per node ≤ 6: %.2f (and %.2f queries per node from whoever followed it) — %s",
				thousands(r.Nodes), r.JobSeconds, r.Rep+1, r.ActionsPerNode, r.QueriesPerNode, verdict(r.ActionsPerNode <= 6)))
		}
	}
	if r := find(systemNoderollout, 10000); r != nil {
		out = append(out, fmt.Sprintf("worker peak RSS at N=10,000 ≤ 150 MB: %.0f MB — %s", r.Process.PeakMB, verdict(r.Process.PeakMB <= 150)))
	}
	for _, r := range results {
		if lost := r.lost(); lost != "" {
			out = append(out, fmt.Sprintf("N=%s %s lost nodes: %s", thousands(r.Nodes), r.System, lost))
		}
	}
	return out
}

func perNodeTypes(m map[string]int, n int) string { return perNodeByType(m, n, 2) }

// perNodeByType lists m's values per node, largest first, with digits decimals.
func perNodeByType(m map[string]int, n, digits int) string {
	type kv struct {
		k string
		v int
	}
	var list []kv
	for k, v := range m {
		list = append(list, kv{strings.TrimPrefix(k, "EVENT_TYPE_"), v})
	}
	sort.Slice(list, func(i, j int) bool { return list[i].v > list[j].v || (list[i].v == list[j].v && list[i].k < list[j].k) })
	parts := make([]string, len(list))
	for i, e := range list {
		parts[i] = strings.ToLower(e.k) + " " + strconv.FormatFloat(float64(e.v)/float64(n), 'f', digits, 64)
	}
	return strings.Join(parts, ", ")
}

func joinN(rs []*result, f func(*result) string) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = f(r)
	}
	return strings.Join(parts, " | ")
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }
func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown memory"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return fmt.Sprintf("%.0f GiB", kib/(1<<20))
		}
	}
	return "unknown memory"
}

// loadSummary gives the machine's 1-minute load average at the runs' starts.
func loadSummary(results []*result) string {
	var loads []float64
	for _, r := range results {
		if r.LoadAvg > 0 {
			loads = append(loads, r.LoadAvg)
		}
	}
	if len(loads) == 0 {
		return "load average not recorded"
	}
	return fmt.Sprintf("1-minute load average %s at the runs' starts on %d CPUs", spreadOf(loads).format(2), runtime.NumCPU())
}

// actionsSection breaks each Temporal run's actions down by type, per node.
func actionsSection(results []*result) string {
	var b strings.Builder
	first := true
	for _, r := range results {
		if !usesTemporal(r.System) || len(r.Actions) == 0 {
			continue
		}
		if first {
			b.WriteString("\n## Temporal actions, by type\n\n")
			b.WriteString("What Temporal Cloud would bill, from the dev server's own `action` counter (before/after difference), " +
				"per node. A child workflow is two (`command_StartChildWorkflowExecution` and its `_Extra`), each activity " +
				"scheduled, heartbeat, timer, signal and query one, the local activities of one workflow task one " +
				"(`command_BatchMarkers`). `grpc_QueryWorkflow` is whoever followed the rollout: the bench's own status " +
				"query every 15 s, or `starter status -w` with `--watch status-w`, and is left out of actions / node.\n\n")
			first = false
		}
		types := make([]string, 0, len(r.Actions))
		for k := range r.Actions {
			types = append(types, k)
		}
		sort.Slice(types, func(i, j int) bool {
			if r.Actions[types[i]] != r.Actions[types[j]] {
				return r.Actions[types[i]] > r.Actions[types[j]]
			}
			return types[i] < types[j]
		})
		parts := make([]string, len(types))
		for i, k := range types {
			parts[i] = fmt.Sprintf("%s %.2f", k, r.Actions[k]/float64(max(1, r.Nodes)))
		}
		watch := ""
		if r.Watch != "" {
			watch = fmt.Sprintf("; followed with `starter %s`: %.1f queries a minute", watchCommand[r.Watch], r.WatchQueriesPerMinute)
		}
		fmt.Fprintf(&b, "- N=%s D=%g s %s (repetition %d): %.2f actions / node (+ %.2f queries / node%s): %s\n",
			thousands(r.Nodes), r.JobSeconds, r.System, r.Rep+1, r.ActionsPerNode, r.QueriesPerNode, watch, strings.Join(parts, ", "))
	}
	return b.String()
}

// peerSection is what only the peer's runs show: its Jobs per node, the writes it still owes
// after the last node (its finished Jobs' deletion after their TTL), and its failing nodes.
func peerSection(results []*result) string {
	var b strings.Builder
	first := true
	for _, r := range results {
		if r.Peer == nil {
			continue
		}
		if first {
			b.WriteString("\n## The peer: system-upgrade-controller\n\n")
			b.WriteString("One Plan over the fleet, `concurrency: P`. Jobs / node counts every Job it created (most twice: " +
				"first paused, deleted as out of turn, created again). The tail is from the last node's label until its last " +
				"Job was gone: it keeps a finished Job for its TTL, then deletes it. A failing node's Job fails; the " +
				"node stays in `status.applying`, holding a slot, and gets a new Job once the failed one's TTL ran out.\n\n")
			b.WriteString("| N | system | rep | Jobs / node | own writes / node | + tail writes / node | tail s | Plan Complete | applying at the end | failing nodes: Jobs (failed), last Job created at s |\n")
			b.WriteString("|--:|---|--:|--:|--:|--:|--:|---|--:|---|\n")
			first = false
		}
		p := r.Peer
		_, tailWrites := p.TailOwn.totals()
		var failing []string
		for _, f := range p.FailingNodes {
			failing = append(failing, fmt.Sprintf("%s: %d (%d), %.0f", f.Node, f.Jobs, f.JobsFailed, f.LastCreatedS))
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s | %.0f | %t | %d | %s |\n", thousands(r.Nodes), r.System, r.Rep+1,
			f2(p.JobsPerNode), f2(r.OwnWritesPerNode), f2(tailWrites/float64(max(1, r.Nodes))), p.TailS, p.PlanComplete,
			len(p.ApplyingAtEnd), strings.Join(failing, "; "))
	}
	return b.String()
}

// watchCommand is the starter command each --watch runs.
var watchCommand = map[string]string{"status-w": "status -w", "start-wait": "start --wait"}

// idealRatio is makespan ÷ ideal, or "–" for Jobs that take no time (D = 0), whose ideal is 0.
func idealRatio(r *result) string {
	if r.IdealS == 0 {
		return "–"
	}
	return f2(r.Ratio)
}

// failingNodes says which nodes' Pods fail.
func failingNodes(percent int) string {
	if percent == 0 {
		return "no node's Pod fails"
	}
	return fmt.Sprintf("every %s node's Pod fails (%d%%)", ordinal(100/percent), percent)
}

// traced says whether any run has the bench's own watch on its Jobs and Pods (--trace).
func traced(results []*result) bool {
	for _, r := range results {
		if r.Slot.Running.N > 0 {
			return true
		}
	}
	return false
}

// slotSection is where a window slot's time goes, from the traced runs.
func slotSection(results []*result) string {
	var b strings.Builder
	b.WriteString("\n## Where a window slot's time goes\n\n")
	b.WriteString("Means in seconds, from the bench's own watch on the Jobs and Pods (one clock). A slot's cycle is " +
		"Job created → Pod created (Job controller) → Pod Running (kwok) → Pod ended (D) → Job condition set (Job controller) " +
		"→ Job deleted (the system noticed the end and finalized) → next Job created in the freed slot. " +
		"Makespan ≈ ⌈N/P⌉ × cycle ÷ slots busy, where slots busy is the share of the P × makespan slot-seconds that held a Job " +
		"(idle: the start, the tail, continue-as-new drains).\n\n")
	b.WriteString("| N | system | Job→Pod | Pod→Running | Running (D) | Pod end→Job done | Job done→deleted | deleted→next Job | cycle | overhead over D | slots busy | first Job after start | last deletion→done |\n")
	b.WriteString("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		s := r.Slot
		cycle := s.JobToPod.Mean + s.PodToRunning.Mean + s.Running.Mean + s.PodToJobDone.Mean + s.JobDoneToGone.Mean + s.GoneToNextJob.Mean
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f%% | %s | %s |\n", thousands(r.Nodes), r.System,
			f2(s.JobToPod.Mean), f2(s.PodToRunning.Mean), f2(s.Running.Mean), f2(s.PodToJobDone.Mean),
			f2(s.JobDoneToGone.Mean), f2(s.GoneToNextJob.Mean), f2(cycle), f2(cycle-r.JobSeconds), 100*s.Utilization,
			f2(s.FirstJob), f2(s.LastGoneToEnd))
	}
	return b.String()
}

// onFakeFleet says whether the runs were on bench/fakeworker's fake fleet.
func onFakeFleet(results []*result) bool {
	for _, r := range results {
		if r.FakeKube != nil {
			return true
		}
	}
	return false
}

// fakeFleetSection is what the fake fleet counted and how each run's continue-as-new went.
func fakeFleetSection(results []*result) string {
	if !onFakeFleet(results) {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n## The fake fleet\n\n")
	b.WriteString("Node LISTs are the real ListNodes activity's, against a clientset that pages the fleet as the API server does. " +
		"RunJob calls above N are first workflow tasks that ran again (a task that timed out, or whose completion the server refused " +
		"for a signal that came meanwhile, runs its local activity again; the real CreateJob then adopts the Job or reads the outcome " +
		"from the Node, and so does the fake: adopted). A drain is the time from a run's last " +
		"child launched to its close, while the window empties before continue-as-new.\n\n")
	b.WriteString("| N | Node LISTs | per node | from the first page | RunJob calls (adopted) | most at once | continue-as-new | drain s (all) | drain s / continue-as-new | drains / makespan | worker peak RSS MB |\n")
	b.WriteString("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range results {
		f, h := r.FakeKube, r.History
		if f == nil || h == nil {
			continue
		}
		perCAN := 0.0
		if r.ContinueAsNew > 0 {
			perCAN = h.CANDrainSeconds / float64(r.ContinueAsNew)
		}
		fmt.Fprintf(&b, "| %s | %d | %.4f | %d | %d (%d) | %d | %d | %.1f | %.2f | %.1f%% | %.1f |\n", thousands(r.Nodes), f.NodeLists,
			float64(f.NodeLists)/float64(r.Nodes), f.FirstPageLists, f.Jobs, f.Adopted, f.MostAtOnce, r.ContinueAsNew,
			h.CANDrainSeconds, perCAN, 100*h.CANDrainSeconds/r.MakespanS, r.Process.PeakMB)
	}
	return b.String()
}

// historyBytesSection says where each system's history bytes per node go, by event type, so a
// ratio of history sizes (noderollout ÷ temporal-floor) can be traced to the events behind it.
func historyBytesSection(results []*result) string {
	var b strings.Builder
	for _, r := range results {
		h := r.History
		if h == nil || h.ParentBytesByType == nil || r.Nodes == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n## History bytes per node, by event type\n\n")
		}
		fmt.Fprintf(&b, "- %s N=%s repetition %d, %.0f B/node: parent: %s; children: %s\n", r.System, thousands(r.Nodes), r.Rep+1,
			float64(h.TotalBytes)/float64(r.Nodes), perNodeByType(h.ParentBytesByType, r.Nodes, 0), perNodeByType(h.ChildBytesByType, r.Nodes, 0))
	}
	return b.String()
}
