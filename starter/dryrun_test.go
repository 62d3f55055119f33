package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
)

// startRecorder records the workflows it is asked to start; each run returns a dry run's
// result at once, as if a worker had taken it.
type startRecorder struct {
	client.Client
	mu      sync.Mutex
	started []client.StartWorkflowOptions
	result  any // what a run started or got returns; a dry run's plan when nil
}

func (c *startRecorder) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, _ ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = append(c.started, o)
	return doneRun{id: o.ID, result: c.result}, nil
}

func (c *startRecorder) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{}}, nil
}

// OperatorService answers that no search attribute is registered.
func (c *startRecorder) OperatorService() operatorservice.OperatorServiceClient {
	return noSearchAttributes{}
}

type noSearchAttributes struct {
	operatorservice.OperatorServiceClient
}

func (noSearchAttributes) ListSearchAttributes(context.Context, *operatorservice.ListSearchAttributesRequest, ...grpc.CallOption) (*operatorservice.ListSearchAttributesResponse, error) {
	return &operatorservice.ListSearchAttributesResponse{}, nil
}

func (c *startRecorder) GetWorkflow(_ context.Context, id, _ string) client.WorkflowRun {
	return doneRun{id: id, result: c.result}
}

// doneRun is a workflow run that has ended with result (a dry run's, when nil).
type doneRun struct {
	client.WorkflowRun
	id     string
	result any
}

func (r doneRun) GetID() string    { return r.id }
func (r doneRun) GetRunID() string { return "run" }
func (r doneRun) Get(_ context.Context, res any) error {
	if r.result == nil {
		*res.(*api.RolloutResult) = api.RolloutResult{Name: "demo", Selected: 1}
		return nil
	}
	b, err := json.Marshal(r.result)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, res)
}

// commandApp is an app running cmd (made by newCmd) with args, on the Temporal client tc.
func commandApp(t *testing.T, tc client.Client, newCmd func(*app) *cobra.Command, args ...string) (*app, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	a := &app{ctx: context.Background(), tc: tc, out: &out, errOut: &out}
	a.cmd = newCmd(a)
	require.NoError(t, a.cmd.ParseFlags(args))
	a.args = a.cmd.Flags().Args()
	return a, &out
}

// A dry run of "demo" while a rollout named "demo-dry-run" runs: the dry run had that
// rollout's workflow ID and terminated it. Its ID is now of its own, new each time, and it
// never terminates a workflow it meets.
func TestDryRunNeverSharesAnIDOrTerminates(t *testing.T) {
	file := writeFile(t, "demo.yaml", "name: demo\nnodeSelector: x=y\n"+goodTemplate)
	c := &startRecorder{}
	for range 2 {
		a, _ := commandApp(t, c, dryRunCommand, "-f", file)
		require.NoError(t, a.dryRun())
	}
	require.Len(t, c.started, 2)
	for _, o := range c.started {
		require.NotEqual(t, api.RolloutID("demo-dry-run"), o.ID)
		require.False(t, strings.HasPrefix(o.ID, api.RolloutIDPrefix), "%s reads as a rollout's ID", o.ID)
		require.False(t, strings.HasPrefix(o.ID, api.FleetIDPrefix), "%s reads as a fleet's ID", o.ID)
		require.NotEqual(t, enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING, o.WorkflowIDConflictPolicy)
		require.NotZero(t, o.WorkflowExecutionTimeout, "a dry run no worker takes ends by itself")
	}
	require.NotEqual(t, c.started[0].ID, c.started[1].ID, "two dry runs of one name do not meet either")
}

// A drain that finds nothing to evict says so, rather than ending its line on a colon.
func TestDryRunSaysADrainEvictsNothing(t *testing.T) {
	res := api.RolloutResult{Selected: 2, Planned: []api.PlannedNode{
		{Node: "gpu-0", JobPrefix: "gpu-gpu-0-", Drain: &api.DrainPlan{}},
		{Node: "gpu-1", JobPrefix: "gpu-gpu-1-", Drain: &api.DrainPlan{Evict: []string{"default/web-1", "default/web-2"}}},
	}}
	var out bytes.Buffer
	require.NoError(t, printDryRun(&out, api.RolloutRequest{Name: "gpu"}, res))
	require.Contains(t, out.String(), "drain would evict no Pod\n")
	require.Contains(t, out.String(), "drain would evict 2 Pod(s): default/web-1, default/web-2\n")
	require.NotContains(t, out.String(), "0 Pod(s)")
}
