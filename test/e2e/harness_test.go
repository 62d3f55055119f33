//go:build e2e

// Package e2e runs rollouts end to end on the local stack (dev/up.sh): a real Temporal dev
// server, a real kube-apiserver with the Job controller, and kwok as the kubelets. Each test
// makes its own namespace and its own fake nodes, labelled with the test's ID.
package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/freeport"
	"github.com/noderollout/noderollout/internal/readyz"
)

// Stack is what every test shares: clients of the local stack and the built binaries.
type Stack struct {
	Kube            kubernetes.Interface
	Temporal        client.Client
	TemporalAddress string
	Kubeconfig      string
	BinDir          string
	RepoDir         string
}

var stack Stack

// defaultWorker serves every test that does not run its own workers.
var defaultWorker *Worker

// suiteQueue is the task queue of the default worker and of the rollouts Start and the
// starter begin. It is this run's own: a worker the suite did not start and that polls the
// stack's default queue (make demo's, left running; one a crashed run left behind) must not
// take the suite's nodes (TestWorkerMetricsCountNodes counted 711 of 715 after make demo).
// Stopping such a worker instead would reach into a stack the suite only borrows.
var suiteQueue = api.TaskQueue + "-e2e-" + rand.String(6)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	stack.Kubeconfig = os.Getenv("KUBECONFIG")
	stack.TemporalAddress = os.Getenv("TEMPORAL_ADDRESS")
	if stack.Kubeconfig == "" || stack.TemporalAddress == "" {
		return 0, errors.New("KUBECONFIG and TEMPORAL_ADDRESS must point at the local stack: run 'dev/up.sh && source dev/env' (make test does this)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", stack.Kubeconfig)
	if err != nil {
		return 0, err
	}
	rc.QPS, rc.Burst = 200, 400
	if stack.Kube, err = kubernetes.NewForConfig(rc); err != nil {
		return 0, err
	}
	if stack.Temporal, err = client.Dial(client.Options{HostPort: stack.TemporalAddress}); err != nil {
		return 0, err
	}
	defer stack.Temporal.Close()
	wd, _ := os.Getwd()
	stack.RepoDir = filepath.Clean(filepath.Join(wd, "..", ".."))
	if stack.BinDir, err = os.MkdirTemp("", "noderollout-e2e-bin"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(stack.BinDir)
	build := exec.Command("go", "build", "-o", stack.BinDir, "./worker", "./starter")
	build.Dir, build.Stdout, build.Stderr = stack.RepoDir, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("building worker and starter: %w", err)
	}
	// The stack's Prometheus, for the rollouts with gates.prometheus (prometheus_test.go).
	if defaultWorker, err = StartWorker("default", "--task-queue", suiteQueue, "--prometheus-url", os.Getenv("PROMETHEUS_URL")); err != nil {
		return 0, err
	}
	watching, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	go watchdog.run(watching)
	code := m.Run()
	_ = defaultWorker.Stop()
	return code, nil
}

// Worker is a worker process started from the built binary.
type Worker struct {
	Name        string
	MetricsAddr string
	cmd         *exec.Cmd
	logPath     string
	done        chan struct{}
	exitErr     error // how the process ended, once done is closed
}

// StartWorker starts a worker process and waits until it reports ready.
func StartWorker(name string, extraArgs ...string) (*Worker, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	w := &Worker{Name: name, MetricsAddr: addr, done: make(chan struct{})}
	logDir := os.Getenv("E2E_LOG_DIR")
	if logDir == "" {
		logDir = os.TempDir()
	}
	w.logPath = filepath.Join(logDir, "worker-"+name+".log")
	logFile, err := os.OpenFile(w.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := append([]string{"--kubeconfig", stack.Kubeconfig, "--temporal-address", stack.TemporalAddress,
		"--metrics-listen", addr, "--stop-timeout", "5s", "--kube-qps", "500", "--kube-burst", "1000"}, extraArgs...)
	w.cmd = exec.Command(filepath.Join(stack.BinDir, "worker"), args...)
	w.cmd.Stdout, w.cmd.Stderr = logFile, logFile
	// A test binary that dies (go test's -timeout panics) runs no cleanup: without this its
	// workers lived on, polling the shared task queue with old code, and took the next run's
	// nodes (TestWorkerMetricsCountNodes counted 2 of its 6).
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { w.exitErr = w.cmd.Wait(); logFile.Close(); close(w.done) }()
	if err := readyz.Await(context.Background(), addr, w.done, 60*time.Second); err != nil {
		if !errors.Is(err, readyz.ErrExited) {
			w.Kill()
		}
		return nil, fmt.Errorf("worker %s %w; log %s:\n%s", name, err, w.logPath, tail(w.logPath))
	}
	return w, nil
}

// Kill ends the worker at once, as a crash would.
func (w *Worker) Kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
}

// Stop asks the worker to stop gracefully (SIGTERM), waits, and returns how it exited.
func (w *Worker) Stop() error {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
		return w.exitErr
	case <-time.After(30 * time.Second):
		w.Kill()
		return fmt.Errorf("worker %s did not stop within 30 s of SIGTERM", w.Name)
	}
}

// Metrics returns the worker's /metrics text.
func (w *Worker) Metrics(t *testing.T) string {
	resp, err := http.Get("http://" + w.MetricsAddr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(string(b), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// Fleet is one test's namespace and fake nodes.
type Fleet struct {
	ID        string // label value of e2e.noderollout.dev/test on every node
	Namespace string
	Nodes     []string
	suffix    string // keeps rollout names unique across runs on one Temporal server
	kube      kubernetes.Interface
}

// TestLabel marks the nodes of one test, so its rollouts select exactly them.
const TestLabel = "e2e.noderollout.dev/test"

// NewFleet creates a namespace and n kwok nodes for the test, and removes them afterwards.
func NewFleet(t *testing.T, n int) *Fleet {
	t.Helper()
	id := strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(id) > 40 {
		id = id[:40]
	}
	id = strings.Trim(id, "-") + "-" + rand.String(4)
	f := &Fleet{ID: id, Namespace: id, suffix: rand.String(4), kube: stack.Kube}
	f.create(t, n)
	return f
}

// Twin is the same fleet (namespace, node names and labels, rollout names) on another
// cluster, as one change rolled over two clusters meets it.
func (f *Fleet) Twin(t *testing.T, kube kubernetes.Interface) *Fleet {
	t.Helper()
	twin := &Fleet{ID: f.ID, Namespace: f.Namespace, suffix: f.suffix, kube: kube}
	twin.create(t, len(f.Nodes))
	return twin
}

func (f *Fleet) create(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	_, err := f.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.Namespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "default ServiceAccount in "+f.Namespace, func() bool {
		_, err := f.kube.CoreV1().ServiceAccounts(f.Namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	f.AddNodes(t, n, nil)
	t.Cleanup(func() { f.cleanup(t) })
}

// AddNodes creates n more kwok nodes with extra labels.
func (f *Fleet) AddNodes(t *testing.T, n int, labels map[string]string) []string {
	t.Helper()
	start := len(f.Nodes)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-n%04d", f.ID, start+i)
	}
	parallel(t, names, 32, func(name string) error {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"type": "kwok", TestLabel: f.ID, "kubernetes.io/hostname": name},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		}}
		for k, v := range labels {
			node.Labels[k] = v
		}
		_, err := f.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
		return err
	})
	f.Nodes = append(f.Nodes, names...)
	return names
}

func (f *Fleet) cleanup(t *testing.T) {
	ctx := context.Background()
	releaseJobs(ctx, f.kube, f.Namespace)
	bg := metav1.DeletePropagationBackground
	_ = f.kube.BatchV1().Jobs(f.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{PropagationPolicy: &bg}, metav1.ListOptions{})
	_ = f.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: TestLabel + "=" + f.ID})
	_ = f.kube.CoreV1().Namespaces().Delete(ctx, f.Namespace, metav1.DeleteOptions{})
}

// releaseJobs takes noderollout's finalizer off the namespace's Jobs. A worker takes it off when
// it finalizes a node; Jobs of a test that ended before that would otherwise keep their
// namespace terminating for ever.
func releaseJobs(ctx context.Context, kube kubernetes.Interface, namespace string) {
	jobs, err := kube.BatchV1().Jobs(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, j := range jobs.Items {
		if !slices.Contains(j.Finalizers, jobspec.FinalizerOutcome) {
			continue
		}
		rest := slices.DeleteFunc(slices.Clone(j.Finalizers), func(f string) bool { return f == jobspec.FinalizerOutcome })
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": append([]string{}, rest...)}})
		_, _ = kube.BatchV1().Jobs(namespace).Patch(ctx, j.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// Selector selects this fleet's nodes.
func (f *Fleet) Selector() string { return TestLabel + "=" + f.ID }

// Request is a rollout request over the fleet with a Job template whose Pods run for runFor.
// The rollout's name is name plus a suffix unique to this fleet.
func (f *Fleet) Request(name string, runFor time.Duration) api.RolloutRequest {
	return api.RolloutRequest{
		Name:         name + "-" + f.suffix,
		Namespace:    f.Namespace,
		NodeSelector: f.Selector(),
		JobTemplate:  JobTemplate(runFor, nil),
		Parallelism:  10,
		KeepJobs:     "always",
	}
}

// JobTemplate is a Job whose kwok Pod runs for runFor; podAnnotations steer kwok further
// (noderollout.dev/exit-code, noderollout.dev/fail-nodes; see dev/kwok/pod-run.yaml). A deleted
// running Pod terminates within 2 s (its termination grace, which kwok honours).
func JobTemplate(runFor time.Duration, podAnnotations map[string]string) string {
	return JobTemplateWithGrace(runFor, 2*time.Second, podAnnotations)
}

// JobTemplateWithGrace is JobTemplate with the Pod's termination grace: a deleted running Pod
// keeps running for that long (dev/kwok/pod-delete.yaml).
func JobTemplateWithGrace(runFor, grace time.Duration, podAnnotations map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: batch/v1
kind: Job
metadata:
  labels:
    app: e2e
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        noderollout.dev/run-seconds: "%g"
`, runFor.Seconds())
	for k, v := range podAnnotations {
		fmt.Fprintf(&b, "        %s: %q\n", k, v)
	}
	fmt.Fprintf(&b, `    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: %d
      containers:
      - name: work
        image: busybox
        command: ["sh", "-c", "echo rolling out on {{node}}"]
`, int(grace.Seconds()))
	return b.String()
}

// Start starts a rollout with the workflow ID the starter uses, for the default worker.
func Start(t *testing.T, req api.RolloutRequest) client.WorkflowRun {
	t.Helper()
	return StartOn(t, req, suiteQueue)
}

// StartOn starts a rollout on a task queue of the test's own workers, with a jobTimeout just
// above what its Pods need unless it sets one (withJobTimeout).
func StartOn(t *testing.T, req api.RolloutRequest, taskQueue string) client.WorkflowRun {
	t.Helper()
	return startRollout(t, withJobTimeout(req), taskQueue, 15*time.Minute)
}

// startRollout starts the rollout req as it is, under the workflow ID the starter uses, on
// taskQueue, to end within timeout.
func startRollout(t *testing.T, req api.RolloutRequest, taskQueue string, timeout time.Duration) client.WorkflowRun {
	t.Helper()
	run, err := stack.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID:                       api.RolloutID(req.Name),
		TaskQueue:                taskQueue,
		WorkflowExecutionTimeout: timeout,
	}, api.RolloutWorkflow, req)
	require.NoError(t, err)
	return run
}

// Result waits for the rollout and returns its result and error (a failed rollout's result
// travels in its error's details).
func Result(t *testing.T, run client.WorkflowRun) (api.RolloutResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var res api.RolloutResult
	var err error
	for {
		err = stack.Temporal.GetWorkflow(ctx, run.GetID(), "").Get(ctx, &res)
		var unavailable *serviceerror.Unavailable
		if !errors.As(err, &unavailable) || ctx.Err() != nil {
			break // a Temporal server restarting in a fault test answers Unavailable for a while
		}
		time.Sleep(time.Second)
	}
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &appErr) && appErr.HasDetails():
		require.NoError(t, appErr.Details(&res))
	case errors.As(err, &canceled) && canceled.HasDetails():
		require.NoError(t, canceled.Details(&res)) // an aborted rollout's counts
	}
	return res, err
}

// Succeeded waits for the rollout and requires that it succeeded; a failure names the Pods
// kwok left running, if any.
func Succeeded(t *testing.T, run client.WorkflowRun) api.RolloutResult {
	t.Helper()
	res, err := Result(t, run)
	if err != nil {
		id := strings.TrimPrefix(run.GetID(), api.RolloutIDPrefix)
		t.Fatal(stuckFailure(id[strings.LastIndex(id, ":")+1:], err))
	}
	return res
}

// Jobs lists the fleet's Jobs of one rollout, by node name.
func (f *Fleet) Jobs(t *testing.T, rollout string) map[string][]batchv1.Job {
	t.Helper()
	list, err := f.kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: jobspec.LabelRollout + "=" + rollout})
	require.NoError(t, err)
	byNode := map[string][]batchv1.Job{}
	for _, j := range list.Items {
		node := j.Annotations[jobspec.AnnotationNode]
		byNode[node] = append(byNode[node], j)
	}
	return byNode
}

// Markers reads each fleet node's outcome marker for the rollout.
func (f *Fleet) Markers(t *testing.T, rollout string) map[string]string {
	t.Helper()
	list, err := f.kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: f.Selector()})
	require.NoError(t, err)
	markers := map[string]string{}
	for _, n := range list.Items {
		markers[n.Name] = n.Annotations[jobspec.NodeMarkerKey(rollout)]
	}
	return markers
}

// waitFor polls cond until it holds or the timeout passes; the condition is the sync point.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parallel runs fn over items with bounded concurrency and fails the test on any error.
func parallel(t *testing.T, items []string, workers int, fn func(string) error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	ch := make(chan string)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range ch {
				if err := fn(it); err != nil && !apierrors.IsAlreadyExists(err) {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", it, err)
					}
					mu.Unlock()
				}
			}
		}()
	}
	for _, it := range items {
		ch <- it
	}
	close(ch)
	wg.Wait()
	require.NoError(t, firstErr)
}

// runStarter runs the starter binary and returns its combined output and exit code.
func runStarter(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(stack.BinDir, "starter"), append(args, "--temporal-address", stack.TemporalAddress)...)
	// The suite's queue unless the command names one (flags win over the variable).
	cmd.Env = append(os.Environ(), "NODEROLLOUT_TASK_QUEUE="+suiteQueue)
	out, err := cmd.CombinedOutput()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return string(out), code
}

// The suite cannot hang on a Pod that kwok leaves running. kwok applies a stage only on an
// event for the object, and now and then the event that would finish a Pod never comes: the
// Pod stays Running, and its rollout waited out the default jobTimeout of 30 minutes. So:
//   - every rollout a test starts has a jobTimeout just above what its Pods need (their
//     run-seconds plus jobTimeoutMargin), so a stuck Pod fails its test in about a minute;
//   - the watchdog kicks each Pod found Running past its run time: an annotation is an event,
//     and dev/kwok/pod-run.yaml finishes a kicked Pod at once;
//   - a test whose rollout still fails names the Pods the watchdog found (Succeeded).

// jobTimeoutMargin is how much longer than its Pods' run time a test's Job may take: kwok's
// and the Job controller's delays on a loaded machine, and a kick's.
const jobTimeoutMargin = time.Minute

// kickAfter is how long past its run time a Pod may stay Running before the watchdog kicks it.
const kickAfter = 10 * time.Second

// Annotations of dev/kwok/pod-run.yaml: the run time, a Pod that kwok holds (a missed event,
// on purpose), a kicked Pod; noKick tells the watchdog to only report a Pod.
const (
	runSecondsKey = "noderollout.dev/run-seconds"
	holdKey       = "noderollout.dev/hold"
	kickedKey     = "noderollout.dev/kicked"
	noKickKey     = "e2e.noderollout.dev/no-kick"
	// watchedLabel puts a Pod that no rollout made (one a gate waits for) under the watchdog.
	watchedLabel = "e2e.noderollout.dev/watched"
)

var runSecondsInTemplate = regexp.MustCompile(regexp.QuoteMeta(runSecondsKey) + `: "([0-9]+(?:\.[0-9]+)?)"`)

// withJobTimeout gives a request that sets no jobTimeout one just above what its Pods need:
// their run-seconds (from the inline template) and jobTimeoutMargin.
func withJobTimeout(req api.RolloutRequest) api.RolloutRequest {
	m := runSecondsInTemplate.FindStringSubmatch(req.JobTemplate)
	if req.JobTimeout != "" || m == nil {
		return req
	}
	run, _ := strconv.ParseFloat(m[1], 64)
	req.JobTimeout = (time.Duration(math.Ceil(run))*time.Second + jobTimeoutMargin).String()
	return req
}

// kwokWatchdog kicks the Pods of the suite's rollouts, and the Pods a test put under it
// (watchedLabel), that kwok left Running past their run time, and remembers each by its rollout.
type kwokWatchdog struct {
	mu    sync.Mutex
	stuck map[string][]string // by rollout: what was found and done
	seen  map[types.UID]bool
}

var watchdog = &kwokWatchdog{stuck: map[string][]string{}, seen: map[types.UID]bool{}}

// run looks every two seconds until ctx ends.
func (w *kwokWatchdog) run(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			w.look(ctx, time.Now())
		}
	}
}

func (w *kwokWatchdog) look(ctx context.Context, now time.Time) {
	var running []corev1.Pod
	for _, selector := range []string{jobspec.LabelRollout, watchedLabel} {
		pods, err := stack.Kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: selector, FieldSelector: "status.phase=Running"})
		if err != nil {
			return // the API server may be down in a fault test: look again later
		}
		running = append(running, pods.Items...)
	}
	for _, p := range running {
		due, ok := runsUntil(&p)
		if !ok || p.DeletionTimestamp != nil || now.Before(due.Add(kickAfter)) || w.seenBefore(p.UID) {
			continue
		}
		what := fmt.Sprintf("Pod %s/%s on node %s was still Running %s after its run-seconds (%s) ended",
			p.Namespace, p.Name, p.Spec.NodeName, now.Sub(due).Round(time.Second), p.Annotations[runSecondsKey])
		_, nodeErr := stack.Kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		if _, no := p.Annotations[noKickKey]; no {
			what += "; not kicked (the test asked so)"
		} else if apierrors.IsNotFound(nodeErr) {
			what += "; not kicked: its Node is gone, and no kubelet reports such a Pod (the test may be about that)"
		} else {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, kickedKey, now.UTC().Format(time.RFC3339))
			_, err := stack.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			what += "; kicked it"
			if err != nil {
				what += " in vain: " + err.Error()
			}
		}
		w.record(p.Labels[jobspec.LabelRollout], what)
	}
}

// runsUntil is when a Pod is to finish by its run-seconds: from its start, for a Pod that
// finishes at all (restartPolicy Always runs for ever).
func runsUntil(p *corev1.Pod) (time.Time, bool) {
	run, err := strconv.ParseFloat(p.Annotations[runSecondsKey], 64)
	if err != nil || p.Status.StartTime == nil || p.Spec.RestartPolicy == corev1.RestartPolicyAlways {
		return time.Time{}, false
	}
	// startTime is whole seconds: the Pod may have started up to a second later.
	return p.Status.StartTime.Add(time.Duration(run*float64(time.Second)) + time.Second), true
}

func (w *kwokWatchdog) seenBefore(uid types.UID) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.seen[uid]
	w.seen[uid] = true
	return seen
}

func (w *kwokWatchdog) record(rollout, what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stuck[rollout] = append(w.stuck[rollout], what)
	fmt.Printf("e2e: kwok watchdog: rollout %s: %s\n", rollout, what)
}

// report says what the watchdog found of the rollout's Pods; "" when nothing.
func (w *kwokWatchdog) report(rollout string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	found := append([]string(nil), w.stuck[rollout]...)
	if len(found) == 0 {
		return ""
	}
	sort.Strings(found)
	return "kwok left Pods running: " + strings.Join(found, "; ")
}

// stuckFailure is how Succeeded reports a rollout that failed: its error and what the watchdog
// found of its Pods.
func stuckFailure(rollout string, err error) string {
	msg := fmt.Sprintf("rollout %s failed: %v", rollout, err)
	if report := watchdog.report(rollout); report != "" {
		msg += "\n" + report
	}
	return msg
}
