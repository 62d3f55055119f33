package main

import (
	"context"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

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
