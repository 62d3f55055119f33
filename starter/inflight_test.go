package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func describedNode(id string, started time.Time, pending ...*workflowpb.PendingActivityInfo) *workflowservice.DescribeWorkflowExecutionResponse {
	return &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: id}, StartTime: timestamppb.New(started),
		},
		PendingActivities: pending,
	}
}

func TestStepOfANodeWorkflow(t *testing.T) {
	started := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	drainStarted := started.Add(3 * time.Second)
	evicted, err := converter.GetDefaultDataConverter().ToPayloads(2)
	require.NoError(t, err)

	// No regular activity pending: the Job is made, watched or finalized in a workflow task.
	s := stepOf(describedNode(api.NodeWorkflowID("web-1"), started))
	require.Equal(t, nodeStep{Node: "web-1", Step: "job", Since: started}, s)

	// A drain on its third attempt, in a cluster-scoped node workflow.
	s = stepOf(describedNode(api.Cluster{Name: "prod"}.NodeWorkflowID("web-2"), started,
		&workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: "DrainNode"}, Attempt: 3,
			LastStartedTime: timestamppb.New(drainStarted), HeartbeatDetails: evicted,
			LastFailure: &failurepb.Failure{Message: "eviction of pod db/db-0: connection refused"}}))
	require.Equal(t, nodeStep{Node: "web-2", Step: "draining", Since: drainStarted, Attempt: 3,
		Progress: "2 Pod(s) evicted", LastFailure: "eviction of pod db/db-0: connection refused"}, s)

	// A long Job's wait on its first attempt, before its first heartbeat: no attempt, no Job.
	s = stepOf(describedNode(api.NodeWorkflowID("web-3"), started,
		&workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: "WaitJob"}, Attempt: 1, LastStartedTime: timestamppb.New(drainStarted)}))
	require.Equal(t, nodeStep{Node: "web-3", Step: "job running", Since: drainStarted}, s)

	// Once it heartbeats, the Job it waits for; likewise the Job being deleted.
	jobName, err := converter.GetDefaultDataConverter().ToPayloads("patch-web-3-x7k2")
	require.NoError(t, err)
	for activityType, step := range map[string]string{"WaitJob": "job running", "DeleteJob": "deleting job"} {
		s = stepOf(describedNode(api.NodeWorkflowID("web-3"), started,
			&workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: activityType}, Attempt: 1,
				LastStartedTime: timestamppb.New(drainStarted), HeartbeatDetails: jobName}))
		require.Equal(t, nodeStep{Node: "web-3", Step: step, Since: drainStarted, Progress: "Job patch-web-3-x7k2"}, s)
	}
}

func TestPrintInFlight(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 5, 0, 0, time.UTC)
	var b bytes.Buffer
	printInFlight(&b, []nodeStep{
		{Node: "web-2", Step: "draining", Since: now.Add(-4 * time.Minute), Attempt: 3, Progress: "2 Pod(s) evicted", LastFailure: "refused"},
		{Node: "web-1", Step: "job", Since: now.Add(-12 * time.Second)},
	}, nil, now)
	require.Equal(t, "\nIN FLIGHT (2)\n"+
		"NODE   STEP      FOR   DETAIL\n"+
		"web-2  draining  4m0s  2 Pod(s) evicted; attempt 3; last failure: refused\n"+
		"web-1  job       12s   \n", b.String())

	b.Reset()
	printInFlight(&b, nil, errors.New("listing the rollout's node workflows: unknown search attribute"), now)
	require.Equal(t, "\nIN FLIGHT: not shown (listing the rollout's node workflows: unknown search attribute)\n", b.String())

	b.Reset()
	page := make([]nodeStep, maxInFlightShown)
	for i := range page {
		page[i] = nodeStep{Node: fmt.Sprintf("web-%d", i), Step: "job", Since: now}
	}
	printInFlight(&b, page, nil, now)
	require.True(t, strings.HasPrefix(b.String(), "\nIN FLIGHT (50 shown; more may be running)\n"), b.String())

	b.Reset()
	printInFlight(&b, nil, nil, now)
	require.Empty(t, b.String(), "nothing in flight, nothing printed")
}

// nodesAtSteps is a rollout's running node workflows: each described with its pending
// activity and answering the step query with its step (as JSON, the wire form).
type nodesAtSteps struct {
	client.Client
	described map[string]*workflowservice.DescribeWorkflowExecutionResponse
	steps     map[string]map[string]any
}

func (c nodesAtSteps) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	var out []*workflowpb.WorkflowExecutionInfo
	for _, d := range c.described {
		out = append(out, d.GetWorkflowExecutionInfo())
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: out}, nil
}

func (c nodesAtSteps) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	return &client.WorkflowExecutionDescription{RawResponse: c.described[id]}, nil
}

func (c nodesAtSteps) QueryWorkflow(_ context.Context, id, _, query string, _ ...any) (converter.EncodedValue, error) {
	st, ok := c.steps[id]
	if !ok || query != "step" {
		return nil, context.DeadlineExceeded
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(st)
	return encodedValue{p}, err
}

// starter status's IN FLIGHT table names each node's step exactly, with its progress: the
// drain with the Pods left, the soak with how far it is. Before, both health and soak read
// "health or soak" and the drain only counted evictions.
func TestInFlightNamesTheExactStep(t *testing.T) {
	now := time.Now()
	started := now.Add(-time.Minute)
	heartbeat := func(v ...any) *commonpb.Payloads {
		p, err := converter.GetDefaultDataConverter().ToPayloads(v...)
		require.NoError(t, err)
		return p
	}
	pending := func(activity string, details *commonpb.Payloads) *workflowpb.PendingActivityInfo {
		return &workflowpb.PendingActivityInfo{ActivityType: &commonpb.ActivityType{Name: activity}, Attempt: 1,
			LastStartedTime: timestamppb.New(started), HeartbeatDetails: details}
	}
	c := nodesAtSteps{
		described: map[string]*workflowservice.DescribeWorkflowExecutionResponse{
			api.NodeWorkflowID("a"): describedNode(api.NodeWorkflowID("a"), started, pending("DrainNode", heartbeat(1, 3))),
			api.NodeWorkflowID("b"): describedNode(api.NodeWorkflowID("b"), started, pending("CheckNodeHealth", heartbeat(now.Add(-12*time.Second)))),
			api.NodeWorkflowID("c"): describedNode(api.NodeWorkflowID("c"), started, pending("CheckNodeHealth", heartbeat(time.Time{}))),
			api.NodeWorkflowID("d"): describedNode(api.NodeWorkflowID("d"), started),
		},
		steps: map[string]map[string]any{
			api.NodeWorkflowID("a"): {"step": "drain", "since": started, "seconds": 600},
			api.NodeWorkflowID("b"): {"step": "soak", "since": now.Add(-12 * time.Second), "seconds": 40},
			api.NodeWorkflowID("c"): {"step": "health", "since": started, "seconds": 300},
			api.NodeWorkflowID("d"): {"step": "delete", "since": started, "job": "maint/patch-d-x"},
		},
	}
	// A node inside a workflow task answers its query only when the task ends: not asked.
	busy := describedNode(api.NodeWorkflowID("e"), started)
	busy.PendingWorkflowTask = &workflowpb.PendingWorkflowTaskInfo{State: enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED}
	c.described[api.NodeWorkflowID("e")] = busy
	c.steps[api.NodeWorkflowID("e")] = map[string]any{"step": "drain", "since": started}
	a := &app{ctx: context.Background(), tc: c}
	steps, err := a.inFlight(api.RolloutID("kata"))
	require.NoError(t, err)
	got := map[string]string{}
	for _, s := range steps {
		got[s.Node] = s.Step
	}
	require.Equal(t, map[string]string{
		"a": "drain (3 Pods left)",
		"b": "soak 12s/40s",
		"c": "health: waiting for the node's conditions (timeout 5m0s)",
		"d": "deleting Job maint/patch-d-x, waiting for its Pods to go",
		"e": "job",
	}, got)
}
