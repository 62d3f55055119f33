//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/workflows"
)

// RecordFixturesEnv names the variable that makes TestRecordReplayFixtures write the histories
// it records into workflows/testdata (the replay fixtures), replacing files of the same name.
const RecordFixturesEnv = "NODEROLLOUT_RECORD_FIXTURES"

// TestRecordReplayFixtures runs the rollouts whose histories workflows/testdata keeps as replay
// fixtures (continue-as-new, pause/resume with a setParallelism update, an abort with Jobs
// running, a node busy with another rollout, that node handed over across continue-as-new, nodes
// handed over in flight, a delay between nodes cut short by a spent budget, starts spaced by it
// after a wait, a paused converging rollout replaced while its canary awaits approval, words
// sent together while the worker is away) and
// replays every history it recorded with
// today's workflow code. Re-record the fixtures with
//
//	NODEROLLOUT_RECORD_FIXTURES=1 dev/e2e.sh -run TestRecordReplayFixtures
//
// (or =v2- to add a new version's histories as v2-*.json beside the older ones)
//
// only from code whose histories running workflows may have: the fixtures stand for them.
func TestRecordReplayFixtures(t *testing.T) {
	rec := &recorder{dir: t.TempDir()}
	if v := os.Getenv(RecordFixturesEnv); v != "" {
		rec.dir = filepath.Join(stack.RepoDir, "workflows", "testdata")
		if v != "1" {
			// A prefix keeps the histories of a new workflow version beside the older ones,
			// which running workflows may still have.
			rec.prefix = v
		}
	}
	fixtures := []struct {
		name   string
		record func(*testing.T, *recorder)
	}{
		{"continue-as-new", recordContinueAsNew},
		{"pause-resume-set-parallelism", recordSteered},
		{"abort", recordAbort},
		{"busy-node", recordBusyNode},
		{"hand-over", recordHandOver},
		{"hand-over-in-flight", recordHandOverInFlight},
		{"cut-delay", recordCutDelay},
		{"spaced-starts", recordSpacedStarts},
		{"paced-maintained", recordPacedMaintained},
		{"budgeted", recordBudgeted},
		{"fleet", recordFleet},
		{"fleet-invalid-rollout", recordFleetInvalidRollout},
		{"converge-replaced", recordConvergeReplaced},
		{"words-together", recordWordsTogether},
		{"canary-not-run", recordCanaryNotRun},
		{"long-job", recordLongJob},
		{"abort-long-job", recordAbortLongJob},
	}
	t.Run("group", func(t *testing.T) {
		for _, fx := range fixtures {
			t.Run(fx.name, func(t *testing.T) { t.Parallel(); fx.record(t, rec) })
		}
	})
	require.NotEmpty(t, rec.files)
	for _, file := range rec.files {
		require.NoError(t, workflows.ReplayFixture(file), "replaying %s", file)
	}
	t.Logf("recorded and replayed %d histories in %s", len(rec.files), rec.dir)
}

// recordContinueAsNew: 7 nodes, 3 per run, so three runs; every run and a succeeded child.
func recordContinueAsNew(t *testing.T, rec *recorder) {
	f := NewFleet(t, 7)
	run, _ := succeededAcrossRuns(t, f, f.Request("fixture-can", time.Second), 2, 3)
	runs := rec.chain(t, run.GetID(), run.GetRunID())
	require.GreaterOrEqual(t, len(runs), 3, "7 nodes at 3 per run continue as new at least twice")
	for i, h := range runs {
		rec.write(t, fmt.Sprintf("rollout-continue-as-new-run%d.json", i+1), h)
	}
	child := childrenOf(runs[0])[0]
	h := rec.closed(t, child.GetWorkflowId(), child.GetRunId(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	rec.write(t, "node-succeeded.json", h)
}

// recordSteered: paused with nodes in flight, parallelism raised by the update while paused,
// resumed.
func recordSteered(t *testing.T, rec *recorder) {
	f := NewFleet(t, 8)
	req := f.Request("fixture-steered", 2*time.Second)
	req.Parallelism = 2
	run := Start(t, req)
	ctx := context.Background()
	waitFor(t, 60*time.Second, "first nodes running", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Running > 0
	})
	require.NoError(t, stack.Temporal.SignalWorkflow(ctx, run.GetID(), "", api.SignalPause, nil))
	waitFor(t, 60*time.Second, "paused with nothing in flight", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Paused && st.Counts.Running == 0
	})
	handle, err := stack.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   run.GetID(),
		UpdateName:   api.UpdateSetParallelism,
		Args:         []any{api.SetParallelismRequest{Parallelism: 4}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var set api.SetParallelismResult
	require.NoError(t, handle.Get(ctx, &set))
	require.NoError(t, stack.Temporal.SignalWorkflow(ctx, run.GetID(), "", api.SignalResume, nil))
	res := Succeeded(t, run)
	require.Equal(t, 8, res.Counts.Succeeded)
	rec.write(t, "rollout-pause-resume-set-parallelism.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordAbort: the rollout is cancelled while its Jobs run; its children delete them.
func recordAbort(t *testing.T, rec *recorder) {
	f := NewFleet(t, 6)
	req := f.Request("fixture-abort", time.Minute)
	req.Parallelism = 3
	run := Start(t, req)
	midRollout(t, f, req.Name, 3)
	require.NoError(t, stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), ""))
	_, err := Result(t, run)
	require.Error(t, err)
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_CANCELED)
	rec.write(t, "rollout-abort.json", h)
	child := childrenOf(h)[0]
	// Cancelled mid-Job: the child deletes its Job and ends cancelled (or, reporting the node's
	// outcome, completed).
	rec.write(t, "node-cancelled-mid-job.json", rec.closed(t, child.GetWorkflowId(), child.GetRunId(),
		enums.WORKFLOW_EXECUTION_STATUS_CANCELED, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordLongJob: a Job that outlasts the node's watch, awaited (AwaitJobEnd) until the
// worker's informer tells its end.
func recordLongJob(t *testing.T, rec *recorder) {
	f := NewFleet(t, 1)
	req := f.Request("fixture-long", 30*time.Second)
	run := Start(t, req)
	res := Succeeded(t, run)
	require.Equal(t, 1, res.Counts.Succeeded)
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	child := childrenOf(h)[0]
	rec.write(t, "node-awaited-long-job.json", rec.closed(t, child.GetWorkflowId(), child.GetRunId(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordAbortLongJob: the rollout is cancelled while its node awaits its Job's end; the node
// deletes the Job.
func recordAbortLongJob(t *testing.T, rec *recorder) {
	f := NewFleet(t, 1)
	req := f.Request("fixture-abort-long", 2*time.Minute)
	run := Start(t, req)
	waitFor(t, 90*time.Second, "the node awaiting its Job's end", func() bool { return awaitingTheirEnd(t, f) })
	require.NoError(t, stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), ""))
	_, err := Result(t, run)
	require.Error(t, err)
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_CANCELED)
	child := childrenOf(h)[0]
	rec.write(t, "node-cancelled-while-awaiting.json", rec.closed(t, child.GetWorkflowId(), child.GetRunId(),
		enums.WORKFLOW_EXECUTION_STATUS_CANCELED, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// startHolding starts a rollout of name on node alone, with Jobs of runFor, and waits until its
// Job is on the node: the node is then busy for another rollout of f that reaches it.
func startHolding(t *testing.T, f *Fleet, node, name string, runFor time.Duration) client.WorkflowRun {
	t.Helper()
	req := f.Request(name, runFor)
	req.NodeSelector, req.Nodes = "", []string{node}
	run := Start(t, req)
	waitFor(t, 60*time.Second, "the first rollout's Job on the shared node", func() bool { return len(f.Jobs(t, req.Name)[node]) == 1 })
	return run
}

// recordBusyNode: two rollouts share a node; the second waits until the first's child is done.
func recordBusyNode(t *testing.T, rec *recorder) {
	f := NewFleet(t, 3)
	shared := f.Nodes[1]
	runFirst := startHolding(t, f, shared, "fixture-busy-first", 8*time.Second)
	second := f.Request("fixture-busy-waits", time.Second)
	second.NodeSelector, second.Nodes = "", f.Nodes
	runSecond := Start(t, second)
	waitFor(t, 60*time.Second, "the second rollout waiting for the shared node", func() bool {
		st, err := status(runSecond.GetID())
		return err == nil && st.Counts.Waiting > 0
	})
	Succeeded(t, runFirst)
	res := Succeeded(t, runSecond)
	require.Equal(t, 3, res.Counts.Succeeded)
	rec.write(t, "rollout-busy-node-holder.json", rec.closed(t, runFirst.GetID(), runFirst.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
	rec.write(t, "rollout-busy-node-waits.json", rec.closed(t, runSecond.GetID(), runSecond.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordHandOver: a rollout that continues as new while its first node is held by another
// rollout hands that node to its next run, which waits for it and runs it.
func recordHandOver(t *testing.T, rec *recorder) {
	f := NewFleet(t, 3)
	shared := f.Nodes[0]
	runFirst := startHolding(t, f, shared, "fixture-hold", 20*time.Second)
	second := f.Request("fixture-hand-over", time.Second)
	second.Parallelism = 2
	second.ContinueAsNewAfter = 2
	runSecond := Start(t, second)
	Succeeded(t, runFirst)
	res := Succeeded(t, runSecond)
	require.Equal(t, 3, res.Counts.Succeeded)
	runs := rec.chain(t, runSecond.GetID(), runSecond.GetRunID())
	require.GreaterOrEqual(t, len(runs), 2)
	for _, child := range childrenOf(runs[0]) {
		require.NotContains(t, child.GetWorkflowId(), shared, "the first run started no node workflow on the held node")
	}
	var carried api.Progress
	in := runs[1].Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	require.Len(t, in, 2)
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(in[1], &carried))
	require.Equal(t, []api.PacedNode{{Name: shared}}, carried.WaitingNodes, "the held node is handed to the next run")
	for i, h := range runs[:2] {
		rec.write(t, fmt.Sprintf("rollout-hand-over-run%d.json", i+1), h)
	}
}

// recordHandOverInFlight: 4 nodes of 30 s Jobs, 2 per run: the first run hands its 2 nodes in
// flight to the second (told the rollout at their start, from hand-over-nodes-in-flight 2 on;
// asked once past their watch before), and the second counts them from their word, then runs
// the last two (untold from version 3 on: that run ends rather than continuing as new). One
// handed-over node's history is the node fixture of a child told at its start.
func recordHandOverInFlight(t *testing.T, rec *recorder) {
	f := NewFleet(t, 4)
	run, _ := succeededAcrossRuns(t, f, f.Request("fixture-in-flight", 30*time.Second), 2, 2)
	runs := rec.chain(t, run.GetID(), run.GetRunID())
	require.Len(t, runs, 2, "the second run lists the last two nodes and ends")
	var carried api.Progress
	in := runs[1].Events[0].GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	require.NoError(t, converter.GetDefaultDataConverter().FromPayload(in[1], &carried))
	require.Len(t, carried.InFlightNodes, 2, "the first run hands its two nodes over in flight")
	for i, h := range runs {
		rec.write(t, fmt.Sprintf("rollout-in-flight-run%d.json", i+1), h)
	}
	node := carried.InFlightNodes[0]
	rec.write(t, "node-handed-over.json", rec.closed(t, api.NodeWorkflowID(node.Name), node.RunID, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordCutDelay: the first node's Job fails during the delay before the second node, which
// spends the budget, so the delay ends early and the rollout fails without starting it.
func recordCutDelay(t *testing.T, rec *recorder) {
	f := NewFleet(t, 2)
	req := f.Request("fixture-cut-delay", time.Second)
	req.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/exit-code": "7"})
	req.DelayBetweenNodes = "10m"
	run := Start(t, req)
	res, err := Result(t, run)
	require.ErrorContains(t, err, api.ErrFailureBudgetExceeded)
	require.Equal(t, 1, res.Counts.Failed)
	require.Less(t, res.FinishedAt.Sub(res.StartedAt), 5*time.Minute, "the ten-minute delay was cut short")
	require.Len(t, f.Jobs(t, req.Name), 1, "the second node never started")
	rec.write(t, "rollout-cut-delay.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_FAILED))
}

// recordSpacedStarts: a node that another rollout holds is tried at once and refused, the next
// node starts a delay later, and the held node, freed within that delay, waits out what is left
// of it after the next node's start (versionAdmission 3): the two children start at least
// delayBetweenNodes apart.
func recordSpacedStarts(t *testing.T, rec *recorder) {
	const delay = 20 * time.Second
	f := NewFleet(t, 2)
	runFirst := startHolding(t, f, f.Nodes[0], "fixture-spaced-holder", 8*time.Second)
	req := f.Request("fixture-spaced", time.Second)
	req.NodeSelector, req.Nodes = "", f.Nodes
	req.Parallelism = 2
	req.DelayBetweenNodes = delay.String()
	run := Start(t, req)
	Succeeded(t, runFirst)
	require.Equal(t, 2, Succeeded(t, run).Counts.Succeeded)
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	var starts []time.Time
	for _, e := range h.Events {
		if e.GetChildWorkflowExecutionStartedEventAttributes() != nil {
			starts = append(starts, e.GetEventTime().AsTime())
		}
	}
	require.Len(t, starts, 2)
	require.GreaterOrEqual(t, starts[1].Sub(starts[0]), delay, "the children started %s apart, under delayBetweenNodes %s", starts[1].Sub(starts[0]), delay)
	rec.write(t, "rollout-spaced-starts.json", h)
}

// recordConvergeReplaced: a converging rollout whose canary awaits approval is paused, then
// replaced by a new template: the replacement ends the approval wait, and the hand-over
// carries the pause into the replacing run (versionReplacementTakesOver).
func recordConvergeReplaced(t *testing.T, rec *recorder) {
	f := NewFleet(t, 2)
	req := f.Request("fixture-converge-replaced", time.Second)
	req.Mode = api.ModeConverge
	req.Canary = &api.Canary{Nodes: []string{f.Nodes[0]}, Approval: true}
	run := Start(t, req)
	ctx := context.Background()
	defer func() { _ = stack.Temporal.CancelWorkflow(ctx, run.GetID(), "") }()
	waitFor(t, 60*time.Second, "the canary done, its approval awaited", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Pacing != nil && st.Pacing.WaitingFor == "approval"
	})
	require.NoError(t, stack.Temporal.SignalWorkflow(ctx, run.GetID(), "", api.SignalPause, nil))
	waitFor(t, 30*time.Second, "paused", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Paused
	})
	next := req
	next.JobTemplate = JobTemplate(2*time.Second, nil)
	handle, err := stack.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   run.GetID(),
		UpdateName:   api.UpdateReplace,
		Args:         []any{next},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var replaced api.ReplaceResult
	require.NoError(t, handle.Get(ctx, &replaced))
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW)
	waitFor(t, 30*time.Second, "the replacing run, paused", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Paused && st.TemplateHash != "" && st.TemplateHash != replaced.PreviousTemplateHash
	})
	rec.write(t, "rollout-converge-replaced.json", h)
}

// recordWordsTogether: while the rollout's only worker is away, an operator pauses, resumes
// and pauses again; the three words reach the run in one task, where only the first comes
// alone and the order of the other two is lost, so the run stays paused
// (versionPauseWinsTogether). Before, it read the pause and then the resume, and went on. It
// starts no node while paused, and finishes once resumed.
func recordWordsTogether(t *testing.T, rec *recorder) {
	f := NewFleet(t, 3)
	req := f.Request("fixture-words-together", 5*time.Second)
	req.Parallelism = 1
	queue, ws := ownWorkers(t, 1)
	run := StartOn(t, req, queue)
	ctx := context.Background()
	waitFor(t, 60*time.Second, "the first node running", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Running > 0
	})
	require.NoError(t, ws[0].Stop())
	for _, word := range []string{api.SignalPause, api.SignalResume, api.SignalPause} {
		require.NoError(t, stack.Temporal.SignalWorkflow(ctx, run.GetID(), "", word, nil))
	}
	back, err := StartWorker(queue+"-back", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = back.Stop() })
	waitFor(t, 120*time.Second, "the first node done, the run paused with nothing in flight", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Paused && st.Counts.Running == 0 && st.Counts.Succeeded == 1
	})
	require.Len(t, f.Jobs(t, req.Name), 1, "no node started after the words")
	require.NoError(t, stack.Temporal.SignalWorkflow(ctx, run.GetID(), "", api.SignalResume, nil))
	res := Succeeded(t, run)
	require.Equal(t, 3, res.Counts.Succeeded)
	rec.write(t, "rollout-words-together.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordPacedMaintained: a canary approved by the update, one node per zone at a time in spread
// order, and each node cordoned, drained, soaked and uncordoned around its Job.
func recordPacedMaintained(t *testing.T, rec *recorder) {
	const zone = "topology.kubernetes.io/zone"
	f := NewFleet(t, 0)
	f.AddNodes(t, 2, map[string]string{zone: "a"})
	f.AddNodes(t, 2, map[string]string{zone: "b"})
	req := f.Request("fixture-paced", time.Second)
	req.Parallelism = 2
	req.Topology = &api.Topology{Key: zone, MaxPerDomain: 1}
	req.Order = &api.Order{By: "spread"}
	req.Canary = &api.Canary{Nodes: []string{f.Nodes[0]}, Approval: true}
	req.Maintenance = &api.Maintenance{Drain: &api.Drain{Timeout: "30s"}, Soak: "1s"}
	run := Start(t, req)
	ctx := context.Background()
	waitFor(t, 90*time.Second, "the canary done and the rollout waiting for approval", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Succeeded == 1 && strings.Contains(st.Phase, "approval")
	})
	handle, err := stack.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   run.GetID(),
		UpdateName:   api.UpdateApprove,
		Args:         []any{api.ApproveRequest{Note: "fixture"}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	require.NoError(t, handle.Get(ctx, nil))
	res := Succeeded(t, run)
	require.Equal(t, 4, res.Counts.Succeeded)
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
	rec.write(t, "rollout-canary-approved.json", h)
	child := childrenOf(h)[0]
	rec.write(t, "node-maintained.json", rec.closed(t, child.GetWorkflowId(), child.GetRunId(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordBudgeted: a rollout of parallelism 3 on a cluster whose disruption budget is 2, so its
// nodes wait for the coordinator's grants; the rollout's history and the coordinator's, which
// runs on (its history is read once every slot is back).
func recordBudgeted(t *testing.T, rec *recorder) {
	c := workflows.BudgetFixtureCluster
	// A coordinator left running by an earlier run ran older code: end it, so this rollout
	// starts a fresh one (which counts the node workflows still running first).
	_ = stack.Temporal.TerminateWorkflow(context.Background(), c.BudgetWorkflowID(), "", "a fresh coordinator for the fixtures")
	w, err := StartWorker(c.Name, "--cluster", c.Name, "--cluster-budget", strconv.Itoa(c.Budget))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	f := NewFleet(t, 4)
	req := f.Request("fixture-budgeted", time.Second)
	req.Parallelism = 3
	run := StartOn(t, req, api.ClusterTaskQueue(api.TaskQueue, c.Name))
	require.Equal(t, 4, Succeeded(t, run).Counts.Succeeded)
	rec.write(t, "rollout-budgeted.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
	waitFor(t, 60*time.Second, "every slot back at the coordinator", func() bool {
		v, err := stack.Temporal.QueryWorkflow(context.Background(), c.BudgetWorkflowID(), "", api.QueryBudget)
		var st api.BudgetStatus
		return err == nil && v.Get(&st) == nil && st.InUse == 0
	})
	rec.write(t, "budget-coordinator.json", rec.current(t, c.BudgetWorkflowID()))
}

// recordFleet: a fleet rollout in two waves, one cluster's worker each. Both workers talk to
// the one API server here, so the second wave finds the nodes done for the template and skips
// them; the fleet's own history is the same either way.
func recordFleet(t *testing.T, rec *recorder) {
	staging, _ := clusterWorker(t, "fixture-staging", 0)
	prod, _ := clusterWorker(t, "fixture-prod", 0)
	f := NewFleet(t, 2)
	req := api.FleetRequest{Name: "fixture-fleet-" + f.suffix, Waves: [][]string{{staging.Name}, {prod.Name}}, Rollout: f.Request("fixture-fleet", time.Second)}
	ctx := context.Background()
	run, err := stack.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: api.FleetID(req.Name), TaskQueue: api.FleetTaskQueue, WorkflowExecutionTimeout: 5 * time.Minute,
	}, api.FleetRolloutWorkflow, req)
	require.NoError(t, err)
	var res api.FleetResult
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, "done", res.Phase)
	require.Len(t, res.Clusters, 2)
	rec.write(t, "fleet-two-waves.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_COMPLETED))
}

// recordFleetInvalidRollout: a fleet started as the Temporal UI would start it, with raw JSON
// whose rollout has an explicit parallelism 0 (and nothing else wrong, so that only the nested
// check refuses it). It fails at once, naming rollout.parallelism, and starts no cluster.
func recordFleetInvalidRollout(t *testing.T, rec *recorder) {
	name := fmt.Sprintf("fixture-fleet-invalid-%d", time.Now().UnixNano()%1_000_000)
	input := json.RawMessage(`{"name":"` + name + `","waves":[["nowhere"]],` +
		`"rollout":{"nodes":["n1"],"parallelism":0,"jobTemplate":"apiVersion: batch/v1\nkind: Job"}}`)
	ctx := context.Background()
	run, err := stack.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: api.FleetID(name), TaskQueue: api.FleetTaskQueue, WorkflowExecutionTimeout: 5 * time.Minute,
	}, api.FleetRolloutWorkflow, input)
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.True(t, appErr.NonRetryable(), "a malformed request is not retried")
	require.Contains(t, err.Error(), "rollout.parallelism: must be between 1 and")
	h := rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_FAILED)
	for _, e := range h.GetEvents() {
		require.NotEqual(t, enums.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED, e.GetEventType(), "no cluster starts")
	}
	rec.write(t, "fleet-invalid-rollout.json", h)
}

// recorder fetches closed workflows' histories and writes them as the JSON the replayer reads.
type recorder struct {
	dir    string
	prefix string // put before each file name
	mu     sync.Mutex
	files  []string
}

// closed waits for the run to close with one of the given statuses and returns its whole
// history.
func (r *recorder) closed(t *testing.T, id, runID string, want ...enums.WorkflowExecutionStatus) *historypb.History {
	t.Helper()
	ctx := context.Background()
	var got enums.WorkflowExecutionStatus
	waitFor(t, 2*time.Minute, "workflow "+id+" closed", func() bool {
		d, err := stack.Temporal.DescribeWorkflow(ctx, id, runID)
		if err == nil {
			got = d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		}
		return err == nil && got != enums.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
	require.Contains(t, want, got, "workflow %s run %s", id, runID)
	h := &historypb.History{}
	it := stack.Temporal.GetWorkflowHistory(ctx, id, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	return h
}

// current returns the history of the workflow's latest run, open or closed, as it stands.
func (r *recorder) current(t *testing.T, id string) *historypb.History {
	t.Helper()
	h := &historypb.History{}
	iter := stack.Temporal.GetWorkflowHistory(context.Background(), id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		e, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, e)
	}
	return h
}

// chain returns the histories of a rollout's runs, following continue-as-new to the last.
func (r *recorder) chain(t *testing.T, id, runID string) []*historypb.History {
	t.Helper()
	var runs []*historypb.History
	for runID != "" {
		h := r.closed(t, id, runID, enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, enums.WORKFLOW_EXECUTION_STATUS_COMPLETED)
		runs = append(runs, h)
		runID = ""
		if last := h.Events[len(h.Events)-1]; last.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW {
			runID = last.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
		}
	}
	return runs
}

func (r *recorder) write(t *testing.T, name string, h *historypb.History) {
	t.Helper()
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	path := filepath.Join(r.dir, r.prefix+name)
	require.NoError(t, os.WriteFile(path, append(b, '\n'), 0o644))
	r.mu.Lock()
	r.files = append(r.files, path)
	r.mu.Unlock()
}

// childrenOf lists the NodeRollout runs a rollout history started, in order.
func childrenOf(h *historypb.History) []*commonpb.WorkflowExecution {
	var out []*commonpb.WorkflowExecution
	for _, e := range h.Events {
		if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
			out = append(out, a.GetWorkflowExecution())
		}
	}
	return out
}

// childrenInFlightAtEnd counts the child workflows a run started whose end its history does not
// hold: those still in flight when it closed.
func childrenInFlightAtEnd(h *historypb.History) int {
	n := 0
	for _, e := range h.Events {
		switch e.GetEventType() {
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
			n++
		case enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED, enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_FAILED,
			enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_CANCELED, enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TIMED_OUT,
			enums.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_TERMINATED:
			n--
		}
	}
	return n
}

// recordCanaryNotRun: the only canary is held by a Pod that gates.blockingPods names until the
// gate times out, so it ends blocked; it proved nothing, and the rollout stops after the canary
// stage (versionPassedOverCanaryStops) with no Job created anywhere. Before, it went on to the
// other node.
func recordCanaryNotRun(t *testing.T, rec *recorder) {
	f := NewFleet(t, 2)
	runBlockingPod(t, f, f.Nodes[0], "blocker", "600")
	req := f.Request("fixture-canary-not-run", time.Second)
	req.Canary = &api.Canary{Nodes: []string{f.Nodes[0]}}
	req.Gates = &api.Gates{BlockingPods: &api.BlockingPodsGate{Selector: "app=blocker", Timeout: "5s"}}
	run := Start(t, req)
	res, err := Result(t, run)
	require.ErrorContains(t, err, "(type: "+api.ErrCanaryFailed)
	require.ErrorContains(t, err, "not run: "+f.Nodes[0]+" (blocked Blocked)")
	require.Equal(t, 1, res.Counts.Skipped, "%+v", res.Counts)
	require.Empty(t, f.Jobs(t, req.Name), "no Job on any node")
	rec.write(t, "rollout-canary-not-run.json", rec.closed(t, run.GetID(), run.GetRunID(), enums.WORKFLOW_EXECUTION_STATUS_FAILED))
}
