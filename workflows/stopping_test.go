package workflows

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// How a rollout stops: once no node may start any more (its failure budget spent, a canary
// failed), it waits for nothing but its nodes in flight.

// A rollout over its failure budget whose next node is held back by a closed maintenance
// window ends once its nodes in flight have, not at the window's next opening (a week later
// for a weekly window): no node may start any more, so there is nothing to wait for.
func (s *RolloutSuite) TestOverBudgetRolloutDoesNotWaitForTheNextWindow() {
	// Monday 2 March 2026, 09:50 UTC; the window is 10:00-10:30 every day.
	s.env.SetStartTime(time.Date(2026, 3, 2, 9, 50, 0, 0, time.UTC))
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) {
		if node == "node-00000" {
			return time.Hour, false // runs past the close, fails at 11:00
		}
		return 10 * time.Minute, true
	})
	req := request(nodeNames(6)...)
	req.Parallelism = 2
	req.MaintenanceWindow = &api.MaintenanceWindow{Start: "10:00", Duration: "30m", TimeZone: "UTC"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(err, &appErr), "%v", err)
	s.Equal(api.ErrFailureBudgetExceeded, appErr.Type())
	var r api.RolloutResult
	s.Require().NoError(appErr.Details(&r))
	s.Equal(1, r.Counts.Failed)
	s.Equal(3, r.Counts.Succeeded, "node-00001..3 ran before the window closed")
	s.Len(s.runs, 4, "no node starts once the budget is spent")
	s.Equal(time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC), r.FinishedAt.UTC(),
		"the rollout fails when its last node in flight fails, not when the window reopens")
}

// A rollout over its failure budget does not sit out the delay between nodes it is in: no
// node may start after it, so it ends once its nodes in flight have.
func (s *RolloutSuite) TestOverBudgetRolloutCutsTheDelayBetweenNodes() {
	r := s.overBudgetDuringAnHourlongDelay()
	s.Less(r.FinishedAt.Sub(r.StartedAt), 10*time.Minute, "the rollout ends when node-00000 fails, not an hour later")
}

// An old run (before versionCutDelay) sits the delay out, as its history says it did.
func (s *RolloutSuite) TestOverBudgetRolloutOfAnOldRunSitsTheDelayOut() {
	s.env.OnGetVersion(versionCutDelay, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	r := s.overBudgetDuringAnHourlongDelay()
	s.GreaterOrEqual(r.FinishedAt.Sub(r.StartedAt), time.Hour)
}

// overBudgetDuringAnHourlongDelay runs three nodes an hour apart with no failure allowed; the
// first fails after a minute.
func (s *RolloutSuite) overBudgetDuringAnHourlongDelay() api.RolloutResult {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) { return time.Minute, node != "node-00000" })
	req := request(nodeNames(3)...)
	req.DelayBetweenNodes = "1h"
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &appErr), "%v", s.env.GetWorkflowError())
	s.Equal(api.ErrFailureBudgetExceeded, appErr.Type())
	var r api.RolloutResult
	s.Require().NoError(appErr.Details(&r))
	s.Len(s.runs, 1, "no node starts once the budget is spent")
	return r
}

// secondOfBoth runs rollout first over a and shared, then a minute later rollout second (over
// shared and z unless given), and returns second's result and error type (the result from the
// error's details when it failed).
func secondOfBoth(ctx workflow.Context, req *api.RolloutRequest) (secondResult, error) {
	first := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("first")}),
		api.RolloutWorkflow, api.RolloutRequest{Name: "first", Nodes: []string{"a", "shared"}, JobTemplate: sampleTemplate})
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return secondResult{}, err
	}
	if req == nil {
		req = &api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z"}, JobTemplate: sampleTemplate}
	}
	second := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("second")}),
		api.RolloutWorkflow, *req)
	var r secondResult
	err := second.Get(ctx, &r.Result)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		r.ErrType = appErr.Type()
		_ = appErr.Details(&r.Result)
	} else if err != nil {
		return r, err
	}
	_ = first.Get(ctx, nil)
	return r, nil
}

type secondResult struct {
	Result  api.RolloutResult `json:"result"`
	ErrType string            `json:"errType,omitempty"`
}

// pairEnv is a test environment for secondOfBoth: shared is held by rollout first for two
// days, z fails after a minute, every other node succeeds after two days. zFailed reports
// when z failed; starts, which rollouts started each node.
func pairEnv(t *testing.T) (env *testsuite.TestWorkflowEnvironment, zFailed func() time.Time, starts func(node string) []string) {
	env, a := newTestEnv(nil)
	env.RegisterWorkflowWithOptions(secondOfBoth, workflow.RegisterOptions{Name: "second-of-both"})
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	var mu sync.Mutex
	var failedAt time.Time
	started := map[string][]string{}
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		mu.Lock()
		started[in.Node] = append(started[in.Node], in.Rollout)
		mu.Unlock()
		d := 48 * time.Hour
		if in.Node == "z" {
			d = time.Minute
		}
		if err := workflow.Sleep(ctx, d); err != nil {
			return api.NodeResult{}, err
		}
		if in.Node == "z" {
			mu.Lock()
			failedAt = workflow.Now(ctx)
			mu.Unlock()
			res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
			return res, temporal.NewNonRetryableApplicationError("failed", api.ErrNodeFailed, nil, res)
		}
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	zFailed = func() time.Time { mu.Lock(); defer mu.Unlock(); return failedAt }
	starts = func(node string) []string { mu.Lock(); defer mu.Unlock(); return started[node] }
	return env, zFailed, starts
}

// A rollout over its failure budget ends once its nodes in flight have: a node that waits
// for another rollout's long Job will not start, so the rollout does not wait for that Job
// to end or for its next look at the node (10 minutes, doubling up to 2 hours).
func TestOverBudgetRolloutDoesNotWaitForABusyNode(t *testing.T) {
	env, zFailed, starts := pairEnv(t)
	env.ExecuteWorkflow("second-of-both", nil)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var r secondResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.ErrFailureBudgetExceeded, r.ErrType)
	require.Equal(t, 1, r.Result.Counts.Failed)
	require.Equal(t, []string{"first"}, starts("shared"))
	require.False(t, zFailed().IsZero())
	require.Less(t, r.Result.FinishedAt.Sub(zFailed()), time.Minute,
		"the rollout over budget ends when its last node in flight does (z failed at %v, it ended at %v)", zFailed(), r.Result.FinishedAt)
}

// A failed canary stops the rollout: a canary that waits for another rollout to free its
// node does not start afterwards (the budget allows a failure, the canaries none), and the
// rollout does not wait for that node.
func TestFailedCanaryDoesNotWaitForOrStartABusyCanary(t *testing.T) {
	env, zFailed, starts := pairEnv(t)
	env.ExecuteWorkflow("second-of-both", &api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z", "other"}, JobTemplate: sampleTemplate,
		MaxFailures: "1", Canary: &api.Canary{Nodes: []string{"shared", "z"}}})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var r secondResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.ErrCanaryFailed, r.ErrType)
	require.Equal(t, []string{"first"}, starts("shared"), "no node starts after a canary failed")
	require.Empty(t, starts("other"))
	require.Less(t, r.Result.FinishedAt.Sub(zFailed()), time.Minute,
		"the rollout ends when its last canary in flight does (z failed at %v, it ended at %v)", zFailed(), r.Result.FinishedAt)
}
