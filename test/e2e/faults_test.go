//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every fault test checks the same promise: each selected node ends with exactly one outcome,
// no node gets two Jobs from one rollout, and the rollout completes.

// ownWorkers starts n workers on a task queue of the test's own, so the test decides which
// workers run its rollout; they are stopped at the end.
func ownWorkers(t *testing.T, n int, extra ...string) (string, []*Worker) {
	t.Helper()
	queue := "e2e-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	var ws []*Worker
	for i := 0; i < n; i++ {
		w, err := StartWorker(queue+"-"+string(rune('a'+i)), append([]string{"--task-queue", queue}, extra...)...)
		require.NoError(t, err)
		ws = append(ws, w)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			_ = w.Stop()
		}
	})
	return queue, ws
}

// midRollout waits until at least some Jobs exist but the rollout has not finished.
func midRollout(t *testing.T, f *Fleet, rollout string, jobs int) {
	t.Helper()
	waitFor(t, 90*time.Second, "rollout under way", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) >= jobs
	})
}

func requireOneJobPerNode(t *testing.T, f *Fleet, rollout string) {
	t.Helper()
	jobs := f.Jobs(t, rollout)
	for _, n := range f.Nodes {
		require.Len(t, jobs[n], 1, "node %s must have exactly one Job", n)
	}
}

func requireEveryNodeOnce(t *testing.T, f *Fleet, res api.RolloutResult) {
	t.Helper()
	require.Equal(t, len(f.Nodes), res.Selected)
	require.Equal(t, len(f.Nodes), res.Counts.Finished(), "every node has exactly one outcome: %+v", res.Counts)
}

// requireSurvives is the fault tests' one scenario: a rollout over nodes kwok nodes (Pods of
// 3 s, at most parallelism at once) on the test's own workers, and the fault once more Jobs
// than parallelism exist; the rollout must still succeed on every node, one Job each.
func requireSurvives(t *testing.T, name string, nodes, parallelism, workers int, fault func(queue string, ws []*Worker)) {
	t.Helper()
	queue, ws := ownWorkers(t, workers)
	f := NewFleet(t, nodes)
	req := f.Request(name, 3*time.Second)
	req.Parallelism = parallelism
	req.JobTimeout = faultJobTimeout.String()
	run := StartOn(t, req, queue)
	midRollout(t, f, req.Name, parallelism+1)
	fault(queue, ws)
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, nodes, res.Counts.Succeeded)
	requireOneJobPerNode(t, f, req.Name)
}

// faultJobTimeout is the jobTimeout of a rollout that a fault interrupts: the fault (up to 30 s
// here), the stack's recovery from it (the controller manager marks Jobs complete up to 40 s
// after an API server outage: TestSoakStackJobsCompleteSoonAfterAPIServerOutage), and
// jobTimeoutMargin. A Pod kwok leaves running still fails its test in minutes, not 30.
const faultJobTimeout = 3 * time.Minute

// stopFor stops a component of the stack for d (0: a restart), then starts it again.
func stopFor(t *testing.T, component string, d time.Duration) {
	t.Helper()
	// Whatever fails in this test, the tests after it find the component up (its restart has
	// failed once: every later test then failed on the missing Temporal).
	t.Cleanup(func() { devScript(t, "start-component.sh", component) })
	devScript(t, "stop-component.sh", component)
	time.Sleep(d) // the outage itself, not a synchronisation
	devScript(t, "start-component.sh", component)
}

func TestFaultWorkerKilledMidRollout(t *testing.T) {
	requireSurvives(t, "kill-worker", 20, 5, 1, func(queue string, ws []*Worker) {
		ws[0].Kill()
		time.Sleep(5 * time.Second) // down time is part of the scenario, not a synchronisation
		restarted, err := StartWorker(ws[0].Name+"-restarted", "--task-queue", queue)
		require.NoError(t, err)
		t.Cleanup(func() { _ = restarted.Stop() })
	})
}

// TestFaultWorkerKilledInAHungAPICall kills the worker while the rollout's first API activity
// waits on an API server that accepts connections and answers nothing (frozen): the server
// learns the worker is gone from the activity's 30 s heartbeat timeout, not its 5-minute
// StartToClose, and the restarted worker takes the rollout on.
func TestFaultWorkerKilledInAHungAPICall(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 4)
	req := f.Request("hung-api-call", 2*time.Second)
	req.Parallelism = 4
	req.JobTimeout = faultJobTimeout.String()
	frozen := true
	thaw := func() {
		if frozen {
			frozen = false
			devScript(t, "freeze-component.sh", "--thaw", "kube-apiserver")
		}
	}
	devScript(t, "freeze-component.sh", "kube-apiserver")
	t.Cleanup(thaw)
	run := StartOn(t, req, queue)
	var hung string
	waitFor(t, time.Minute, "an API activity started on the worker", func() bool {
		d, err := stack.Temporal.DescribeWorkflow(context.Background(), run.GetID(), run.GetRunID())
		if err != nil {
			return false
		}
		for _, a := range d.RawResponse.GetPendingActivities() {
			if a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				hung = a.GetActivityType().GetName()
				return true
			}
		}
		return false
	})
	ws[0].Kill()
	killed := time.Now()
	thaw()
	restarted, err := StartWorker(ws[0].Name+"-restarted", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop() })
	res := Succeeded(t, run)
	took := time.Since(killed)
	t.Logf("the worker died in %s; the rollout ended %s later", hung, took.Round(100*time.Millisecond))
	require.Equal(t, 4, res.Counts.Succeeded)
	requireOneJobPerNode(t, f, req.Name)
	require.Less(t, took, 2*time.Minute, "the dead worker's %s was retried after its heartbeat timeout, not its 5-minute StartToClose", hung)
}

func TestFaultOneOfTwoWorkersKilled(t *testing.T) {
	requireSurvives(t, "two-workers", 20, 6, 2, func(_ string, ws []*Worker) { ws[0].Kill() })
}

func devScript(t *testing.T, script string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(stack.RepoDir, "dev", script), args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		// One log call per line: dev/e2e.sh shows CI only the lines that carry a test's file
		// and line, and a multi-line message would reach it as its first line alone.
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			t.Logf("%s %v: %s", script, args, line)
		}
		t.Fatalf("%s %v: %v", script, args, err)
	}
}

func TestFaultTemporalServerRestarted(t *testing.T) {
	requireSurvives(t, "temporal-restart", 15, 5, 1, func(string, []*Worker) { stopFor(t, "temporal", 0) })
}

// TestSoakTemporalDownWhileShortJobsFinish stops the Temporal server while short Jobs end
// inside their nodes' first workflow task, for longer than that task's timeout: the worker
// creates, watches and finalizes (deleting each succeeded Job) but cannot report it, so the
// task runs again from the start once the server is back. The second run must not create the
// node's Job again. Jobs are deleted once finalized (KeepJobs's default), so a Job watch counts
// the creations.
func TestSoakTemporalDownWhileShortJobsFinish(t *testing.T) {
	queue, _ := ownWorkers(t, 1)
	f := NewFleet(t, 15)
	req := f.Request("temporal-down", 3*time.Second)
	req.JobTimeout = faultJobTimeout.String()
	req.KeepJobs = ""
	req.Parallelism = 5
	created := watchJobs(t, f.Namespace)
	run := StartOn(t, req, queue)
	waitFor(t, 90*time.Second, "six Jobs created", func() bool { return created.total() >= 6 })
	stopFor(t, "temporal", 30*time.Second) // past the node's 15 s workflow-task timeout
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, 15, res.Counts.Succeeded)
	// The outage did hit the window: some node's task ran again after it had finalized.
	require.Positive(t, oneJobEachAndReadBack(t, f, created), "no node read its outcome back from the Node")
}

// oneJobEachAndReadBack asserts that the Job watch saw one Job created per node, and counts
// the nodes whose workflow read its outcome back from the Node (a workflow task that had
// finalized the node ran again, and created nothing).
func oneJobEachAndReadBack(t *testing.T, f *Fleet, created *jobWatch) int {
	t.Helper()
	readBack := 0
	for _, n := range f.Nodes {
		require.Len(t, created.uids(n), 1, "node %s must have had exactly one Job created", n)
		var r api.NodeResult
		require.NoError(t, stack.Temporal.GetWorkflow(context.Background(), api.NodeWorkflowID(n), "").Get(context.Background(), &r))
		if r.Reason == api.ReasonRecordedOnNode {
			readBack++
		}
	}
	return readBack
}

func TestSoakAPIServerDown20Seconds(t *testing.T) {
	requireSurvives(t, "apiserver-down", 15, 5, 1, func(string, []*Worker) { stopFor(t, "kube-apiserver", 20*time.Second) })
}

func TestFaultJobDeletedByHand(t *testing.T) {
	f := NewFleet(t, 6)
	req := f.Request("job-deleted", 20*time.Second)
	req.Parallelism = 6
	req.MaxFailures = "1"
	run := Start(t, req)
	victim := f.Nodes[3]
	var job batchv1.Job
	waitFor(t, 60*time.Second, "the victim's Job", func() bool {
		js := f.Jobs(t, req.Name)[victim]
		if len(js) == 1 {
			job = js[0]
		}
		return len(js) == 1
	})
	bg := metav1.DeletePropagationBackground
	require.NoError(t, stack.Kube.BatchV1().Jobs(f.Namespace).Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: &bg}))
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, 5, res.Counts.Succeeded)
	require.Len(t, res.Failures, 1)
	require.Equal(t, victim, res.Failures[0].Node)
	require.Equal(t, api.ReasonJobDeleted, res.Failures[0].Reason)
}

func TestFaultNodeDeletedWhileJobRuns(t *testing.T) {
	queue, _ := ownWorkers(t, 1, "--node-check-interval", "1s")
	f := NewFleet(t, 4)
	req := f.Request("node-deleted", 30*time.Second)
	req.Parallelism = 4
	run := StartOn(t, req, queue)
	victim := f.Nodes[1]
	waitFor(t, 60*time.Second, "the victim's Job", func() bool { return len(f.Jobs(t, req.Name)[victim]) == 1 })
	require.NoError(t, stack.Kube.CoreV1().Nodes().Delete(context.Background(), victim, metav1.DeleteOptions{}))
	res, err := Result(t, run)
	require.NoError(t, err, "a gone node is not charged to the failure budget")
	require.Equal(t, 1, res.Counts.NodeGone)
	require.Equal(t, 3, res.Counts.Succeeded)
}

func TestFaultPodNeverStartsTimesOut(t *testing.T) {
	f := NewFleet(t, 3)
	stuck := f.AddNodes(t, 1, map[string]string{"noderollout.dev/stuck": "true"})
	req := f.Request("stuck", time.Second)
	req.Parallelism = 1
	// Long enough for a healthy node's Pod that kwok missed finishing to be kicked by the
	// watchdog (kickAfter past its run time) and still succeed; short, so the stuck node's
	// timeout comes soon.
	req.JobTimeout = (kickAfter + 15*time.Second).String()
	req.MaxFailures = "1"
	res := Succeeded(t, Start(t, req))
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, 3, res.Counts.Succeeded, "the slot is freed and the others run")
	require.Equal(t, 1, res.Counts.TimedOut)
	require.Equal(t, stuck[0], res.Failures[0].Node)
	waitFor(t, 30*time.Second, "the timed-out Job is deleted", func() bool { return len(f.Jobs(t, req.Name)[stuck[0]]) == 0 })
}

// TestFaultOverlappingRolloutsNeverShareANode runs two rollouts over overlapping nodes at once:
// on every shared node the two Jobs' lifetimes never overlap.
func TestFaultOverlappingRolloutsNeverShareANode(t *testing.T) {
	f := NewFleet(t, 8)
	a := f.Request("overlap-a", 3*time.Second)
	a.NodeSelector, a.Nodes = "", f.Nodes[:6]
	a.Parallelism = 6
	b := f.Request("overlap-b", 3*time.Second)
	b.NodeSelector, b.Nodes = "", f.Nodes[2:]
	b.Parallelism = 6
	runA, runB := Start(t, a), Start(t, b)
	resA, resB := Succeeded(t, runA), Succeeded(t, runB)
	require.Equal(t, 6, resA.Counts.Succeeded)
	require.Equal(t, 6, resB.Counts.Succeeded)
	jobsA, jobsB := f.Jobs(t, a.Name), f.Jobs(t, b.Name)
	for _, n := range f.Nodes[2:6] {
		require.Len(t, jobsA[n], 1)
		require.Len(t, jobsB[n], 1)
		ja, jb := jobsA[n][0], jobsB[n][0]
		first, second := ja, jb
		if jb.CreationTimestamp.Before(&ja.CreationTimestamp) {
			first, second = jb, ja
		}
		require.False(t, second.CreationTimestamp.Time.Before(finishedAt(t, first)),
			"node %s ran %s before %s finished", n, second.Name, first.Name)
	}
}

func TestFaultAbortDeletesRunningJobs(t *testing.T) {
	f := NewFleet(t, 12)
	req := f.Request("abort", 60*time.Second)
	req.Parallelism = 4
	run := Start(t, req)
	midRollout(t, f, req.Name, 4)
	// Past the 20 s watch, starter status shows each node's wait and, from its step query, the
	// very Job it waits for.
	var shown string
	waitFor(t, 50*time.Second, "starter status to name a running Job", func() bool {
		out, code := runStarter(t, "status", req.Name)
		shown = out
		if code != 0 {
			return false
		}
		for node, jobs := range f.Jobs(t, req.Name) {
			if len(jobs) == 1 && regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(node)+`\s+job running\s+\S+\s+Job `+regexp.QuoteMeta(f.Namespace+"/"+jobs[0].Name)+`$`).MatchString(out) {
				return true
			}
		}
		return false
	})
	t.Logf("starter status mid-rollout:\n%s", shown)
	out, code := runStarter(t, "abort", req.Name, "--reason", "e2e abort")
	require.Equal(t, 0, code, out)
	_, err := Result(t, run)
	require.Error(t, err)
	require.Contains(t, strings.ToLower(err.Error()), "cancel")
	waitFor(t, 60*time.Second, "every aborted Job deleted", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	markers := f.Markers(t, req.Name)
	done := 0
	for _, m := range markers {
		if m != "" {
			done++
		}
	}
	require.Equal(t, 0, done, "no node finished: the Jobs ran 60 s and were aborted")
}

func TestFaultRerunAfterFailureRunsOnlyFailedAndNewNodes(t *testing.T) {
	f := NewFleet(t, 8)
	bad := []string{f.Nodes[1], f.Nodes[4]}
	req := f.Request("rerun-failed", time.Second)
	req.Parallelism = 8
	req.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/fail-nodes": strings.Join(bad, ",")})
	first, err := Result(t, Start(t, req))
	require.Error(t, err, "two failures exceed the default budget of 0")
	require.Equal(t, 6, first.Counts.Succeeded)
	require.Equal(t, 2, first.Counts.Failed)

	// Same rollout, same template: the six done nodes are skipped; the two failed nodes and
	// one added since run again (they fail again here, which the larger budget allows).
	added := f.AddNodes(t, 1, nil)
	req.MaxFailures = "2"
	second := Succeeded(t, Start(t, req))
	require.Equal(t, 6, second.Counts.Skipped)
	require.Equal(t, 1, second.Counts.Succeeded)
	require.Equal(t, 2, second.Counts.Failed)
	jobs := f.Jobs(t, req.Name)
	for _, n := range f.Nodes {
		want := 1
		if n == bad[0] || n == bad[1] {
			want = 2
		}
		require.Len(t, jobs[n], want, "node %s", n)
	}
	require.Len(t, jobs[added[0]], 1)
}

// TestWorkerStopsGracefullyAndAnotherResumes: SIGTERM makes the worker drain and exit 0; the
// Job waits it gave up resume on the next worker, and no Job is made twice.
func TestWorkerStopsGracefullyAndAnotherResumes(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 6)
	req := f.Request("graceful", 4*time.Second)
	req.Parallelism = 3
	run := StartOn(t, req, queue)
	midRollout(t, f, req.Name, 3)
	require.NoError(t, ws[0].Stop(), "SIGTERM ends the worker with exit code 0")
	next, err := StartWorker(ws[0].Name+"-next", "--task-queue", queue)
	require.NoError(t, err)
	defer func() { _ = next.Stop() }()
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, 6, res.Counts.Succeeded)
	requireOneJobPerNode(t, f, req.Name)
}

// TestFaultTTLRemovesAFinishedJobWhileTheWorkerIsDown: the template's ttlSecondsAfterFinished is
// 0, so the TTL controller deletes the Job the moment it completes, and no worker watches then.
// The outcome must not be lost: our finalizer keeps the finished Job until the worker is back
// and FinalizeJob has recorded `succeeded`; then the Job goes.
func TestFaultTTLRemovesAFinishedJobWhileTheWorkerIsDown(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	req := f.Request("ttl-zero", 8*time.Second)
	req.JobTemplate = strings.Replace(req.JobTemplate, "  backoffLimit: 0\n", "  backoffLimit: 0\n  ttlSecondsAfterFinished: 0\n", 1)
	require.Contains(t, req.JobTemplate, "ttlSecondsAfterFinished: 0")
	run := StartOn(t, req, queue)

	ctx := context.Background()
	var job batchv1.Job
	waitFor(t, 60*time.Second, "the node's Pod to run", func() bool {
		jobs := f.Jobs(t, req.Name)[node]
		if len(jobs) != 1 {
			return false
		}
		job = jobs[0]
		pods, err := stack.Kube.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning
	})
	ws[0].Kill()

	// While no worker runs, the Job completes and its TTL deletes it.
	waitFor(t, 90*time.Second, "the Job to complete and its TTL to delete it", func() bool {
		got, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true // without our finalizer it is simply gone
		}
		return err == nil && got.DeletionTimestamp != nil
	})
	if held, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{}); err == nil {
		require.Contains(t, held.Finalizers, "noderollout.io/outcome", "our finalizer holds the deleted Job")
		require.True(t, slices.ContainsFunc(held.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
		}), "the Job completed before its TTL deleted it: %+v", held.Status)
	}

	restarted, err := StartWorker(ws[0].Name+"-back", "--task-queue", queue)
	require.NoError(t, err)
	defer func() { _ = restarted.Stop() }()

	res, err := Result(t, run)
	require.NoError(t, err, "the rollout succeeds: %+v", res)
	require.Equal(t, 1, res.Counts.Succeeded, "%+v", res)
	require.Equal(t, jobspec.NodeMarker(res.TemplateHash, string(api.OutcomeSucceeded)), f.Markers(t, req.Name)[node])
	waitFor(t, 30*time.Second, "the finalized Job to go", func() bool {
		_, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
