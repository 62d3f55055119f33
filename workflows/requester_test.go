package workflows

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The requester in the memo reaches every Job and Node marker; the policy gets the selector
// and the parallelism it judges.
func TestRequesterAndPolicyInputsReachTheActivities(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.SetMemoOnStart(map[string]any{api.MemoRequester: "alice@laptop"})

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
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			finalized = append(finalized, in.Requester)
			return activities.FinalizeResult{}, nil
		})

	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).Return(activities.CordonResult{WeCordoned: true}, nil)
	env.OnActivity(a.UncordonNode, mock.Anything, mock.Anything).Return(activities.UncordonResult{Uncordoned: true}, nil)

	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", Namespace: "jobs", NodeSelector: "pool=a",
		JobTemplate: sampleTemplate, Parallelism: 7, Maintenance: &api.Maintenance{Cordon: true}})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, "pool=a", prepared.NodeSelector)
	require.Equal(t, 7, prepared.Parallelism)
	require.True(t, prepared.Cordon, "the policy judges the maintenance before any node starts")
	require.False(t, prepared.Drain)
	require.Equal(t, []string{"alice@laptop", "alice@laptop"}, created)
	require.Equal(t, []string{"alice@laptop", "alice@laptop"}, finalized)
}

// childMemos records the memo of every child workflow started, as the server would get it.
type childMemos struct {
	mu    sync.Mutex
	memos map[string]map[string]any // by child workflow ID
}

func (c *childMemos) interceptor() interceptor.WorkerInterceptor {
	return outbound(func(next interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor {
		return &childMemosOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: next}, c: c}
	})
}

type childMemosOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	c *childMemos
}

func (o *childMemosOutbound) ExecuteChildWorkflow(ctx workflow.Context, childType string, args ...any) workflow.ChildWorkflowFuture {
	opts := workflow.GetChildWorkflowOptions(ctx)
	o.c.mu.Lock()
	o.c.memos[opts.WorkflowID] = opts.Memo
	o.c.mu.Unlock()
	return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
}

// TestFleetPassesItsRequesterToTheClusterRollouts: each cluster's Rollout carries the fleet's
// requester and reason in its memo, where it reads them for its Jobs and Node markers.
func TestFleetPassesItsRequesterToTheClusterRollouts(t *testing.T) {
	env, _ := fleetEnv(t)
	memos := &childMemos{memos: map[string]map[string]any{}}
	intercept(env, memos.interceptor())
	require.NoError(t, env.SetMemoOnStart(map[string]any{api.MemoRequester: "alice@laptop", api.MemoReason: "CVE-1"}))
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, memos.memos, 4)
	for id, memo := range memos.memos {
		require.Equal(t, map[string]any{api.MemoRequester: "alice@laptop", api.MemoReason: "CVE-1"}, memo, id)
	}
}
