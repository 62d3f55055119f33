package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// steerClient records the signals and the update it is sent; any other call panics.
type steerClient struct {
	client.Client
	sent   []string
	update client.UpdateWorkflowOptions
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
