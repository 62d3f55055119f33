package workflows

import (
	"context"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// A dry run writes nothing to the cluster: PrepareTemplate checks the template but does not
// store it (before, a dry run left the template's ConfigMap behind), and no child starts.
func TestDryRunStoresNoTemplate(t *testing.T) {
	env, a := newTestEnv(nil)
	var prepared []activities.PrepareTemplateInput
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		prepared = append(prepared, in)
		return activities.PreparedTemplate{Template: in.Template, Hash: "h"}, nil
	})
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		return activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}, nil
	})
	req := request("node-a", "node-b")
	req.DryRun = true
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Len(t, res.Planned, 2)
	require.Equal(t, "h", res.TemplateHash)
	require.Len(t, prepared, 1)
	require.False(t, prepared[0].Store, "a dry run must not store the template in the cluster")

	// A real rollout still stores it, so its nodes share it by hash.
	env, a = newTestEnv(nil)
	prepared = nil
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		prepared = append(prepared, in)
		return activities.PreparedTemplate{}, temporal.NewNonRetryableApplicationError("stop here", api.ErrInvalidRequest, nil)
	})
	env.ExecuteWorkflow(api.RolloutWorkflow, request("node-a"))
	require.Len(t, prepared, 1)
	require.True(t, prepared[0].Store)
}
