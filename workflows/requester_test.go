package workflows

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
)

// The requester in the memo reaches every Job and Node marker; the policy gets the selector
// and the parallelism it judges.
func TestRequesterAndPolicyInputsReachTheActivities(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := newTestEnv(&ts)
	a := &activities.Activities{}
	env.RegisterActivity(a)
	env.RegisterWorkflow(NodeRollout)
	env.RegisterWorkflow(NodeRolloutV2)
	env.RegisterWorkflow(NodeRolloutV3)
	env.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: RolloutWorkflow})
	jobsOutlastTheWatch(env)
	env.SetMemoOnStart(map[string]any{MemoRequester: "alice@laptop"})

	var mu sync.Mutex
	var prepared activities.PrepareTemplateInput
	var created, finalized []string
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
			prepared = in
			return activities.PreparedTemplate{Template: in.Template, Hash: "h1"}, nil
		})
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1", "n2"}, Total: 2}, nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
			mu.Lock()
			defer mu.Unlock()
			created = append(created, in.Requester)
			return activities.JobRef{Namespace: in.Namespace, Name: "j-" + in.Node, UID: "u-" + in.Node, Node: in.Node}, nil
		})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: activities.OutcomeSucceeded}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			finalized = append(finalized, in.Requester)
			return activities.FinalizeResult{}, nil
		})

	env.ExecuteWorkflow(RolloutWorkflow, RolloutRequest{Name: "kata", Namespace: "jobs", NodeSelector: "pool=a",
		JobTemplate: sampleTemplate, Parallelism: 7})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, "pool=a", prepared.NodeSelector)
	require.Equal(t, 7, prepared.Parallelism)
	require.Equal(t, []string{"alice@laptop", "alice@laptop"}, created)
	require.Equal(t, []string{"alice@laptop", "alice@laptop"}, finalized)
}
