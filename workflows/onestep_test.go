package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Tests of NodeRolloutV3: a watched Job runs as one RunJob local activity, and the node goes on
// with the separate steps from wherever RunJob stopped.

func TestParentStartsNodeRolloutV3WithTheWatch(t *testing.T) {
	env, a := newTestEnv(nil)
	listsNamedNodes(env, a)
	var got []NodeRolloutInput
	env.OnWorkflow(NodeRolloutV3, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		got = append(got, in)
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	env.ExecuteWorkflow(api.RolloutWorkflow, request("n1", "n2"))
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, got, 2)
	for _, in := range got {
		require.Equal(t, int64(nodeWatchSeconds), in.WatchSeconds)
	}
}

var oneStepJob = activities.JobRef{Namespace: "jobs", Name: "demo-node-a-w", UID: "u1", Node: "node-a"}

// separateSteps records every step the node runs on its own, of those named, for the test to
// assert there was none: a mock that panics would only fail the local activity, which the
// workflow may ride out.
func separateSteps(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, steps ...string) *[]string {
	ran := &[]string{}
	record := func(step string) { *ran = append(*ran, step) }
	for _, step := range steps {
		switch step {
		case "create":
			env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.JobRequest) (activities.JobRef, error) {
				record(step)
				return activities.JobRef{}, errors.New("create ran on its own")
			}).Maybe()
		case "watch":
			env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.WatchJobInput) (activities.JobWatch, error) {
				record(step)
				return activities.JobWatch{}, errors.New("watch ran on its own")
			}).Maybe()
		case "wait":
			env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.WaitJobInput) (activities.JobEnd, error) {
				record(step)
				return activities.JobEnd{}, errors.New("wait ran on its own")
			}).Maybe()
		case "finalize":
			env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.FinalizeInput) (activities.FinalizeResult, error) {
				record(step)
				return activities.FinalizeResult{}, errors.New("finalize ran on its own")
			}).Maybe()
		}
	}
	return ran
}

func TestShortJobIsOneRunJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.MatchedBy(func(in activities.RunJobInput) bool {
		return in.WatchSeconds == nodeWatchSeconds && in.TimeoutSeconds == 600 && in.KeepJobs == api.KeepFailed &&
			in.Job.Node == "node-a" && in.Job.RunID != "" && in.Job.TemplateHash == "h1"
	})).Return(activities.RunJobResult{Job: oneStepJob, Done: true,
		End: activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}}, nil).Once()
	runAsOneStep(t, env, a, "create", "watch", "wait", "finalize")
	require.NoError(t, env.GetWorkflowError())
	var r api.NodeResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.OutcomeSucceeded, r.Outcome)
	require.Equal(t, "Completed", r.Reason)
	require.Equal(t, oneStepJob.Name, r.Job)
	env.AssertExpectations(t)
}

func TestRunJobOutlastedIsLeftToWaitJobThenFinalized(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: oneStepJob, Running: true}, nil).Once()
	env.OnActivity(a.WaitJob, mock.Anything, activities.WaitJobInput{Job: oneStepJob, TimeoutSeconds: 600}).
		Return(activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeFailed
	})).Return(activities.FinalizeResult{}, nil).Once()
	runAsOneStep(t, env, a, "create", "watch")
	requireNodeFailed(t, env)
	env.AssertExpectations(t)
}

// The Job ended but RunJob's finalize failed: the node finalizes again on its own.
func TestRunJobWhoseFinalizeFailedFinalizesAgain(t *testing.T) {
	env, a := newTestEnv(nil)
	end := activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: oneStepJob, End: end}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End == end
	})).Return(activities.FinalizeResult{}, nil).Once()
	runAsOneStep(t, env, a, "create", "watch", "wait")
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// A create refused for good (nothing was made) is finalized without a Job.
func TestRunJobRefusedCreateFinalizesWithoutAJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).
		Return(activities.RunJobResult{}, temporal.NewNonRetryableApplicationError("bad template", api.ErrInvalidRequest, nil)).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job == nil && in.End.Outcome == api.OutcomeFailed
	})).Return(activities.FinalizeResult{}, nil).Once()
	runAsOneStep(t, env, a, "create", "watch", "wait")
	require.Error(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// An abort while RunJob runs deletes the Job by its planned name (and run) before the node
// is let go.
func TestAbortDuringRunJobDeletesTheJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.RunJobInput) (activities.RunJobResult, error) {
		env.CancelWorkflow()
		<-ctx.Done()
		return activities.RunJobResult{}, ctx.Err()
	})
	var deleted []activities.JobRef
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, j activities.JobRef) error {
		deleted = append(deleted, j)
		return nil
	})
	runAsOneStep(t, env, a, "create", "watch", "wait", "finalize")
	var canceled *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &canceled)
	require.Len(t, deleted, 1)
	require.NotEmpty(t, deleted[0].RunID, "the planned Job is found by its run")
	require.Equal(t, "node-a", deleted[0].Node)
}

// A repeated first task whose RunJob finds this run's outcome on the Node reports it.
func TestRunJobThatFindsTheRunsOutcomeReportsIt(t *testing.T) {
	env, a := newTestEnv(nil)
	found := oneStepJob
	found.UID = ""
	found.Finalized = api.OutcomeFailed
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: found}, nil).Once()
	runAsOneStep(t, env, a, "create", "watch", "wait", "finalize")
	requireNodeFailed(t, env)
	env.AssertExpectations(t)
}

// A maintained node (no watch) keeps its separate steps under NodeRolloutV3 too.
func TestNodeRolloutV3WithoutAWatchTakesTheSeparateSteps(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(oneStepJob, nil).Once()
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil).Once()
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{}, nil).Never()
	executeNodeAsChild(env, NodeRolloutV3, api.NodeRolloutV3Workflow, nodeInput())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// runAsOneStep runs a watched NodeRolloutV3 node and requires that none of steps ran on its
// own beside RunJob.
func runAsOneStep(t *testing.T, env *testsuite.TestWorkflowEnvironment, a *activities.Activities, steps ...string) {
	t.Helper()
	ran := separateSteps(env, a, steps...)
	executeNodeAsChild(env, NodeRolloutV3, api.NodeRolloutV3Workflow, watchedInput())
	require.Empty(t, *ran, "steps RunJob had done ran again on their own")
}
