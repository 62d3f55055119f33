package workflows

import (
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The policy's maxParallelism, learnt at PrepareTemplate, also bounds setParallelism later.
func TestSetParallelismStaysWithinThePolicy(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(
		activities.PreparedTemplate{Template: sampleTemplate, Hash: "h1", MaxParallelism: 5}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1"}, Total: 1}, nil)
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		}).After(time.Hour)
	var over, within error
	accepted := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateSetParallelism, "over", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { over = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: 6})
		env.UpdateWorkflow(api.UpdateSetParallelism, "within", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { within = err }, OnAccept: func() { accepted = true }, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: 5})
	}, time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", NodeSelector: "a=b", JobTemplate: sampleTemplate, Parallelism: 2})
	require.NoError(t, env.GetWorkflowError())
	require.ErrorContains(t, over, "maxParallelism")
	require.NoError(t, within)
	require.True(t, accepted)
}

// An update sent while the template is still being prepared cannot slip past the policy's cap.
func TestSetParallelismBeforeTheTemplateIsPreparedStaysWithinThePolicy(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).After(10*time.Minute).Return(
		activities.PreparedTemplate{Template: sampleTemplate, Hash: "h1", MaxParallelism: 5}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1"}, Total: 1}, nil)
	env.OnWorkflow(NodeRolloutV3, mock.Anything, mock.Anything).After(time.Hour).Return(api.NodeResult{Outcome: api.OutcomeSucceeded}, nil)
	var updateErr error
	completed := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateSetParallelism, "early", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { updateErr = err }, OnAccept: func() {},
			OnComplete: func(_ any, err error) { completed, updateErr = true, err },
		}, api.SetParallelismRequest{Parallelism: 1000})
	}, time.Second)
	var st api.RolloutStatus
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&st))
	}, 11*time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", NodeSelector: "a=b", JobTemplate: sampleTemplate, Parallelism: 2})
	require.NoError(t, env.GetWorkflowError())
	require.True(t, completed, "the update completes once the cap is known")
	require.ErrorContains(t, updateErr, "allows at most 5, got 1000")
	require.Equal(t, 2, st.Parallelism, "the parallelism over the cap was not applied")
}
