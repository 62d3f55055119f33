package activities

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/noderollout/noderollout/api"
)

// fakeVisibility answers the notifier's list with terminated node workflows, its describes
// with each rollout run's status, and records its signals.
type fakeVisibility struct {
	queries    []string
	terminated []*workflowpb.WorkflowExecutionInfo
	rollouts   []string                                 // running rollouts
	runStatus  map[string]enums.WorkflowExecutionStatus // rollout run ID → status
	signalErr  error
	signals    []sentSignal
}

type sentSignal struct {
	workflowID, runID, name string
	word                    api.NodeFreed
}

func (f *fakeVisibility) ListWorkflow(_ context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	f.queries = append(f.queries, req.GetQuery())
	if strings.HasPrefix(req.GetQuery(), "WorkflowType = 'Rollout'") {
		var running []*workflowpb.WorkflowExecutionInfo
		for _, id := range f.rollouts {
			running = append(running, &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: id + "-now"}})
		}
		return &workflowservice.ListWorkflowExecutionsResponse{Executions: running}, nil
	}
	// Like the server, only closes at or after the query's CloseTime.
	_, bound, _ := strings.Cut(req.GetQuery(), "CloseTime >= '")
	since, err := time.Parse(time.RFC3339Nano, strings.TrimSuffix(bound, "'"))
	if err != nil {
		return nil, err
	}
	var closed []*workflowpb.WorkflowExecutionInfo
	for _, e := range f.terminated {
		if !e.GetCloseTime().AsTime().Before(since) {
			closed = append(closed, e)
		}
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: closed}, nil
}

func (f *fakeVisibility) DescribeWorkflowExecution(_ context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	for _, e := range f.terminated {
		if e.GetExecution().GetRunId() == runID {
			return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: e}, nil
		}
	}
	status, ok := f.runStatus[runID]
	if !ok {
		return nil, serviceerror.NewNotFound("no such run")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID}, Status: status}}, nil
}

func (f *fakeVisibility) SignalWorkflow(_ context.Context, id, runID, name string, arg any) error {
	if f.signalErr != nil {
		return f.signalErr
	}
	f.signals = append(f.signals, sentSignal{workflowID: id, runID: runID, name: name, word: arg.(api.NodeFreed)})
	return nil
}

// closedAt is when every fake terminated node workflow closed.
var closedAt = time.Date(2026, 12, 6, 10, 5, 0, 0, time.UTC)

func terminatedNode(node, runID, rollout, rolloutRun string) *workflowpb.WorkflowExecutionInfo {
	e := &workflowpb.WorkflowExecutionInfo{Execution: &commonpb.WorkflowExecution{WorkflowId: api.NodeWorkflowID(node), RunId: runID},
		Status: enums.WORKFLOW_EXECUTION_STATUS_TERMINATED, CloseTime: timestamppb.New(closedAt)}
	if rollout != "" {
		e.ParentExecution = &commonpb.WorkflowExecution{WorkflowId: rollout, RunId: rolloutRun}
	}
	return e
}

func TestTerminatedNodeNotifierTellsHandingRolloutsTheResultAndWakesTheOthers(t *testing.T) {
	fake := &fakeVisibility{
		terminated: []*workflowpb.WorkflowExecutionInfo{
			terminatedNode("handed", "run-handed", "rollout-a", "a-1"),   // a-1 continued as new: tell rollout-a
			terminatedNode("own", "run-own", "rollout-b", "b-1"),         // b-1 still runs: Temporal tells it
			terminatedNode("ended", "run-ended", "rollout-c", "c-1"),     // c-1 completed: handed nothing over
			terminatedNode("by-hand", "run-by-hand", "", ""),             // started by hand
			terminatedNode("expired", "run-expired", "rollout-d", "d-1"), // d-1 past its retention
		},
		runStatus: map[string]enums.WorkflowExecutionStatus{
			"a-1": enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW,
			"b-1": enums.WORKFLOW_EXECUTION_STATUS_RUNNING,
			"c-1": enums.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		},
		rollouts: []string{"rollout-a", "rollout-b", "rollout-w"},
	}
	fake.terminated = append(fake.terminated, &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: api.Cluster{Name: "other"}.NodeWorkflowID("elsewhere"), RunId: "run-other"},
		// another cluster's node: not this worker's to tell
		ParentExecution: &commonpb.WorkflowExecution{WorkflowId: "rollout-a", RunId: "a-1"}})
	n := &TerminatedNodeNotifier{Temporal: fake, TaskQueue: "q", NodeOfWorkflowID: api.Cluster{}.NodeOfWorkflowID}
	since := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	require.NoError(t, n.Look(context.Background(), since))

	require.Equal(t, []string{
		"WorkflowType IN ('NodeRollout', 'NodeRolloutV2', 'NodeRolloutV3', 'NodeRolloutV4', 'NodeRolloutV5') AND ExecutionStatus = 'Terminated' AND TaskQueue = 'q' AND CloseTime >= '2026-12-06T10:00:00Z'",
		"WorkflowType = 'Rollout' AND ExecutionStatus = 'Running' AND TaskQueue = 'q'",
	}, fake.queries, "the running rollouts are listed once a look")
	results := map[string]sentSignal{}
	woken := map[string][]string{} // node → rollouts sent a bare word
	for _, s := range fake.signals {
		require.Equal(t, api.SignalNodeFree, s.name)
		require.Empty(t, s.runID, "the rollout's current run, not the one that started the node")
		require.Equal(t, "run-"+s.word.Node, s.word.RunID, "a rollout takes a word only for the run it names")
		if s.word.Result != nil {
			results[s.word.Node] = s
			continue
		}
		woken[s.word.Node] = append(woken[s.word.Node], s.workflowID)
	}
	require.Len(t, results, 1, "only the node whose starting run continued as new gets its result")
	s := results["handed"]
	require.Equal(t, "rollout-a", s.workflowID)
	require.Equal(t, api.OutcomeFailed, s.word.Result.Outcome)
	require.Equal(t, api.ReasonNodeWorkflowTerminated, s.word.Result.Reason)
	require.Equal(t, map[string][]string{
		"handed":  {"rollout-b", "rollout-w"},
		"own":     {"rollout-a", "rollout-w"}, // not rollout-b: Temporal tells it of its child
		"ended":   {"rollout-a", "rollout-b", "rollout-w"},
		"by-hand": {"rollout-a", "rollout-b", "rollout-w"},
		"expired": {"rollout-a", "rollout-b", "rollout-w"},
	}, woken, "every other running rollout may wait for the node")

	// The next look lists the same closes (it reaches back): each told once.
	sent := len(fake.signals)
	require.NoError(t, n.Look(context.Background(), since))
	require.Len(t, fake.signals, sent)
	// A look from past the closes lists none of them again, and forgets them.
	require.NoError(t, n.Look(context.Background(), closedAt.Add(time.Second)))
	require.Len(t, fake.signals, sent)
	require.Empty(t, n.told, "a worker that runs for months keeps only the last look's window")
}

func TestTerminatedNodeNotifierTriesAgainWhenTheSignalFails(t *testing.T) {
	fake := &fakeVisibility{
		terminated: []*workflowpb.WorkflowExecutionInfo{terminatedNode("handed", "run-handed", "rollout-a", "a-1")},
		runStatus:  map[string]enums.WorkflowExecutionStatus{"a-1": enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW},
		signalErr:  serviceerror.NewUnavailable("server restarting"),
	}
	n := &TerminatedNodeNotifier{Temporal: fake, TaskQueue: "q", NodeOfWorkflowID: api.Cluster{}.NodeOfWorkflowID}
	require.ErrorContains(t, n.Look(context.Background(), closedAt), "server restarting")
	fake.signalErr = nil
	require.NoError(t, n.Look(context.Background(), closedAt))
	require.Len(t, fake.signals, 1)

	// A rollout that has ended is not asked again.
	fake.terminated = append(fake.terminated, terminatedNode("late", "run-late", "rollout-gone", "g-1"))
	fake.runStatus["g-1"] = enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	fake.signalErr = serviceerror.NewNotFound("workflow execution already completed")
	require.NoError(t, n.Look(context.Background(), closedAt))
	fake.signalErr = nil
	require.NoError(t, n.Look(context.Background(), closedAt))
	require.Len(t, fake.signals, 1)
}
