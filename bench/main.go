// Command bench measures noderollout at fleet scale on the local stack (dev/up.sh): for each
// fleet size it creates kwok nodes, runs one rollout with a separate worker process, runs
// the same rollout with a plain client-go dispatcher (bench/baseline) as the yardstick, and
// writes a table of makespan against the ideal, API requests, Temporal history events and
// resources per node (Markdown, CSV, JSON and a PNG plot). dev/bench.sh runs it; see the
// "Benchmark" section of README.md for what is counted and how.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/bench/floor"
)

type config struct {
	mode            string
	sizes           []int
	parallelism     int
	jobSeconds      float64
	failPercent     int
	systems         []string
	out             string
	workDir         string
	workerBin       string
	candidateBin    string
	floorBin        string
	baselineBin     string
	kubeconfig      string
	temporalAddress string
	temporalMetrics string
	stateDir        string
	gateNodes       int
	gateRatio       float64
	historyWorkers  int
	canAfter        int
	rewrite         string
	trace           bool
	profileSeconds  int
	repeat          int
	sucBin          string
	sucQPSBin       string
	sucJobTTL       int
	sucObserve      time.Duration
	sucTail         bool
	sucTimeout      time.Duration
	devDir          string
	watch           string
	starterBin      string
	gateActions     float64
	// fakeKubeBin, when set, runs noderollout's workflows with a Kubernetes fake at the
	// activity boundary (bench/fakeworker) instead of the worker on the kwok fleet: for fleets
	// larger than the stack holds. No Node is created; only noderollout runs.
	fakeKubeBin string
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[bench %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.rewrite != "" {
		if err := rewrite(cfg); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts the clean-up (workers stopped, nodes and namespaces deleted); a
	// second one ends the bench at once.
	go func() { <-ctx.Done(); stop() }()
	failures, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Fprintln(os.Stderr, "bench: FAIL:", f)
		}
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var c config
	var sizes, systems string
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.StringVar(&c.mode, "mode", "quick", "quick (100 and 1,000 nodes) or full (100, 1,000 and 10,000)")
	fs.StringVar(&sizes, "sizes", "", "comma-separated fleet sizes, instead of the mode's")
	fs.IntVar(&c.parallelism, "parallelism", 100, "Jobs in flight (P)")
	fs.Float64Var(&c.jobSeconds, "job-seconds", 5, "how long each Job's Pod runs (D); 0 for a throughput row, whose ideal is then 0 and has no ratio")
	fs.IntVar(&c.failPercent, "fail-percent", 2, "share of nodes whose Pod fails (every 100/x-th node)")
	fs.StringVar(&systems, "systems", systemBaseline+","+systemNoderollout, "systems to run, in this order on even repetitions and reversed on odd ones (ABBA)")
	fs.IntVar(&c.repeat, "repeat", 0, "repetitions per fleet size; 0: the mode's (quick 1, full 3)")
	fs.StringVar(&c.out, "out", "bench/results", "directory for results.md, results.csv, results.json and results.png")
	fs.StringVar(&c.workDir, "work-dir", os.TempDir(), "directory for logs, kubeconfigs and templates")
	fs.StringVar(&c.workerBin, "worker-bin", "bin/worker", "the built worker")
	fs.StringVar(&c.candidateBin, "candidate-bin", "", "a second worker build, run as the system "+systemCandidate+" to A/B a change")
	fs.StringVar(&c.baselineBin, "baseline-bin", "bin/baseline", "the built baseline dispatcher")
	fs.StringVar(&c.floorBin, "floor-bin", "bin/floorworker", "the built floor worker, for the system "+systemTemporalFloor)
	fs.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "admin kubeconfig of the local stack")
	fs.StringVar(&c.temporalAddress, "temporal-address", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend of the local stack")
	fs.StringVar(&c.temporalMetrics, "temporal-metrics", "127.0.0.1:7244", "the Temporal server's Prometheus endpoint (host:port)")
	fs.StringVar(&c.stateDir, "state-dir", os.Getenv("NODEROLLOUT_STATE"), "the stack's state directory (pids, logs)")
	fs.IntVar(&c.gateNodes, "gate-nodes", 1000, "fleet size at which noderollout's makespan is held against the baseline's")
	// Against the fair baseline (same Kubernetes calls) runs at 1,000 nodes on a quiet 2-core
	// machine measured 1.11-1.25x, and 1.51x for the slowest (the first run on a new stack,
	// with the code from before the per-node cost was cut); the gate is a smoke bound with a
	// fifth of margin over that.
	fs.Float64Var(&c.gateRatio, "gate-ratio", 1.8, "fail when noderollout's makespan exceeds this multiple of the baseline's at --gate-nodes")
	fs.StringVar(&c.rewrite, "rewrite", "", "only rewrite the report files in --out from this results.json of an earlier run")
	fs.IntVar(&c.canAfter, "continue-as-new-after", 0, "the rollout's continueAsNewAfter; 0: its default")
	fs.IntVar(&c.historyWorkers, "history-workers", 16, "child histories read at once")
	fs.IntVar(&c.profileSeconds, "profile-seconds", 0, "save a CPU profile of the worker's first this many seconds of each rollout into --work-dir (go tool pprof)")
	fs.BoolVar(&c.trace, "trace", true, "watch Jobs and Pods to break each slot's cycle into steps")
	fs.StringVar(&c.sucBin, "suc-bin", "", "the peer, system-upgrade-controller as shipped, for the system "+systemSUC+" (dev/build-suc.sh)")
	fs.StringVar(&c.sucQPSBin, "suc-qps-bin", "", "the peer with its client rate limit raised, for the system "+systemSUCQPS)
	fs.IntVar(&c.sucJobTTL, "suc-job-ttl", 60, "seconds the peer keeps a finished Job (its SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH)")
	fs.DurationVar(&c.sucObserve, "suc-observe", 150*time.Second, "with failing nodes, how long the peer's runs watch them after every other node is done (its retries)")
	fs.DurationVar(&c.sucTimeout, "suc-timeout", time.Hour, "give up on a peer run after this long")
	fs.BoolVar(&c.sucTail, "suc-tail", true, "after a peer run, wait until its finished Jobs' TTL ran out and count its requests meanwhile (the tail)")
	fs.StringVar(&c.devDir, "dev-dir", "dev", "the repository's dev/ directory, whose scripts start and stop the stack's kube-scheduler for the peer's runs")
	fs.StringVar(&c.watch, "watch", "", `"status-w": follow each noderollout run with "starter status -w" (--starter-bin) instead of the bench's own query every 15 s; "start-wait": start it with "starter start --wait", which follows it; to price following a rollout in Temporal actions`)
	fs.StringVar(&c.starterBin, "starter-bin", "bin/starter", "the built starter, for --watch")
	fs.Float64Var(&c.gateActions, "gate-actions", 0, "fail when a noderollout run's Temporal actions per node (queries left out) exceed this; 0: no such check")
	fs.StringVar(&c.fakeKubeBin, "fake-kube-bin", "", "the built fakeworker: run noderollout on a fake fleet at the activity boundary, no Nodes created (the 100,000-node row)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if sizes == "" {
		switch c.mode {
		case "quick":
			sizes = "100,1000"
		case "full":
			sizes = "100,1000,10000"
		default:
			return c, fmt.Errorf("--mode %q: want quick or full", c.mode)
		}
	}
	if c.repeat == 0 {
		c.repeat = 1
		if c.mode == "full" {
			c.repeat = 3
		}
	}
	if c.repeat < 1 {
		return c, fmt.Errorf("--repeat %d: want 1 or more", c.repeat)
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return c, fmt.Errorf("--sizes: %q is not a positive count", s)
		}
		c.sizes = append(c.sizes, n)
	}
	for _, s := range strings.Split(systems, ",") {
		if !isNoderollout(s) && !isBaseline(s) && s != systemTemporalFloor && !isSUC(s) {
			return c, fmt.Errorf("--systems: %q is none of %s", s, strings.Join([]string{systemNoderollout, systemCandidate,
				systemBaseline, systemBaselineMinimal, systemTemporalFloor, systemSUC, systemSUCQPS}, ", "))
		}
		if s == systemCandidate && c.candidateBin == "" {
			return c, fmt.Errorf("--systems: %s needs --candidate-bin", systemCandidate)
		}
		if (s == systemSUC && c.sucBin == "") || (s == systemSUCQPS && c.sucQPSBin == "") {
			return c, fmt.Errorf("--systems: %s: %w", s, errNoSUC)
		}
		if c.fakeKubeBin != "" && s != systemNoderollout {
			return c, fmt.Errorf("--systems: %s cannot run with --fake-kube-bin; only %s runs on the fake fleet", s, systemNoderollout)
		}
		c.systems = append(c.systems, s)
	}
	switch c.watch {
	case "", "status-w", "start-wait":
	default:
		return c, fmt.Errorf(`--watch %q: want "status-w", "start-wait" or nothing`, c.watch)
	}
	switch {
	case c.rewrite != "":
		return c, nil
	case c.kubeconfig == "" || c.temporalAddress == "" || c.stateDir == "":
		return c, errors.New("KUBECONFIG, TEMPORAL_ADDRESS and NODEROLLOUT_STATE must point at the local stack (source .stack/env)")
	case c.parallelism < 1 || c.parallelism > api.MaxParallelism:
		return c, fmt.Errorf("--parallelism: between 1 and %d", api.MaxParallelism)
	case c.jobSeconds < 0:
		return c, errors.New("--job-seconds must not be negative (0: Jobs that end at once, a throughput row)")
	}
	return c, nil
}

// env is what every measurement shares.
type env struct {
	cfg             config
	run             string // unique per bench run: in node, namespace, task queue and rollout names
	rc              *rest.Config
	kube            kubernetes.Interface
	tc              client.Client
	proxy           *countingProxy
	proxyKubeconfig string
}

func run(ctx context.Context, cfg config) ([]string, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.kubeconfig)
	if err != nil {
		return nil, err
	}
	rc.QPS, rc.Burst, rc.UserAgent = 1000, 2000, "noderollout-bench"
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	tc, err := client.Dial(client.Options{HostPort: cfg.temporalAddress, Logger: sdklog.NewStructuredLogger(
		slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))})
	if err != nil {
		return nil, fmt.Errorf("temporal at %s: %w", cfg.temporalAddress, err)
	}
	defer tc.Close()
	proxy, err := startProxy(rest.CopyConfig(rc))
	if err != nil {
		return nil, err
	}
	defer proxy.close()
	e := &env{cfg: cfg, run: runID(), rc: rc, kube: kube, tc: tc, proxy: proxy}
	if e.proxyKubeconfig, err = proxy.writeKubeconfig(cfg.workDir, "bench-proxy.kubeconfig"); err != nil {
		return nil, err
	}
	logf("run %s: sizes %v, P=%d, D=%gs, %d%% failing nodes, systems %v; logs in %s",
		e.run, cfg.sizes, cfg.parallelism, cfg.jobSeconds, cfg.failPercent, cfg.systems, cfg.workDir)

	// Leftovers of an interrupted run would share the control plane with this one.
	benchOnly := metav1.ListOptions{LabelSelector: labelBench + "=true"}
	if err := deleteNamespaces(ctx, kube, benchOnly); err != nil {
		return nil, err
	}
	if err := deleteNodes(ctx, kube, labelBench+"=true", logf); err != nil {
		return nil, err
	}

	var results []*result
	var failures []string
	for _, n := range cfg.sizes {
		rs, err := e.measureSize(ctx, n)
		results = append(results, rs...)
		if err != nil {
			failures = append(failures, fmt.Sprintf("N=%d: %v", n, err))
			if ctx.Err() != nil {
				break
			}
		}
		if err := writeResults(cfg, e.run, time.Now().UTC(), results); err != nil {
			return nil, err
		}
	}
	failures = append(failures, gate(cfg, results)...)
	if err := writeResults(cfg, e.run, time.Now().UTC(), results); err != nil {
		return nil, err
	}
	fmt.Println(markdownRows(results))
	logf("results in %s", cfg.out)
	return failures, nil
}

// rewrite regenerates results.{md,csv,json,png} from an earlier run's results.json, with the
// settings recorded there.
func rewrite(cfg config) error {
	raw, err := os.ReadFile(cfg.rewrite)
	if err != nil {
		return err
	}
	var saved struct {
		Run     string    `json:"run"`
		Date    time.Time `json:"date"`
		Config  savedCfg  `json:"config"`
		Results []*result `json:"results"`
	}
	if err := json.Unmarshal(raw, &saved); err != nil {
		return fmt.Errorf("%s: %w", cfg.rewrite, err)
	}
	cfg.mode, cfg.sizes, cfg.parallelism = saved.Config.Mode, saved.Config.Sizes, saved.Config.Parallelism
	cfg.jobSeconds, cfg.failPercent, cfg.systems = saved.Config.JobSeconds, saved.Config.FailPercent, saved.Config.Systems
	return writeResults(cfg, saved.Run, saved.Date, saved.Results)
}

// runID is short, lower-case and different on every run.
func runID() string {
	s := strconv.FormatInt(time.Now().Unix()%(36*36*36*36), 36)
	return strings.Repeat("0", 4-len(s)) + s
}

// measureSize creates a fleet of n nodes, runs every system on it and removes it.
func (e *env) measureSize(ctx context.Context, n int) ([]*result, error) {
	f := newFleetSpec(e.run, n, e.cfg.failPercent)
	if e.cfg.fakeKubeBin == "" {
		if err := e.createFleet(ctx, f); err != nil {
			return nil, err
		}
		defer func() {
			if err := deleteNodes(context.WithoutCancel(ctx), e.kube, f.selector(), logf); err != nil {
				logf("N=%d: deleting nodes: %v", n, err)
			}
		}()
	}
	template := jobTemplate(e.cfg.jobSeconds)
	var results []*result
	for rep := range e.cfg.repeat {
		var reps []*result
		for _, system := range abbaOrder(e.cfg.systems, rep) {
			s := runSpec{
				system: system, fleet: f, template: template, parallelism: e.cfg.parallelism, jobSeconds: e.cfg.jobSeconds,
				rep: rep,
			}
			s.namespace = "bench-" + s.id()
			r, err := e.measureOne(ctx, s)
			if r != nil {
				r.Rep = rep
				reps = append(reps, r)
			}
			if err != nil {
				return append(results, reps...), fmt.Errorf("%s (repetition %d): %w", system, rep+1, err)
			}
		}
		pairWithBaseline(reps)
		pairWithSUC(reps)
		for _, r := range reps {
			logf("N=%d %s (repetition %d): makespan %.1fs (ideal %.0fs, ratio %.2f, %.2fx baseline); %d/%d/%d succeeded/failed/other of %d",
				n, r.System, rep+1, r.MakespanS, r.IdealS, r.Ratio, r.VsBaseline, r.Succeeded, r.Failed, r.Other, r.Nodes)
		}
		results = append(results, reps...)
	}
	return results, nil
}

// createFleet makes f's Nodes and waits until the control plane has settled after them.
func (e *env) createFleet(ctx context.Context, f *fleet) error {
	logf("N=%d: creating nodes (%d fail)", len(f.nodes), len(f.fail))
	if err := f.create(ctx, e.kube, logf); err != nil {
		return err
	}
	return e.settle(ctx, len(f.nodes))
}

// abbaOrder is the order of the systems in repetition rep: as given on even repetitions and
// reversed on odd ones (A B, B A, A B, ...), so that neither system always runs first on a
// fresh fleet or last on a machine warmed by the other.
func abbaOrder(systems []string, rep int) []string {
	order := slices.Clone(systems)
	if rep%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// pairWithBaseline sets each result's VsBaseline against the full baseline of the same
// repetition, on the same Nodes.
func pairWithBaseline(rep []*result) {
	var base *result
	for _, r := range rep {
		if r.System == systemBaseline && r.MakespanS > 0 {
			base = r
		}
	}
	if base == nil {
		return
	}
	for _, r := range rep {
		r.VsBaseline = r.MakespanS / base.MakespanS
	}
}

// pairWithSUC sets each result's VsSUC against the faster peer run (as shipped, or with its
// client limit raised) of the same repetition, on the same Nodes.
func pairWithSUC(rep []*result) {
	var peer *result
	for _, r := range rep {
		if isSUC(r.System) && r.MakespanS > 0 && r.Error == "" && (peer == nil || r.MakespanS < peer.MakespanS) {
			peer = r
		}
	}
	if peer == nil {
		return
	}
	for _, r := range rep {
		r.VsSUC = r.MakespanS / peer.MakespanS
	}
}

// settle waits, after the Nodes were created, until the API server has seen no Pod LIST for
// a few seconds, and logs how many there were: creating Nodes sets controllers to work per Node
// (the count shows which), and that work must not fall into whichever system runs first.
func (e *env) settle(ctx context.Context, n int) error {
	const quiet = 5 * time.Second
	start := time.Now()
	first, err := apiserverRequests(ctx, e.kube)
	if err != nil {
		return err
	}
	last, lastChange := first, time.Now()
	for time.Since(lastChange) < quiet && time.Since(start) < 5*time.Minute {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		now, err := apiserverRequests(ctx, e.kube)
		if err != nil {
			return err
		}
		if now.get("list", "pods") != last.get("list", "pods") {
			lastChange = time.Now()
		}
		last = now
	}
	d := last.sub(first)
	logf("N=%d: settled in %.0fs after creating the nodes; meanwhile list pods %.0f, get nodes %.0f, patch nodes %.0f (all clients)",
		n, time.Since(start).Seconds(), d.get("list", "pods"), d.get("get", "nodes"), d.get("patch", "nodes"))
	return nil
}

// measureOne runs one system on the fleet in a namespace of its own and tidies up after it.
func (e *env) measureOne(ctx context.Context, s runSpec) (*result, error) {
	if err := createNamespace(ctx, e.kube, s.namespace); err != nil {
		return nil, err
	}
	defer func() {
		ctx := context.WithoutCancel(ctx)
		if err := waitNoPods(ctx, e.kube, s.namespace); err != nil {
			logf("%s: %v", s.namespace, err)
		}
		if err := deleteNamespaces(ctx, e.kube, metav1.ListOptions{FieldSelector: "metadata.name=" + s.namespace}); err != nil {
			logf("%s: %v", s.namespace, err)
		}
	}()
	var tr *tracer
	if e.cfg.trace {
		var err error
		if tr, err = startTracer(ctx, e.kube, s.namespace); err != nil {
			return nil, err
		}
		defer tr.close()
	}
	s.tr = tr
	n := len(s.fleet.nodes)
	r := &result{
		System: s.system, Nodes: n, Parallelism: s.parallelism, JobSeconds: s.jobSeconds,
		IdealS: math.Ceil(float64(n)/float64(s.parallelism)) * s.jobSeconds, ExpectedFailed: len(s.fleet.fail),
	}
	r.LoadAvg = loadAverage()
	logf("N=%d %s (repetition %d): starting; load average %.2f", n, s.system, s.rep+1, r.LoadAvg)
	var err error
	switch s.system {
	case systemNoderollout, systemCandidate:
		err = e.measureNoderollout(ctx, s, r)
	case systemBaseline, systemBaselineMinimal:
		err = e.measureBaseline(ctx, s, r)
	case systemTemporalFloor:
		err = e.measureFloor(ctx, s, r)
	case systemSUC, systemSUCQPS:
		err = e.measureSUC(ctx, s, r)
	}
	if tr != nil && !r.start.IsZero() {
		r.Slot = tr.phases(r.start, r.end, s.parallelism)
	}
	r.derive()
	if err != nil {
		r.Error = err.Error()
	}
	return r, err
}

func (e *env) measureNoderollout(ctx context.Context, s runSpec, r *result) error {
	// A rollout, task queue and worker per system and repetition (see runSpec.id).
	taskQueue := "bench-" + s.id()
	bin := e.cfg.workerBin
	if s.system == systemCandidate {
		bin = e.cfg.candidateBin
	}
	logPath := filepath.Join(e.cfg.workDir, "bench-worker-"+s.id()+".log")
	var w *workerProc
	var err error
	if e.cfg.fakeKubeBin != "" {
		w, err = startFakeKube(ctx, e.cfg.fakeKubeBin, e.cfg.temporalAddress, taskQueue, logPath, s.fleet.selector(), len(s.fleet.nodes), s.jobSeconds)
	} else {
		w, err = startWorker(ctx, bin, e.proxyKubeconfig, e.cfg.temporalAddress, taskQueue, logPath)
	}
	if err != nil {
		return err
	}
	defer w.stop()
	req := rolloutRequest("bench-"+s.id(), s)
	req.ContinueAsNewAfter = e.cfg.canAfter
	r.Watch = e.cfg.watch
	start := func(ctx context.Context) (client.WorkflowRun, error) { return startRollout(ctx, e.tc, taskQueue, req) }
	stopStarter := func() {}
	if e.cfg.watch == "start-wait" {
		var starterCtx context.Context
		starterCtx, stopStarter = context.WithCancel(ctx)
		defer stopStarter()
		start = func(context.Context) (client.WorkflowRun, error) {
			return startWithStarter(starterCtx, e.tc, e.cfg.starterBin, e.cfg.temporalAddress, taskQueue, req,
				filepath.Join(e.cfg.workDir, "bench-watch-"+s.id()))
		}
	}
	return e.measureWorkflow(ctx, s, r, w, workflowRun{
		start: start,
		follow: func(ctx context.Context, id string) {
			switch e.cfg.watch {
			case "start-wait":
				return // the starter that started it follows it
			case "status-w":
				watchWithStarter(ctx, e.cfg.starterBin, e.cfg.temporalAddress, id,
					filepath.Join(e.cfg.workDir, "bench-watch-"+s.id()+".log"))
				return
			}
			followRollout(ctx, e.tc, id, 15*time.Second, r.start)
		},
		wait: func(ctx context.Context, id string) error {
			res, err := waitRollout(ctx, e.tc, id)
			stopStarter()
			if e.cfg.fakeKubeBin != "" {
				r.FakeKube = w.fakeStats()
			}
			r.Selected = res.Selected
			r.Succeeded = res.Counts.Succeeded
			r.Failed = res.Counts.Failures()
			r.Other = res.Counts.Skipped + res.Counts.NodeGone
			r.ContinueAsNew = res.ContinuedAsNew
			return err
		},
	})
}

// measureFloor runs the Temporal floor (package floor): a child workflow per node of the
// fleet, its ID the node's alone (reused by every repetition, as noderollout's are), whose
// local activity makes the baseline's Kubernetes calls for the node, on a worker of its own
// that reaches the API server through the counting proxy.
func (e *env) measureFloor(ctx context.Context, s runSpec, r *result) error {
	taskQueue := "bench-" + s.id()
	tmpl := filepath.Join(e.cfg.workDir, "floor-job-"+s.id()+".yaml")
	if err := os.WriteFile(tmpl, []byte(s.template), 0o644); err != nil {
		return err
	}
	w, err := startReadyProcess(ctx, e.cfg.floorBin, filepath.Join(e.cfg.workDir, "bench-worker-"+s.id()+".log"),
		func(addr string) []string {
			return []string{"--temporal-address", e.cfg.temporalAddress, "--task-queue", taskQueue, "--metrics-listen", addr,
				"--kubeconfig", e.proxyKubeconfig, "--namespace", s.namespace, "--template", tmpl, "--run", s.id(),
				"--kube-qps", "1000", "--kube-burst", "2000"}
		})
	if err != nil {
		return err
	}
	defer w.stop()
	req := floor.Request{Name: "bench-" + s.id(), Nodes: s.fleet.nodes, Parallelism: s.parallelism, JobSeconds: s.jobSeconds}
	return e.measureWorkflow(ctx, s, r, w, workflowRun{
		start: func(ctx context.Context) (client.WorkflowRun, error) {
			return e.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: req.Name, TaskQueue: taskQueue, WorkflowExecutionTimeout: 3 * time.Hour,
			}, floor.RolloutWorkflow, req)
		},
		wait: func(ctx context.Context, id string) error {
			var res floor.Result
			err := e.tc.GetWorkflow(ctx, id, "").Get(ctx, &res)
			r.Selected = len(req.Nodes)
			r.Succeeded, r.Failed = res.Succeeded, res.Failed
			return err
		},
	})
}

// workflowRun is what differs between the systems that run as a Temporal workflow: how it
// starts, what watches it on the way (optional), and how its end fills the result's counts.
type workflowRun struct {
	start  func(ctx context.Context) (client.WorkflowRun, error)
	follow func(ctx context.Context, id string)
	wait   func(ctx context.Context, id string) error
}

// measureWorkflow measures one workflow system, served by the worker w, from its start
// request to its end, then reads its histories.
func (e *env) measureWorkflow(ctx context.Context, s runSpec, r *result, w *workerProc, run workflowRun) error {
	before, err := e.stackUsage(ctx)
	if err != nil {
		return err
	}
	procBefore, _ := readProc(w.pid())
	logOffset := temporalLogOffset(e.cfg.stateDir)

	r.start = time.Now()
	wr, err := run.start(ctx)
	if err != nil {
		return fmt.Errorf("starting the %s workflow: %w", s.system, err)
	}
	followCtx, stopFollowing := context.WithCancel(ctx)
	if run.follow != nil {
		go run.follow(followCtx, wr.GetID())
	}
	if e.cfg.profileSeconds > 0 {
		go w.profile(followCtx, e.cfg.profileSeconds, filepath.Join(e.cfg.workDir, fmt.Sprintf("%s-cpu-%d-r%d.pprof", s.system, r.Nodes, s.rep)))
	}
	runErr := run.wait(ctx, wr.GetID())
	r.end = time.Now()
	stopFollowing()
	// The clock stops where the last run closed, by the server's record (same machine): the
	// client's long poll for the close has been seen to return up to 20 s late (its poll
	// timeout) on this dev server, which is not the rollout's time.
	if desc, err := e.tc.DescribeWorkflow(ctx, wr.GetID(), ""); err == nil {
		if closed := desc.RawResponse.GetWorkflowExecutionInfo().GetCloseTime().AsTime(); closed.After(r.start) && closed.Before(r.end) {
			r.EndNoticeLagS = r.end.Sub(closed).Seconds()
			if r.EndNoticeLagS > 1 {
				logf("N=%d %s: the client saw the workflow's close %.1fs after it (its long poll); the clock stops at the close", r.Nodes, s.system, r.EndNoticeLagS)
			}
			r.end = closed
		}
	}

	if err := e.fillUse(ctx, r, before, procBefore, w.pid()); err != nil {
		return err
	}
	if text, err := w.metrics(); err == nil {
		r.SDKTimers, r.SDKCounters = parseSDKMetrics(text)
	}
	w.stop()
	if runErr != nil {
		return fmt.Errorf("%s workflow %s: %w", s.system, wr.GetID(), runErr)
	}

	logf("N=%d %s: done in %.1fs; reading histories", r.Nodes, s.system, r.MakespanS)
	hs, err := readHistories(ctx, e.tc, wr.GetID(), wr.GetRunID(), e.cfg.historyWorkers)
	r.History = &hs
	r.HistoryWarnings = historyWarnings(e.cfg.stateDir, logOffset)
	return err
}

// stackUsage is what the stack has used so far (takeUsage with the env's settings).
func (e *env) stackUsage(ctx context.Context) (usage, error) {
	return takeUsage(ctx, e.kube, e.cfg.stateDir, e.cfg.temporalMetrics, e.proxy)
}

// fillUse ends a measured run that has its start and end set: r gets what the stack used since
// before, what the measured process (pid) used since procBefore, and the makespan.
func (e *env) fillUse(ctx context.Context, r *result, before usage, procBefore procSample, pid int) error {
	after, err := e.stackUsage(ctx)
	if err != nil {
		return err
	}
	procAfter, _ := readProc(pid)
	r.fill(before, after)
	r.Process = processUse{PeakMB: procAfter.PeakMB, CPU: procAfter.CPU - procBefore.CPU}
	r.MakespanS = r.end.Sub(r.start).Seconds()
	return nil
}

func (e *env) measureBaseline(ctx context.Context, s runSpec, r *result) error {
	var before usage
	var beforeErr error
	res, use, start, runErr := runBaseline(ctx, e.cfg.baselineBin, e.proxyKubeconfig, e.cfg.workDir, s, s.id(), func() {
		before, beforeErr = e.stackUsage(ctx)
	})
	r.start, r.end = start, time.Now()
	if start.IsZero() {
		r.start = r.end
	}
	if beforeErr != nil {
		return beforeErr
	}
	after, err := e.stackUsage(ctx)
	if err != nil {
		return err
	}
	r.fill(before, after)
	r.Process = use
	r.MakespanS = r.end.Sub(r.start).Seconds()
	r.Selected = res.Nodes
	r.Succeeded = res.Succeeded
	r.Failed = res.Failed
	return runErr
}

// gate applies the CI checks: no node lost, and noderollout's median makespan over the
// repetitions within gateRatio of the baseline's (paired per repetition) at gateNodes.
func gate(cfg config, results []*result) []string {
	var failures []string
	for _, r := range results {
		if lost := r.lost(); lost != "" {
			failures = append(failures, fmt.Sprintf("N=%d %s (repetition %d): %s", r.Nodes, r.System, r.Rep+1, lost))
		}
	}
	for _, r := range results {
		if cfg.gateActions <= 0 || !isNoderollout(r.System) {
			continue
		}
		switch {
		case len(r.Actions) == 0: // an unread counter must not pass as zero actions
			failures = append(failures, fmt.Sprintf("N=%d %s (repetition %d): no Temporal action counts read, so --gate-actions cannot hold (check --temporal-metrics)",
				r.Nodes, r.System, r.Rep+1))
		case r.ActionsPerNode > cfg.gateActions:
			failures = append(failures, fmt.Sprintf("N=%d D=%gs %s (repetition %d): %.2f Temporal actions per node, over %g",
				r.Nodes, r.JobSeconds, r.System, r.Rep+1, r.ActionsPerNode, cfg.gateActions))
		}
	}
	for _, r := range rows(results) {
		if r.System == systemNoderollout && r.Nodes == cfg.gateNodes && r.VsBaseline.N > 0 && r.VsBaseline.Median > cfg.gateRatio {
			failures = append(failures, fmt.Sprintf("N=%d noderollout: median makespan %.1fs is %.2fx the baseline's, over %.2fx",
				r.Nodes, r.Makespan.Median, r.VsBaseline.Median, cfg.gateRatio))
		}
	}
	return failures
}

// loadAverage is the machine's 1-minute load average, 0 when unreadable.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(fields[0], 64)
	return v
}
