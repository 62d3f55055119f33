package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/freeport"
	"github.com/noderollout/noderollout/internal/readyz"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Names of the systems, as the CSV's system column spells them. The baseline makes the same
// Kubernetes calls per node as noderollout; baseline-minimal only creates and deletes Jobs.
const (
	systemNoderollout     = "noderollout"
	systemBaseline        = "baseline"
	systemBaselineMinimal = "baseline-minimal"
	// systemCandidate is noderollout built from another tree (--candidate-bin): a change to the
	// worker measured against the current one in the same run, alternated with it.
	systemCandidate = "noderollout-candidate"
	// systemTemporalFloor is a child workflow per node and nothing else (package floor): what
	// the design costs Temporal at least, the floor under noderollout's Temporal figures.
	systemTemporalFloor = "temporal-floor"
	// systemSUC is the peer, Rancher system-upgrade-controller, as shipped (one Plan over the
	// fleet); systemSUCQPS the same with its client rate limit raised from client-go's default
	// 5 QPS to the worker's (dev/peers/suc-client-qps.patch).
	systemSUC    = "suc"
	systemSUCQPS = "suc-qps"
)

// isNoderollout says whether the system is a noderollout worker.
func isNoderollout(system string) bool {
	return system == systemNoderollout || system == systemCandidate
}

// isBaseline says whether the system is one of the plain dispatchers.
func isBaseline(system string) bool {
	return system == systemBaseline || system == systemBaselineMinimal
}

// runSpec is one rollout to measure: a system on one fleet.
type runSpec struct {
	system      string
	fleet       *fleet
	namespace   string
	template    string
	parallelism int
	jobSeconds  float64
	rep         int     // repetition, 0-based
	tr          *tracer // the bench's own watch on the run's Jobs and Pods; nil without --trace
}

// id names this run's namespace, rollout, task queue and files: the fleet, the system and the
// repetition. Two noderollout builds on one fleet need rollout names of their own: the name
// keys the Node markers, and a second rollout under the same name would skip every Node.
func (s runSpec) id() string { return fmt.Sprintf("%s-%s-r%d", s.fleet.id, s.system, s.rep) }

// processUse is a client process's resources over the rollout.
type processUse struct {
	PeakMB float64 `json:"peakMB"`
	CPU    float64 `json:"cpuSeconds"`
}

// workerProc is a noderollout worker started from the built binary.
type workerProc struct {
	cmd         *exec.Cmd
	metricsAddr string
	done        chan struct{}
}

// profile saves a CPU profile of the worker's next seconds to path; failures are only logged.
func (w *workerProc) profile(ctx context.Context, seconds int, path string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.metricsAddr, seconds), nil)
	if err != nil {
		logf("worker profile: %v", err)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		logf("worker profile: %v", err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		logf("worker profile: %s", resp.Status)
		return
	}
	f, err := os.Create(path)
	if err != nil {
		logf("worker profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		logf("worker profile: %v", err)
		return
	}
	logf("worker CPU profile in %s", path)
}

func startWorker(ctx context.Context, bin, kubeconfig, temporalAddress, taskQueue, logPath string) (*workerProc, error) {
	return startReadyProcess(ctx, bin, logPath, func(addr string) []string {
		return []string{"--kubeconfig", kubeconfig, "--temporal-address", temporalAddress,
			"--task-queue", taskQueue, "--metrics-listen", addr, "--kube-qps", "1000", "--kube-burst", "2000",
			"--stop-timeout", "5s", "--pprof"}
	})
}

// startReadyProcess starts bin with the arguments args gives for a free listen address and
// waits until the process answers GET /readyz there.
func startReadyProcess(ctx context.Context, bin, logPath string, args func(addr string) []string) (*workerProc, error) {
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	w := &workerProc{metricsAddr: addr, cmd: exec.Command(bin, args(addr)...)}
	if err := w.launch(logPath); err != nil {
		return nil, err
	}
	if err := w.await(readyz.Await(ctx, addr, w.done, time.Minute), "worker", logPath); err != nil {
		return nil, err
	}
	return w, nil
}

// launch starts w.cmd with its output in logPath; w.done closes once it has exited.
func (w *workerProc) launch(logPath string) error {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	w.done = make(chan struct{})
	w.cmd.Stdout, w.cmd.Stderr = logFile, logFile
	if err := w.cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	go func() { _ = w.cmd.Wait(); logFile.Close(); close(w.done) }()
	return nil
}

// await turns a failed wait for readiness into an error naming the process and its log, and
// stops a process that is still running.
func (w *workerProc) await(waitErr error, name, logPath string) error {
	if waitErr == nil {
		return nil
	}
	if !errors.Is(waitErr, readyz.ErrExited) {
		w.stop()
	}
	return fmt.Errorf("%s %w; see %s", name, waitErr, logPath)
}

func (w *workerProc) pid() int { return w.cmd.Process.Pid }

func (w *workerProc) metrics() (string, error) {
	resp, err := http.Get("http://" + w.metricsAddr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func (w *workerProc) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// rolloutRequest is the request the bench starts: every node of the fleet, Jobs deleted as
// they end, a failure budget that the deterministic failures fit in.
func rolloutRequest(name string, s runSpec) api.RolloutRequest {
	return api.RolloutRequest{
		Name:         name,
		Namespace:    s.namespace,
		NodeSelector: s.fleet.selector(),
		JobTemplate:  s.template,
		Parallelism:  s.parallelism,
		MaxFailures:  "5%",
		KeepJobs:     "never",
	}
}

// startRollout starts the Rollout workflow on the bench worker's task queue.
func startRollout(ctx context.Context, tc client.Client, taskQueue string, req api.RolloutRequest) (client.WorkflowRun, error) {
	return tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       api.RolloutID(req.Name),
		TaskQueue:                taskQueue,
		WorkflowExecutionTimeout: 3 * time.Hour,
	}, api.RolloutWorkflow, req)
}

// followRollout prints the status query's counts every interval until ctx ends.
func followRollout(ctx context.Context, tc client.Client, id string, every time.Duration, started time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
		v, err := tc.QueryWorkflow(ctx, id, "", api.QueryStatus)
		if err != nil {
			continue // between two runs of a continue-as-new the query may miss
		}
		var st api.RolloutStatus
		if v.Get(&st) == nil {
			c := st.Counts
			logf("  noderollout t=%3.0fs: %d/%d done (%d failed), %d running, run %d",
				time.Since(started).Seconds(), c.Finished(), st.Selected, c.Failures(), c.Running, st.ContinuedAsNew+1)
		}
	}
}

// watchWithStarter follows the rollout with "starter status -w" until it ends (or ctx does), as
// a user watching it would, so that its queries show in the run's Temporal actions.
func watchWithStarter(ctx context.Context, bin, temporalAddress, id, logPath string) {
	logFile, err := os.Create(logPath)
	if err != nil {
		logf("watch: %v", err)
		return
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, bin, "status", "-w", id, "--address", temporalAddress)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil && ctx.Err() == nil {
		logf("watch: starter status -w %s: %v (see %s)", id, err, logPath)
	}
}

// startWithStarter starts the rollout with "starter start -f FILE --wait", as a user would,
// and returns once the workflow exists; the starter goes on following it until it ends or ctx
// does. Its output goes to logPrefix.log, the request to logPrefix.json.
func startWithStarter(ctx context.Context, tc client.Client, bin, temporalAddress, taskQueue string, req api.RolloutRequest, logPrefix string) (client.WorkflowRun, error) {
	raw, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(logPrefix+".json", raw, 0o644); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPrefix + ".log")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "start", "-f", logPrefix+".json", "--wait",
		"--address", temporalAddress, "--task-queue", taskQueue)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logFile.Close() }()
	id := api.RolloutID(req.Name)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if desc, err := tc.DescribeWorkflow(ctx, id, ""); err == nil {
			// The run ID, from which the bench walks the rollout's runs and children.
			return tc.GetWorkflow(ctx, id, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()), nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("starter start exited before the rollout existed: %v (see %s.log)", err, logPrefix)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no rollout %s 30 s after starter start (see %s.log)", id, logPrefix)
		}
	}
}

// waitRollout waits for the rollout's last run and returns its result, also when it failed
// with the result in its error's details.
func waitRollout(ctx context.Context, tc client.Client, id string) (api.RolloutResult, error) {
	var res api.RolloutResult
	err := tc.GetWorkflow(ctx, id, "").Get(ctx, &res)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		_ = appErr.Details(&res)
	}
	return res, err
}

// baselineResult is what bench/baseline prints.
type baselineResult struct {
	Nodes       int     `json:"nodes"`
	Succeeded   int     `json:"succeeded"`
	Failed      int     `json:"failed"`
	CreateFails int     `json:"createFailures"`
	Makespan    float64 `json:"makespanSeconds"`
}

// runBaseline runs the baseline process to completion and returns what it printed, the
// resources it used (from the kernel's accounting at its exit) and when its clock started:
// the moment the start line was written to the ready process, its informer already synced,
// as noderollout's clock starts at the start request with the worker's informers running.
// ready is called just before the start line is written (to read the counters there).
func runBaseline(ctx context.Context, bin, kubeconfig, workDir string, s runSpec, run string, ready func()) (baselineResult, processUse, time.Time, error) {
	var start time.Time
	tmpl := filepath.Join(workDir, "baseline-job-"+s.id()+".yaml")
	if err := os.WriteFile(tmpl, []byte(s.template), 0o644); err != nil {
		return baselineResult{}, processUse{}, start, err
	}
	args := []string{"--kubeconfig", kubeconfig, "--namespace", s.namespace,
		"--selector", s.fleet.selector(), "--template", tmpl, "--parallelism", fmt.Sprint(s.parallelism),
		"--kube-qps", "1000", "--kube-burst", "2000", "--run", run, "--wait-start"}
	if s.system == systemBaselineMinimal {
		args = append(args, "--minimal")
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return baselineResult{}, processUse{}, start, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return baselineResult{}, processUse{}, start, err
	}
	if err := cmd.Start(); err != nil {
		return baselineResult{}, processUse{}, start, err
	}
	out := bufio.NewReader(stdout)
	line, readErr := out.ReadString('\n')
	if readErr == nil && strings.TrimSpace(line) == "ready" {
		ready()
		start = time.Now()
		_, readErr = io.WriteString(stdin, "start\n")
	} else if readErr == nil {
		readErr = fmt.Errorf("baseline printed %q instead of ready", line)
	}
	rest, _ := io.ReadAll(out)
	err = cmd.Wait()
	var use processUse
	if st := cmd.ProcessState; st != nil {
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			use.PeakMB = float64(ru.Maxrss) / 1024
			use.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
	}
	if err == nil {
		err = readErr
	}
	if err != nil {
		return baselineResult{}, use, start, fmt.Errorf("baseline: %w", err)
	}
	var res baselineResult
	if err := json.Unmarshal(rest, &res); err != nil {
		return res, use, start, fmt.Errorf("baseline printed %q: %w", rest, err)
	}
	return res, use, start, nil
}
