package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"

	"github.com/noderollout/noderollout/bench/nodejob"
	"github.com/noderollout/noderollout/internal/readyz"
)

// The peer, Rancher system-upgrade-controller (SUC, dev/build-suc.sh): one Plan over the
// fleet's Nodes with concurrency P. Its names, as v0.20.1 spells them.
const (
	sucName = "system-upgrade-controller"
	// sucPlanLabelPrefix + plan name is the label SUC puts on a Node once the Plan's Job
	// completed there: a node is done when it carries it.
	sucPlanLabelPrefix = "plan.upgrade.cattle.io/"
	// sucNodeLabel names the Node on each of its Jobs (its Pods reach it by node affinity on
	// kubernetes.io/hostname, so the Job's template has no nodeName).
	sucNodeLabel = "upgrade.cattle.io/node"
	// sucReadyLog is the line its last controller logs once every informer cache synced.
	sucReadyLog = "Kind=Plan controller"
)

var planResource = schema.GroupVersionResource{Group: "upgrade.cattle.io", Version: "v1", Resource: "plans"}

// sucEnv is SUC's configuration for the bench, the settings its manifest takes from a
// ConfigMap, changed only where this stack needs it (bench/README.md, "The peer"):
// unprivileged Jobs (the API server refuses privileged Pods), no Pod retry inside a Job
// (the bench's Jobs have backoffLimit 0), and a finished Job kept 60 s (its manifest keeps it
// 900 s; with 0 the TTL controller deletes a Job before SUC sees it complete and the Plan
// stalls). Everything else, its two worker threads included, is as shipped.
func sucEnv(jobTTL int) []string {
	return []string{
		"SYSTEM_UPGRADE_JOB_PRIVILEGED=false",
		"SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT=0",
		fmt.Sprintf("SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH=%d", jobTTL),
	}
}

// peerStats is what only the peer's runs measure.
type peerStats struct {
	// PlanComplete says whether the Plan's Complete condition was True when the bench last
	// looked (after the tail, or after watching the failing nodes).
	PlanComplete bool `json:"planComplete"`
	// JobsCreated counts the Jobs SUC created (it creates most twice: first paused, deleted as
	// out of turn, then again); JobsPerNode is that over the nodes.
	JobsCreated int     `json:"jobsCreated"`
	JobsPerNode float64 `json:"jobsPerNode"`
	// FailingNodes are the fleet's failing nodes, watched ObservedS seconds past the last
	// other node's completion: SUC retries a failed node (a new Job once the failed one's TTL
	// ran out) and keeps it in status.applying, holding its concurrency slot.
	FailingNodes []failingNode `json:"failingNodes,omitempty"`
	ObservedS    float64       `json:"observedS,omitempty"`
	// ApplyingAtEnd is the Plan's status.applying when the bench stopped watching.
	ApplyingAtEnd []string `json:"applyingAtEnd,omitempty"`
	// Tail is SUC's own requests after the last node was done until its last Job was gone
	// (it keeps finished Jobs for their TTL, then deletes them): writes a rollout still owes.
	TailOwn apiCounts `json:"tailOwnRequests,omitempty"`
	TailS   float64   `json:"tailS,omitempty"`
}

// failingNode is one failing node under SUC.
type failingNode struct {
	Node          string  `json:"node"`
	Jobs          int     `json:"jobs"`       // Jobs SUC created for it
	JobsFailed    int     `json:"jobsFailed"` // of those, seen failed
	FirstFailedS  float64 `json:"firstFailedS,omitempty"`
	LastCreatedS  float64 `json:"lastCreatedS,omitempty"` // its last Job's creation, from the Plan's
	StillApplying bool    `json:"stillApplying"`
}

// isSUC says whether the system is the peer, as shipped or with its client limit raised.
func isSUC(system string) bool { return system == systemSUC || system == systemSUCQPS }

// measureSUC runs SUC on the fleet: the scheduler it needs and SUC itself started (their
// informers synced) before the clock, which runs from the Plan's creation to the last
// non-failing node's completion label.
func (e *env) measureSUC(ctx context.Context, s runSpec, r *result) error {
	bin := e.cfg.sucBin
	if s.system == systemSUCQPS {
		bin = e.cfg.sucQPSBin
	}
	stopScheduler, err := e.startScheduler(ctx)
	if err != nil {
		return err
	}
	defer stopScheduler()
	dyn, err := dynamic.NewForConfig(e.rc)
	if err != nil {
		return err
	}
	plan := "bench-" + s.id()
	w, err := newSUCWatch(ctx, e, s, plan)
	if err != nil {
		return err
	}
	defer w.close()
	w.tr = s.tr
	logPath := filepath.Join(e.cfg.workDir, "bench-suc-"+s.id()+".log")
	p, err := startSUC(ctx, bin, e.proxyKubeconfig, s.namespace, e.cfg.sucJobTTL, logPath)
	if err != nil {
		return err
	}
	defer p.stop()

	before, err := e.stackUsage(ctx)
	if err != nil {
		return err
	}
	procBefore, _ := readProc(p.pid())
	r.start = time.Now()
	w.start = r.start
	if _, err := dyn.Resource(planResource).Namespace(s.namespace).Create(ctx, sucPlan(plan, s), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the Plan: %w", err)
	}
	want := len(s.fleet.nodes) - len(s.fleet.fail)
	runErr := w.waitDone(ctx, want, e.cfg.sucTimeout)
	r.end = time.Now()
	if err := e.fillUse(ctx, r, before, procBefore, p.pid()); err != nil {
		return err
	}
	r.Peer = &peerStats{}
	if runErr != nil {
		w.count(r)
		return runErr
	}
	logf("N=%d %s: done in %.1fs", r.Nodes, s.system, r.MakespanS)

	if len(s.fleet.fail) > 0 && e.cfg.sucObserve > 0 {
		// The failing nodes' Jobs fail; watch what SUC does with them.
		logf("N=%d %s: watching the %d failing node(s) for %s", r.Nodes, s.system, len(s.fleet.fail), e.cfg.sucObserve)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(e.cfg.sucObserve):
		}
		r.Peer.ObservedS = time.Since(r.end).Seconds()
	} else if len(s.fleet.fail) == 0 && e.cfg.sucTail {
		// SUC keeps each finished Job for its TTL, then deletes it: count those requests too.
		tailFrom, _ := e.proxy.snapshot()
		tailStart := time.Now()
		if err := waitNoJobs(ctx, e, s.namespace, time.Duration(e.cfg.sucJobTTL+120)*time.Second); err != nil {
			logf("N=%d %s: %v", r.Nodes, s.system, err)
		}
		tailTo, _ := e.proxy.snapshot()
		r.Peer.TailOwn = tailTo.sub(tailFrom)
		r.Peer.TailS = time.Since(tailStart).Seconds()
	}
	if obj, err := dyn.Resource(planResource).Namespace(s.namespace).Get(ctx, plan, metav1.GetOptions{}); err == nil {
		r.Peer.ApplyingAtEnd, _, _ = unstructured.NestedStringSlice(obj.Object, "status", "applying")
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conditions {
			if c, ok := c.(map[string]any); ok && c["type"] == "Complete" && c["status"] == "True" {
				r.Peer.PlanComplete = true
			}
		}
	}
	w.count(r)
	p.stop()
	return nil
}

// sucPlan is the Plan the bench creates: every Node of the fleet, P at once, each Node's Job
// running for D (the kwok annotation, which SUC copies from the Plan to its Pods).
func sucPlan(name string, s runSpec) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "upgrade.cattle.io/v1",
		"kind":       "Plan",
		"metadata": map[string]any{
			"name": name, "namespace": s.namespace,
			"annotations": map[string]any{"noderollout.dev/run-seconds": fmt.Sprintf("%g", s.jobSeconds)},
		},
		"spec": map[string]any{
			"concurrency":        int64(s.parallelism),
			"version":            "v1",
			"serviceAccountName": "default",
			"nodeSelector":       map[string]any{"matchLabels": map[string]any{labelFleet: s.fleet.id}},
			"upgrade": map[string]any{
				"image":   "busybox",
				"command": []any{"sh", "-c"},
				"args":    []any{"echo rolling out"},
			},
		},
	}}
}

// startScheduler starts the stack's kube-scheduler (dev/start-component.sh waits until it
// is ready) and returns what stops it again.
func (e *env) startScheduler(ctx context.Context) (func(), error) {
	component := func(script string) error {
		cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.devDir, script), "kube-scheduler")
		cmd.Env = append(os.Environ(), "NODEROLLOUT_STATE="+e.cfg.stateDir)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s kube-scheduler: %w: %s", script, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := component("start-component.sh"); err != nil {
		return nil, err
	}
	return func() {
		if err := component("stop-component.sh"); err != nil {
			logf("%v", err)
		}
	}, nil
}

// startSUC starts SUC for one namespace and waits until its informers synced (the log line
// its last controller writes once every cache synced).
func startSUC(ctx context.Context, bin, kubeconfig, namespace string, jobTTL int, logPath string) (*workerProc, error) {
	p := &workerProc{cmd: exec.Command(bin, "--kubeconfig", kubeconfig, "--namespace", namespace, "--name", sucName)}
	p.cmd.Env = append(os.Environ(), sucEnv(jobTTL)...)
	if err := p.launch(logPath); err != nil {
		return nil, err
	}
	synced := readyz.Until(ctx, p.done, 2*time.Minute, func() bool {
		text, _ := os.ReadFile(logPath)
		return strings.Contains(string(text), sucReadyLog)
	})
	if err := p.await(synced, sucName, logPath); err != nil {
		return nil, err
	}
	return p, nil
}

// sucWatch follows a Plan's Nodes (their completion label) and Jobs (created, failed) with
// the bench's own informers, outside the counting proxy.
type sucWatch struct {
	label string
	fail  map[string]bool
	tr    *tracer // nil without --trace
	stop  context.CancelFunc

	mu      sync.Mutex
	start   time.Time
	done    map[string]time.Time // node -> when its label was seen
	jobs    map[string][]jobSeen // node -> its Jobs, by first sight
	changed chan struct{}
}

type jobSeen struct {
	uid     string
	created time.Time
	failed  time.Time
}

func newSUCWatch(ctx context.Context, e *env, s runSpec, plan string) (*sucWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &sucWatch{label: sucPlanLabelPrefix + plan, fail: map[string]bool{}, stop: cancel,
		done: map[string]time.Time{}, jobs: map[string][]jobSeen{}, changed: make(chan struct{}, 1)}
	for _, n := range s.fleet.fail {
		w.fail[n] = true
	}
	strip := informers.WithTransform(nodejob.DropManagedFields)
	nodes := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, strip,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = s.fleet.selector() }))
	jobs := informers.NewSharedInformerFactoryWithOptions(e.kube, 0, strip, informers.WithNamespace(s.namespace))
	err := onAddOrUpdate(nodes.Core().V1().Nodes().Informer(), w.node)
	if err == nil {
		err = onAddOrUpdate(jobs.Batch().V1().Jobs().Informer(), w.job)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	nodes.Start(ctx.Done())
	jobs.Start(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())
	jobs.WaitForCacheSync(ctx.Done())
	return w, nil
}

func (w *sucWatch) close() { w.stop() }

func (w *sucWatch) node(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.done[n.Name]; seen {
		return
	}
	if _, labelled := n.Labels[w.label]; !labelled {
		return
	}
	w.done[n.Name] = now
	if w.tr != nil {
		w.tr.release(n.Name, now)
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *sucWatch) job(obj any) {
	j, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	node := j.Labels[sucNodeLabel]
	if node == "" {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.jobs[node]
	i := slices.IndexFunc(seen, func(s jobSeen) bool { return s.uid == string(j.UID) })
	if i < 0 {
		seen = append(seen, jobSeen{uid: string(j.UID), created: now})
		i = len(seen) - 1
	}
	if succeeded, ended := nodejob.Finished(j); ended && !succeeded && seen[i].failed.IsZero() {
		seen[i].failed = now
	}
	w.jobs[node] = seen
}

// waitDone waits until want Nodes carry the Plan's label.
func (w *sucWatch) waitDone(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.After(timeout)
	progress := time.NewTicker(15 * time.Second)
	defer progress.Stop()
	for {
		w.mu.Lock()
		done := len(w.done)
		w.mu.Unlock()
		if done >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%d of %d nodes done after %s", done, want, timeout)
		case <-progress.C:
			logf("  suc t=%3.0fs: %d/%d done", time.Since(w.start).Seconds(), done, want)
		case <-w.changed:
		}
	}
}

// count fills the result's outcome counts and the peer's Job figures.
func (w *sucWatch) count(r *result) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r.Selected = r.Nodes
	r.Succeeded = len(w.done)
	for node := range w.fail {
		if _, ok := w.done[node]; !ok {
			r.Failed++
		}
	}
	r.Other = r.Nodes - r.Succeeded - r.Failed
	for node, jobs := range w.jobs {
		r.Peer.JobsCreated += len(jobs)
		if !w.fail[node] {
			continue
		}
		f := failingNode{Node: node, Jobs: len(jobs), StillApplying: slices.Contains(r.Peer.ApplyingAtEnd, node)}
		for _, j := range jobs {
			if !j.failed.IsZero() {
				f.JobsFailed++
				if f.FirstFailedS == 0 {
					f.FirstFailedS = j.failed.Sub(w.start).Seconds()
				}
			}
			f.LastCreatedS = j.created.Sub(w.start).Seconds()
		}
		r.Peer.FailingNodes = append(r.Peer.FailingNodes, f)
	}
	slices.SortFunc(r.Peer.FailingNodes, func(a, b failingNode) int { return strings.Compare(a.Node, b.Node) })
	if r.Nodes > 0 {
		r.Peer.JobsPerNode = float64(r.Peer.JobsCreated) / float64(r.Nodes)
	}
}

// waitNoJobs waits until the namespace holds no Job.
func waitNoJobs(ctx context.Context, e *env, namespace string, timeout time.Duration) error {
	return poll(ctx, timeout, time.Second, func(ctx context.Context) (bool, string, error) {
		jobs, err := e.kube.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return len(jobs.Items) == 0, "Jobs left in " + namespace, nil
	})
}

var errNoSUC = errors.New("the peer needs --suc-bin and --suc-qps-bin (dev/build-suc.sh builds them)")
