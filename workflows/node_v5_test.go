package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Tests of NodeRolloutV5: NodeRolloutV4's steps with a smaller history.

// executeV5 runs a NodeRolloutV5 as a Rollout's child under node-a's workflow ID, with an
// input that does not name the node, as a parent of node-v2 version 4 starts it.
func executeV5(env *testsuite.TestWorkflowEnvironment) {
	in := nodeInput()
	in.Node = ""
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		var res api.NodeResult
		err := workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, api.NodeWorkflowID("node-a"), "rollout demo", false), api.NodeRolloutV5Workflow, in).Get(ctx, &res)
		return res, err
	}, workflow.RegisterOptions{Name: "v5-parent"})
	env.ExecuteWorkflow("v5-parent", in)
}

// trimmedJob is oneStepJob as a RunJob asked to trim returns it: what the request says left out.
func trimmedJob(env *testsuite.TestWorkflowEnvironment) activities.JobRef {
	return activities.JobRef{UID: "u1", CreatedAt: env.Now().UTC(), NodeUID: "n1"}
}

// The node comes from the workflow ID, RunJob is asked to trim its result, and the steps after
// it get the whole Job reference back; the result leaves out the node and sub-millisecond time.
func TestNodeRolloutV5TakesItsNodeFromItsIDAndRestoresTheTrimmedJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.SetStartTime(time.Date(2026, 12, 5, 10, 0, 0, 123456789, time.UTC))
	var asked activities.RunJobInput
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RunJobInput) (activities.RunJobResult, error) {
		asked = in
		return activities.RunJobResult{Job: trimmedJob(env), Running: true}, nil
	}).Once()
	var awaited activities.JobRef
	env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.AwaitJobEndInput) error {
		awaited = in.Job
		return nil
	}).Once()
	end := activities.JobEnd{Outcome: api.OutcomeSucceeded}
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{End: end}, nil).Once()
	var finalized *activities.JobRef
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		finalized = in.Job
		return activities.FinalizeResult{}, nil
	}).Once()

	executeV5(env)
	require.NoError(t, env.GetWorkflowError())
	require.True(t, asked.Trim, "RunJob is asked to trim its result")
	require.Equal(t, "node-a", asked.Job.Node, "the node comes from the workflow ID")
	require.Equal(t, int64(nodeWatchSeconds), asked.WatchSeconds, "an unmaintained node watches")
	want := activities.PlannedJob(asked.Job)
	want.UID, want.CreatedAt, want.NodeUID = "u1", trimmedJob(env).CreatedAt, "n1"
	require.Equal(t, want, awaited, "the await gets the whole reference")
	require.NotNil(t, finalized)
	require.Equal(t, want, *finalized, "so does the finalize")

	var r api.NodeResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Empty(t, r.Node, "the parent knows the node")
	require.Equal(t, want.Name, r.Job)
	require.Zero(t, r.StartedAt.Nanosecond()%int(time.Millisecond), "times to the millisecond: %v", r.StartedAt)
	require.Zero(t, r.FinishedAt.Nanosecond()%int(time.Millisecond), "times to the millisecond: %v", r.FinishedAt)
	require.Equal(t, api.NodeResult{Node: "node-a", Outcome: r.Outcome, Job: r.Job, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt},
		nodeResult("node-a", nil, r), "the parent fills the node in")
}

// A node that fails carries its result in the failure, trimmed the same way; the parent
// fills the node in from there too.
func TestNodeRolloutV5FailureCarriesTheTrimmedResult(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: trimmedJob(env), Done: true,
		End: activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}}, nil).Once()
	executeV5(env)
	carried, appErr := nodeFailure(t, env)
	require.Empty(t, carried.Node)
	require.Equal(t, "BackoffLimitExceeded", carried.Reason)
	require.Contains(t, appErr.Error(), "node node-a failed", "the message still names the node")
	require.Equal(t, "node-a", nodeResult("node-a", temporal.NewNonRetryableApplicationError("x", api.ErrNodeFailed, nil, carried), api.NodeResult{}).Node)
}

// A NodeRolloutV5 under an ID that names no node refuses to run.
func TestNodeRolloutV5UnderAForeignIDRefuses(t *testing.T) {
	env, _ := newTestEnv(nil)
	in := nodeInput()
	in.Node = ""
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in NodeRolloutInput) error {
		return workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, "any-id-i-like", "rollout demo", false), api.NodeRolloutV5Workflow, in).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "v5-parent"})
	env.ExecuteWorkflow("v5-parent", in)
	require.ErrorContains(t, env.GetWorkflowError(), ErrNotStartedByARollout)
}
