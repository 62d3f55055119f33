//go:build e2e

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// succeededAcrossRuns starts req over f, parallelism nodes at a time and continuing as new every
// perRun nodes, and requires it to succeed on every node of f: the common start of the tests and
// fixtures of a rollout spread over several runs.
func succeededAcrossRuns(t *testing.T, f *Fleet, req api.RolloutRequest, parallelism, perRun int) (client.WorkflowRun, api.RolloutResult) {
	t.Helper()
	req.Parallelism = parallelism
	req.ContinueAsNewAfter = perRun
	run := Start(t, req)
	res := Succeeded(t, run)
	require.Equal(t, len(f.Nodes), res.Counts.Succeeded, "%+v", res.Counts)
	return run, res
}

// A run that continues as new hands its nodes in flight to the next run instead of waiting for
// them (versionHandOverInFlight), on the real server: the window does not empty at a
// continue-as-new, every node runs one Job and is counted once, and an abort reaches the
// nodes a run was handed.

// Every continue-as-new comes while node workflows the run started are in flight, and the next
// runs count them: Jobs of 35 s, past the 20 s watch of a node's first task, are handed over
// (shorter ones drain). The run's own history says it: children started in it and not ended in
// it. The Jobs running at that instant are logged only: a run hands over at once, and on a busy
// machine its children may not have created their Jobs yet (seen: run 1 continued as new in the
// second its four children started, with no Job running).
func TestContinueAsNewHandsNodesInFlightToTheNextRun(t *testing.T) {
	f := NewFleet(t, 8)
	req := f.Request("handover", 35*time.Second)
	run, res := succeededAcrossRuns(t, f, req, 4, 4)
	requireEveryNodeOnce(t, f, res)
	requireOneJobPerNode(t, f, req.Name)

	rec := &recorder{}
	runs := rec.chain(t, run.GetID(), run.GetRunID())
	require.GreaterOrEqual(t, len(runs), 2, "8 nodes at 4 per run continue as new")
	jobs := f.Jobs(t, req.Name)
	for i, h := range runs[:len(runs)-1] {
		last := h.Events[len(h.Events)-1]
		require.Equal(t, enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW, last.GetEventType())
		at := last.GetEventTime().AsTime()
		running := 0
		for _, js := range jobs {
			for _, j := range js {
				if s, c := j.Status.StartTime, j.Status.CompletionTime; s != nil && c != nil && s.Time.Before(at) && c.Time.After(at) {
					running++
				}
			}
		}
		inFlight := childrenInFlightAtEnd(h)
		t.Logf("run %d continued as new at %s with %d node workflows in flight and %d Jobs running", i+1, at.Format(time.RFC3339Nano), inFlight, running)
		require.Positive(t, inFlight, "run %d waited for its nodes before it continued as new", i+1)
	}
}

// An abort while a run waits for nodes the previous run handed over cancels them: their Jobs
// go as promptly as a run's own, and each is counted aborted once.
func TestAbortReachesNodesHandedOverInFlight(t *testing.T) {
	f := NewFleet(t, 4)
	req := f.Request("handover-abort", 5*time.Minute)
	req.Parallelism = 2
	req.ContinueAsNewAfter = 2
	req.JobTimeout = "10m"
	run := Start(t, req)
	waitFor(t, 3*time.Minute, "two nodes handed over in flight, awaiting their Jobs' end", handedOverAwaiting(run.GetID(), f, 2))
	gone := abortUntilPodsGone(t, f, req.Name, "e2e abort of handed-over nodes")
	t.Logf("both Pods gone %s after the abort", gone.Round(time.Millisecond))
	require.Less(t, gone, 15*time.Second)
	res, err := Result(t, run)
	require.Error(t, err)
	require.Equal(t, 2, res.Counts.Aborted, "each handed-over node counted aborted once: %+v", res.Counts)
	require.Zero(t, res.Counts.Succeeded+res.Counts.Failed, "%+v", res.Counts)
}

// A maintained node handed over in flight and then terminated by hand (the UI's Terminate)
// never tells the next run it ended, and its Job's success stands on the Node while it
// soaks. An abort finds its workflow ended and settles it as the run's own terminated child:
// failed, NodeWorkflowTerminated, written on the Node, our cordon kept. Before
// (versionHandedInLost), it was counted aborted and the success stayed on the Node: a re-run
// skipped a node left cordoned halfway through its maintenance.
func TestTerminatedHandedOverNodeIsRecordedFailed(t *testing.T) {
	f := NewFleet(t, 4)
	req := f.Request("handover-terminated", time.Second)
	run, terminated := terminateAHandedOverSoakingNode(t, f, &req)
	ctx := context.Background()
	marker := jobspec.NodeMarkerKey(req.Name)
	require.NoError(t, stack.Temporal.CancelWorkflow(ctx, run.GetID(), ""))
	// Not at the busy-node recheck, minutes later: the server accepts the cancel of an ended
	// run, so the abort asks each node for its word, which fails for the terminated one.
	waitFor(t, time.Minute, "the aborted rollout ended", func() bool {
		d, err := stack.Temporal.DescribeWorkflow(ctx, run.GetID(), "")
		return err == nil && d.RawResponse != nil && d.RawResponse.WorkflowExecutionInfo.Status != enums.WORKFLOW_EXECUTION_STATUS_RUNNING
	})

	res, err := Result(t, run)
	require.Error(t, err, "aborted")
	require.Equal(t, 1, res.Counts.Failed, "%+v", res.Counts)
	require.Equal(t, 1, res.Counts.Aborted, "the other handed-over node: %+v", res.Counts)
	require.Len(t, res.Failures, 1)
	require.Equal(t, terminated, res.Failures[0].Node)
	require.Equal(t, api.ReasonNodeWorkflowTerminated, res.Failures[0].Reason)
	n := nodeNow(t, terminated)
	require.True(t, strings.HasSuffix(n.Annotations[marker], ":"+string(api.OutcomeFailed)), "marker %q", n.Annotations[marker])
	require.True(t, n.Spec.Unschedulable, "our cordon stays, as onFailure keepCordoned says")
}

// terminateAHandedOverSoakingNode starts req over f's 4 nodes, two at a time and continuing as
// new every two, with a 10-minute soak after each Job, and terminates one of the two nodes
// the second run was handed while they soak, once its Job's success is on the Node. It returns
// the rollout and the terminated node.
func terminateAHandedOverSoakingNode(t *testing.T, f *Fleet, req *api.RolloutRequest) (client.WorkflowRun, string) {
	t.Helper()
	req.Parallelism = 2
	req.ContinueAsNewAfter = 2
	req.Maintenance = &api.Maintenance{Cordon: true, Soak: "10m"}
	run := Start(t, *req)
	ctx := context.Background()
	var soaking []string
	waitFor(t, 2*time.Minute, "two nodes handed over in flight, soaking", func() bool {
		st, err := status(run.GetID())
		if err != nil || st.ContinuedAsNew < 1 || st.Counts.Running != 2 {
			return false
		}
		soaking = nil
		for _, node := range f.Nodes {
			v, err := stack.Temporal.QueryWorkflow(ctx, api.NodeWorkflowID(node), "", api.QueryNodeStep)
			var step api.NodeStep
			if err == nil && v.Get(&step) == nil && step.Step == api.NodeStepSoak {
				soaking = append(soaking, node)
			}
		}
		return len(soaking) == 2
	})
	terminated := soaking[0]
	require.True(t, strings.HasSuffix(nodeNow(t, terminated).Annotations[jobspec.NodeMarkerKey(req.Name)], ":succeeded"), "the Job's success is on the Node while it soaks")
	require.NoError(t, stack.Temporal.TerminateWorkflow(ctx, api.NodeWorkflowID(terminated), "", "an operator ends a stuck-looking node"))
	return run, terminated
}

// The same termination without an abort: the worker finds the terminated workflow in
// visibility (TerminatedNodeNotifier) and tells the rollout, which settles the node failed and
// starts the next node in its slot within a minute, not at its busy-node recheck 10 minutes on.
func TestWorkerTellsTheRolloutOfATerminatedHandedOverNode(t *testing.T) {
	f := NewFleet(t, 4)
	req := f.Request("handover-told", time.Second)
	req.MaxFailures = "1"
	run, terminated := terminateAHandedOverSoakingNode(t, f, &req)
	at := time.Now()
	var st api.RolloutStatus
	waitFor(t, 90*time.Second, "the rollout settled the terminated node and started the next", func() bool {
		var err error
		st, err = status(run.GetID())
		return err == nil && st.Counts.Failed == 1 && len(f.Jobs(t, req.Name)) == 3
	})
	t.Logf("settled and the next node started %s after the termination", time.Since(at).Round(time.Second))
	require.Len(t, st.Failures, 1)
	require.Equal(t, terminated, st.Failures[0].Node)
	require.Equal(t, api.ReasonNodeWorkflowTerminated, st.Failures[0].Reason)
	marker := jobspec.NodeMarkerKey(req.Name)
	waitFor(t, 30*time.Second, "the failure recorded on the Node", func() bool {
		return strings.HasSuffix(nodeNow(t, terminated).Annotations[marker], ":"+string(api.OutcomeFailed))
	})
	require.True(t, nodeNow(t, terminated).Spec.Unschedulable, "our cordon stays, as onFailure keepCordoned says")
	require.NoError(t, stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), ""))
	res, err := Result(t, run)
	require.Error(t, err, "aborted")
	require.Equal(t, 1, res.Counts.Failed, "the terminated node counted once: %+v", res.Counts)
}

// A worker killed while a run waits for the nodes it was handed, during their Jobs, loses none:
// the children tell the rollout through the server, and every node is counted once with one
// Job. Two 40 s Jobs in a row, so make soak runs it. (Killed while the next run lists its nodes, the listing would wait out ListNodes'
// 5-minute start-to-close first: that activity does not heartbeat.)
func TestSoakWorkerKilledWhileHandedOverNodesRun(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 6)
	req := f.Request("handover-kill", 40*time.Second)
	req.Parallelism = 3
	req.ContinueAsNewAfter = 3
	req.JobTimeout = faultJobTimeout.String()
	run := StartOn(t, req, queue)
	waitFor(t, 2*time.Minute, "three nodes handed over in flight, awaiting their Jobs' end", handedOverAwaiting(run.GetID(), f, 3))
	ws[0].Kill()
	time.Sleep(5 * time.Second) // down time is part of the scenario, not a synchronisation
	restarted, err := StartWorker(ws[0].Name+"-restarted", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop() })
	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, 6, res.Counts.Succeeded)
	requireOneJobPerNode(t, f, req.Name)
}

// handedOverAwaiting says when the rollout has continued as new with n nodes running, each
// awaiting its Job's end (past the first watch, where an abort or a crash reaches a node only
// at its next heartbeat, whoever started it).
func handedOverAwaiting(rolloutID string, f *Fleet, n int) func() bool {
	return func() bool {
		st, err := status(rolloutID)
		if err != nil || st.ContinuedAsNew < 1 || st.Counts.Running != n {
			return false
		}
		awaiting := 0
		for _, node := range f.Nodes {
			if awaitingItsEnd(node) {
				awaiting++
			}
		}
		return awaiting == n
	}
}

// A rollout waiting for a node another rollout's node workflow holds (a busy node) hears
// nothing when an operator terminates that workflow, and used to look again only at its
// busy-node recheck, 10 minutes on. The worker's word (TerminatedNodeNotifier) wakes it: it
// runs the node within a minute.
func TestWorkerWakesARolloutWaitingForATerminatedNodeWorkflow(t *testing.T) {
	f := NewFleet(t, 1)
	shared := f.Nodes[0]
	holder := startHolding(t, f, shared, "terminated-holder", 10*time.Minute)
	waiter := f.Request("waits-for-terminated", time.Second)
	waiter.NodeSelector, waiter.Nodes = "", []string{shared}
	run := Start(t, waiter)
	waitFor(t, 60*time.Second, "the second rollout waiting for the shared node", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Waiting == 1
	})
	ctx := context.Background()
	require.NoError(t, stack.Temporal.TerminateWorkflow(ctx, api.NodeWorkflowID(shared), "", "an operator ends a stuck-looking node"))
	at := time.Now()
	waitFor(t, 90*time.Second, "the waiting rollout's Job on the node", func() bool { return len(f.Jobs(t, waiter.Name)[shared]) == 1 })
	t.Logf("the waiting rollout started the node %s after the termination", time.Since(at).Round(time.Second))
	res := Succeeded(t, run)
	require.Equal(t, 1, res.Counts.Succeeded)
	_, err := Result(t, holder)
	require.Error(t, err, "the holder's only node failed: terminated")
}
