//go:build e2e

package e2e

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Long Jobs: once a Job outlasts its node's 20 s watch, the node awaits the word of its end
// (AwaitJobEnd, completed by a worker's Job informer) instead of heartbeating WaitJob, so a
// node's Temporal actions do not grow with its Job's length.

// longJobSeconds is the Jobs' run time in TestLongJobsCostConstantActions:
// E2E_LONG_JOB_SECONDS, 120 by default.
func longJobSeconds(t *testing.T) time.Duration {
	if s := os.Getenv("E2E_LONG_JOB_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "E2E_LONG_JOB_SECONDS")
		return time.Duration(n) * time.Second
	}
	return 120 * time.Second
}

// awaitingTheirEnd says whether every node of f has its AwaitJobEnd open.
func awaitingTheirEnd(t *testing.T, f *Fleet) bool {
	for _, n := range f.Nodes {
		if !awaitingItsEnd(n) {
			return false
		}
	}
	return true
}

// abortUntilPodsGone aborts the rollout with the starter and says how long every Pod of the
// fleet's namespace took to go.
func abortUntilPodsGone(t *testing.T, f *Fleet, rollout, reason string) time.Duration {
	t.Helper()
	out, code := runStarter(t, "abort", rollout, "--reason", reason)
	require.Equal(t, 0, code, out)
	aborted := time.Now()
	waitFor(t, 60*time.Second, "every Pod of the rollout gone", func() bool {
		pods, err := stack.Kube.CoreV1().Pods(f.Namespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0
	})
	return time.Since(aborted)
}

// awaitingItsEnd says whether the node's workflow awaits its Job's end (AwaitJobEnd).
func awaitingItsEnd(node string) bool {
	d, err := stack.Temporal.DescribeWorkflow(context.Background(), api.NodeWorkflowID(node), "")
	if err != nil || d.RawResponse == nil {
		return false
	}
	for _, a := range d.RawResponse.PendingActivities {
		if a.ActivityId == activities.AwaitJobEndActivityID {
			return true
		}
	}
	return false
}

// markerBatches counts the workflow tasks that recorded markers (each one BatchMarkers action)
// in the latest runs of these workflows: unlike the server's counter, only they count.
func markerBatches(t *testing.T, workflowIDs ...string) int {
	t.Helper()
	n := 0
	for _, id := range workflowIDs {
		tasks := map[int64]bool{}
		it := stack.Temporal.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			require.NoError(t, err)
			if m := e.GetMarkerRecordedEventAttributes(); m != nil {
				tasks[m.GetWorkflowTaskCompletedEventId()] = true
			}
		}
		n += len(tasks)
	}
	return n
}

// nodeActivities counts the activities the node workflows of f scheduled, by type.
func nodeActivities(t *testing.T, f *Fleet) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range f.Nodes {
		it := stack.Temporal.GetWorkflowHistory(context.Background(), api.NodeWorkflowID(n), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			require.NoError(t, err)
			if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
				out[a.GetActivityType().GetName()]++
			}
		}
	}
	return out
}

// A rollout of 12 nodes, all at once, with Jobs of 2 minutes (E2E_LONG_JOB_SECONDS), started
// and followed to its end by starter start --wait: its actions per node, from the dev server's
// own counter, stay at most 6 with no heartbeat, and following it costs at most one query a
// minute. The test runs alone on the stack (the counter is the server's), and reads the counter
// settled before and after, so no earlier test's late-reported tasks land in its window; the
// log adds the marker batches of its own histories. It takes the Jobs' run time.
func TestLongJobsCostConstantActions(t *testing.T) {
	const nodes = 12
	d := longJobSeconds(t)
	queue, _ := ownWorkers(t, 1)
	f := NewFleet(t, nodes)
	req := f.Request("actions", d)
	req.Parallelism = nodes
	req.JobTimeout = (d + 3*time.Minute).String()
	before := settledActions(t) // the previous test's last tasks are not this one's
	began := time.Now()
	out, code := runStarter(t, "start", "-f", writeRequest(t, req), "--wait", "--task-queue", queue)
	followed := time.Since(began)
	require.Equal(t, 0, code, out)
	res, err := Result(t, stack.Temporal.GetWorkflow(context.Background(), api.RolloutID(req.Name), ""))
	require.NoError(t, err)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, nodes, res.Counts.Succeeded)
	delta, total := actionsBetween(before, settledActions(t))
	perNode := total / nodes
	queries := delta["grpc_QueryWorkflow"]
	ids := []string{api.RolloutID(req.Name)}
	for _, n := range f.Nodes {
		ids = append(ids, api.NodeWorkflowID(n))
	}
	t.Logf("D=%s N=%d P=%d: %.2f Temporal actions per node (queries left out): %s; marker batches in its own histories %.2f per node; following it with starter start --wait for %s: %.0f queries (%.2f a minute); the nodes' activities: %v",
		d, nodes, nodes, perNode, describeActions(delta, nodes), float64(markerBatches(t, ids...))/nodes, followed.Round(time.Second), queries, queries/followed.Minutes(), nodeActivities(t, f))
	require.LessOrEqual(t, perNode, 6.0, "actions per node")
	// From the nodes' own histories, as the counter is the whole server's: no node waited with
	// the heartbeating WaitJob.
	require.Zero(t, nodeActivities(t, f)["WaitJob"], "no heartbeat while a Job runs")
	require.LessOrEqual(t, queries, 1+followed.Minutes(), "following costs at most one query a minute")
}

// A worker SIGKILLed while its nodes await their Jobs' end, and down until every Job has
// ended: the worker that starts tells every node from its first list, so each node finishes
// within 60 s of it, once, with one Job.
func TestSoakWorkerKilledWhileLongJobsRun(t *testing.T) {
	f, req, run, queue, ws := awaitingLongJobs(t, 6, "kill-long", faultJobTimeout)
	ws[0].Kill()
	waitFor(t, 2*time.Minute, "every Job ended while no worker ran", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) != len(f.Nodes) {
			return false
		}
		for _, j := range list.Items {
			if j.Status.CompletionTime == nil {
				return false
			}
		}
		return true
	})
	restarted, err := StartWorker(ws[0].Name+"-restarted", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop() })
	requireSucceededSoonAfter(t, f, run, req.Name, time.Now(), 60*time.Second, "the worker came back")
}

// awaitingLongJobs starts a rollout of 45 s Jobs on one worker of its own, all nodes at once,
// and returns once every node awaits its Job's end (AwaitJobEnd).
func awaitingLongJobs(t *testing.T, nodes int, name string, jobTimeout time.Duration) (f *Fleet, req api.RolloutRequest, run client.WorkflowRun, queue string, ws []*Worker) {
	t.Helper()
	queue, ws = ownWorkers(t, 1)
	f = NewFleet(t, nodes)
	req = f.Request(name, 45*time.Second)
	req.Parallelism = nodes
	req.JobTimeout = jobTimeout.String()
	run = StartOn(t, req, queue)
	waitFor(t, 90*time.Second, "every node awaiting its Job's end", func() bool { return awaitingTheirEnd(t, f) })
	return f, req, run, queue, ws
}

// requireSucceededSoonAfter waits for the rollout and asserts that every node succeeded, once,
// with one Job each, and that the last of them finished within `within` of the fault's end
// (back).
func requireSucceededSoonAfter(t *testing.T, f *Fleet, run client.WorkflowRun, rollout string, back time.Time, within time.Duration, fault string) {
	t.Helper()
	res := Succeeded(t, run)
	resumed := time.Since(back)
	t.Logf("every node finished %s after %s", resumed.Round(time.Millisecond), fault)
	require.Less(t, resumed, within, "each node goes on soon after %s, not at its deadline", fault)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, len(f.Nodes), res.Counts.Succeeded)
	requireOneJobPerNode(t, f, rollout)
}

// An abort while the nodes await their Jobs' end deletes every Job promptly: the node does not
// wait for the await to hear of it. E2E_ABORT_NODES sets how many nodes (8 by default; the
// issue's row is 100 at once).
func TestAbortWhileLongJobsRunDeletesEveryPodPromptly(t *testing.T) {
	nodes := 8
	if s := os.Getenv("E2E_ABORT_NODES"); s != "" {
		var err error
		nodes, err = strconv.Atoi(s)
		require.NoError(t, err, "E2E_ABORT_NODES")
	}
	f := NewFleet(t, nodes)
	req := f.Request("abort-long", 5*time.Minute)
	req.Parallelism = nodes
	req.JobTimeout = "10m"
	run := Start(t, req)
	waitFor(t, 3*time.Minute, "every node awaiting its Job's end", func() bool { return awaitingTheirEnd(t, f) })
	gone := abortUntilPodsGone(t, f, req.Name, "e2e abort of long Jobs")
	t.Logf("every Pod of %d gone %s after the abort", nodes, gone.Round(time.Millisecond))
	require.Less(t, gone, 15*time.Second)
	_, err := Result(t, run)
	require.Error(t, err)
}
