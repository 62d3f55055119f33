package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times; 100 on every Linux the stack runs on.
const clockTicks = 100

// stackComponents are the local stack's processes whose CPU the bench reports (dev/lib.sh).
// kube-scheduler runs only for the peer's runs (the bench starts and stops it around them);
// postgres only when Temporal runs on PostgreSQL (dev/temporal-postgres.sh), and its CPU is
// charged to Temporal.
var stackComponents = []string{"temporal", "postgres", "kube-apiserver", "etcd", "kube-controller-manager", "kwok", "kube-scheduler"}

// treeComponents fork a process per connection: their CPU is the whole process tree's.
var treeComponents = map[string]bool{"postgres": true}

// procSample is one reading of a process's CPU time and memory.
type procSample struct {
	CPU    float64 // user + system seconds since the process started
	PeakMB float64 // VmHWM: the highest resident set size so far
	RSSMB  float64
}

// readProc reads /proc/<pid>/stat (utime + stime) and /proc/<pid>/status (VmHWM, VmRSS).
func readProc(pid int) (procSample, error) {
	var s procSample
	fields, err := statFields(pid)
	if err != nil {
		return s, err
	}
	s.CPU = tickSeconds(fields, statUtime, statStime)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kib, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 64)
		if err != nil {
			continue
		}
		switch name {
		case "VmHWM":
			s.PeakMB = kib / 1024
		case "VmRSS":
			s.RSSMB = kib / 1024
		}
	}
	return s, nil
}

// treeCPU is the CPU seconds of a process and of all its children, those still running and
// those it has reaped (PostgreSQL's postmaster reaps every backend that ends).
func treeCPU(root int) float64 {
	own, _, err := procTimes(root)
	if err != nil {
		return 0
	}
	total := own
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if cpu, parent, err := procTimes(pid); err == nil && parent == root {
			total += cpu
		}
	}
	return total
}

// procTimes reads a process's CPU seconds, its reaped children's included, and its parent.
func procTimes(pid int) (cpu float64, ppid int, err error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, 0, err
	}
	ppid, _ = strconv.Atoi(fields[statPPID])
	return tickSeconds(fields, statUtime, statStime, statCutime, statCstime), ppid, nil
}

// Indexes into statFields' fields, which start at field 3 of stat(5).
const (
	statPPID   = 1  // field 4
	statUtime  = 11 // field 14
	statStime  = 12
	statCutime = 13
	statCstime = 14 // field 17
)

// statFields reads /proc/<pid>/stat from its third field on: the command name before it may
// hold spaces and parentheses, so the fields start after the last ')'.
func statFields(pid int) ([]string, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	text := string(stat)
	fields := strings.Fields(text[strings.LastIndexByte(text, ')')+1:])
	if len(fields) <= statCstime {
		return nil, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	return fields, nil
}

// tickSeconds sums the named clock-tick fields, in seconds.
func tickSeconds(fields []string, indexes ...int) float64 {
	var ticks float64
	for _, i := range indexes {
		v, _ := strconv.ParseFloat(fields[i], 64)
		ticks += v
	}
	return ticks / clockTicks
}

// machineCPU reads the busy and total CPU seconds of the whole machine from /proc/stat.
func machineCPU() (busy, total float64) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0, 0
	}
	fields := strings.Fields(sc.Text())
	for i, v := range fields[1:] {
		x, _ := strconv.ParseFloat(v, 64)
		total += x
		if i != 3 && i != 4 { // idle, iowait
			busy += x
		}
	}
	return busy / clockTicks, total / clockTicks
}

// stackPIDs reads the pids of the running stack's components from <state>/pids: for a
// component under dev/supervise.sh, the supervised process's (<name>.child.pid).
func stackPIDs(stateDir string) map[string]int {
	pids := map[string]int{}
	for _, c := range stackComponents {
		b, err := os.ReadFile(filepath.Join(stateDir, "pids", c+".child.pid"))
		if err != nil {
			b, err = os.ReadFile(filepath.Join(stateDir, "pids", c+".pid"))
		}
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids[c] = pid
		}
	}
	return pids
}

// usage is a snapshot of everything the bench diffs around one rollout.
type usage struct {
	at        time.Time
	pids      map[string]int
	stackCPU  map[string]float64
	busy      float64
	total     float64
	apiserver apiCounts
	own       apiCounts
	ownSecs   apiCounts
	server    map[string]*timer  // the Temporal server's latency histograms
	serverN   map[string]float64 // and its BusyWorkflow counters
	actions   map[string]float64 // and its billable actions by type (its action counter)
}

// takeUsage samples the stack's processes (their pids read afresh: a component may have been
// restarted), the machine's CPU, and the request counters.
func takeUsage(ctx context.Context, kube kubernetes.Interface, stateDir, temporalMetrics string, proxy *countingProxy) (usage, error) {
	u := usage{at: time.Now(), pids: stackPIDs(stateDir), stackCPU: map[string]float64{}}
	for name, pid := range u.pids {
		if treeComponents[name] {
			u.stackCPU[name] = treeCPU(pid)
		} else if s, err := readProc(pid); err == nil {
			u.stackCPU[name] = s.CPU
		}
	}
	if s, err := readProc(os.Getpid()); err == nil {
		u.stackCPU["bench"] = s.CPU
	}
	u.busy, u.total = machineCPU()
	var err error
	if u.apiserver, err = apiserverRequests(ctx, kube); err != nil {
		return u, err
	}
	u.own, u.ownSecs = proxy.snapshot()
	if text, err := httpText(ctx, "http://"+temporalMetrics+"/metrics"); err == nil {
		u.server = parseTimers(text, "", serverTimerNames, "task_type", "operation")
		u.serverN = parseCounters(text, serverCounterNames, "task_type", "operation")
		u.actions = parseActions(text)
	}
	return u, nil
}

func httpText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// apiserverRequests reads apiserver_request_total from the API server's /metrics, summed
// over response codes and API versions: every client's requests, the bench's own included.
func apiserverRequests(ctx context.Context, kube kubernetes.Interface) (apiCounts, error) {
	raw, err := kube.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseRequestTotals(string(raw)), nil
}

// parseRequestTotals extracts apiserver_request_total from Prometheus text. Requests without
// a resource (health checks, /metrics, discovery) are left out.
func parseRequestTotals(text string) apiCounts {
	c := apiCounts{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := parseSample(line)
		if !ok || labels["resource"] == "" {
			continue
		}
		c[apiCall{Verb: kubeVerb(labels["verb"]), Resource: labels["resource"], Subresource: labels["subresource"]}] += value
	}
	return c
}

// kubeVerb maps the metric's verb (HTTP method or LIST/WATCH) to the kube verbs the proxy counts.
func kubeVerb(v string) string {
	switch v {
	case "POST":
		return "create"
	case "PUT":
		return "update"
	case "WATCHLIST":
		return "watch"
	}
	return strings.ToLower(v)
}

// parseSample splits `name{a="x",b="y"} 12` (or `name 12`) into its labels and value.
func parseSample(line string) (map[string]string, float64, bool) {
	open := strings.IndexByte(line, '{')
	closeIdx := strings.LastIndexByte(line, '}')
	labels := map[string]string{}
	if open < 0 {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return nil, 0, false
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		return labels, v, err == nil
	}
	if closeIdx < open {
		return nil, 0, false
	}
	s := line[open+1 : closeIdx]
	for len(s) > 0 {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return nil, 0, false
		}
		name := strings.TrimSpace(s[:eq])
		var b strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(s[i])
				}
				continue
			}
			b.WriteByte(s[i])
		}
		labels[name] = b.String()
		s = strings.TrimPrefix(strings.TrimSpace(s[min(i+1, len(s)):]), ",")
	}
	fields := strings.Fields(line[closeIdx+1:])
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return labels, v, err == nil
}

// temporalLogOffset is the size of the Temporal server's log now; warningsSince reads what
// was appended after it.
func temporalLogOffset(stateDir string) int64 {
	fi, err := os.Stat(filepath.Join(stateDir, "logs", "temporal.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// historyWarnings returns the Temporal server's history and mutable-state limit warnings
// logged since offset.
func historyWarnings(stateDir string, offset int64) []string {
	f, err := os.Open(filepath.Join(stateDir, "logs", "temporal.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, 0); err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, "exceeds warn limit") || strings.Contains(line, "exceeds limit") {
			if len(line) > 300 {
				line = line[:300]
			}
			out = append(out, line)
		}
	}
	return out
}
