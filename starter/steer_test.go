package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// steerClient records the signals and the update it is sent; it knows the runs in runs (by
// workflow ID and start time); any other call panics.
type steerClient struct {
	client.Client
	sent   []string
	update client.UpdateWorkflowOptions
	runs   map[string]time.Time
}

func (c *steerClient) ListWorkflow(_ context.Context, r *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	prefix := r.Query[strings.Index(r.Query, "STARTS_WITH '")+len("STARTS_WITH '") : len(r.Query)-1]
	resp := &workflowservice.ListWorkflowExecutionsResponse{}
	for id, at := range c.runs {
		if strings.HasPrefix(id, prefix) {
			resp.Executions = append(resp.Executions, &workflowpb.WorkflowExecutionInfo{
				Execution: &commonpb.WorkflowExecution{WorkflowId: id}, StartTime: timestamppb.New(at)})
		}
	}
	return resp, nil
}

func (c *steerClient) DescribeWorkflow(_ context.Context, id, _ string) (*client.WorkflowExecutionDescription, error) {
	at, ok := c.runs[id]
	if !ok {
		return nil, serviceerror.NewNotFound("workflow not found for ID: " + id)
	}
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{StartTime: timestamppb.New(at)}}}, nil
}

func (c *steerClient) SignalWorkflow(_ context.Context, id, _, name string, _ any) error {
	c.sent = append(c.sent, name+" "+id)
	return nil
}

func (c *steerClient) UpdateWorkflow(_ context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.update = o
	return doneUpdate{}, nil
}

// doneUpdate is a set-parallelism update that completed, from 4 to 8.
type doneUpdate struct{ client.WorkflowUpdateHandle }

func (doneUpdate) Get(_ context.Context, res any) error {
	*res.(*api.SetParallelismResult) = api.SetParallelismResult{Previous: 4, Parallelism: 8}
	return nil
}

// A signal goes to the rollout or the fleet the ID names; an update waits for its result.
func TestSteeringReachesTheNamedWorkflow(t *testing.T) {
	c := &steerClient{}
	var out bytes.Buffer
	cmd := &cobra.Command{}
	idFlag(cmd)
	// Names without a workflow ID's prefix resolve without asking the server.
	a := &app{ctx: context.Background(), tc: c, cmd: cmd, out: &out, args: []string{"x"}}

	require.NoError(t, a.sendSignal(a.rollout, api.SignalPause))
	a.args = []string{"y"}
	require.NoError(t, a.sendSignal(a.fleet, api.SignalResume))
	require.Equal(t, []string{"pause rollout-x", "resume fleet-y"}, c.sent)
	require.Equal(t, "sent pause to rollout-x\nsent resume to fleet-y\n", out.String())

	out.Reset()
	a.args = []string{"x", "8"}
	require.NoError(t, a.setParallelism())
	require.Equal(t, client.UpdateWorkflowOptions{
		WorkflowID:   "rollout-x",
		UpdateName:   api.UpdateSetParallelism,
		Args:         []any{api.SetParallelismRequest{Parallelism: 8}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	}, c.update)
	require.Equal(t, "parallelism of rollout-x: 4 -> 8\n", out.String())
}

// A rollout that a schedule starts runs under IDs rollout-<name>-<time>: its name means the
// newest of those and the one started by hand, and a run's own ID reaches that run.
func TestSteeringReachesTheNewestRunOfAScheduledRollout(t *testing.T) {
	day := func(d, h int) time.Time { return time.Date(2026, 12, d, h, 0, 0, 0, time.UTC) }
	scheduled := map[string]time.Time{
		"rollout-x-2026-12-06T03:00:00Z":   day(6, 3),
		"rollout-x-2026-12-05T03:00:00Z":   day(5, 3),
		"rollout-x-y-2026-12-06T04:00:00Z": day(6, 4), // the rollout named x-y, not x
	}
	for _, tc := range []struct {
		name   string
		byHand *time.Time
		arg    string
		want   string
	}{
		{name: "never started by hand", arg: "x", want: "rollout-x-2026-12-06T03:00:00Z"},
		{name: "started by hand before the schedule's last run", byHand: new(day(1, 9)), arg: "x", want: "rollout-x-2026-12-06T03:00:00Z"},
		{name: "started by hand since", byHand: new(day(6, 5)), arg: "x", want: "rollout-x"},
		{name: "a scheduled run by its ID", arg: "rollout-x-2026-12-05T03:00:00Z", want: "rollout-x-2026-12-05T03:00:00Z"},
		{name: "the run by hand by its ID", byHand: new(day(1, 9)), arg: "rollout-x", want: "rollout-x"},
		{name: "the rollout named x-y", arg: "x-y", want: "rollout-x-y-2026-12-06T04:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &steerClient{runs: map[string]time.Time{}}
			for id, at := range scheduled {
				c.runs[id] = at
			}
			if tc.byHand != nil {
				c.runs["rollout-x"] = *tc.byHand
			}
			cmd := &cobra.Command{}
			idFlag(cmd)
			a := &app{ctx: context.Background(), tc: c, cmd: cmd, out: &bytes.Buffer{}, args: []string{tc.arg}}
			require.NoError(t, a.sendSignal(a.rollout, api.SignalPause))
			require.Equal(t, []string{"pause " + tc.want}, c.sent)
		})
	}
	require.Equal(t, "x", rolloutName("rollout-x-2026-12-06T03:00:00Z"))
	require.Equal(t, "x", rolloutName("rollout-eu:x-2026-12-06T03:00:00Z"))
	require.Equal(t, "x-2026", rolloutName("rollout-x-2026"), "not a schedule's suffix")
}
