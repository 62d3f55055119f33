package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Tests of the local watch: a node whose parent set WatchSeconds watches its Job from a local
// activity first, and hands the wait to WaitJob only when the Job runs on.

func watchedInput() NodeRolloutInput {
	in := nodeInput()
	in.WatchSeconds = nodeWatchSeconds
	return in
}

var watchedJob = activities.JobRef{Namespace: "jobs", Name: "demo-node-a-w", UID: "u1", Node: "node-a"}

func TestShortJobEndsWithinTheWatchWithoutWaitJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(watchedJob, nil).Once()
	env.OnActivity(a.WatchJob, mock.Anything, activities.WatchJobInput{
		WaitJobInput: activities.WaitJobInput{Job: watchedJob, TimeoutSeconds: 600},
		ForSeconds:   nodeWatchSeconds,
	}).Return(activities.JobWatch{End: activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}}, nil).Once()
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{}, errors.New("WaitJob must not run")).Never()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeSucceeded
	})).Return(activities.FinalizeResult{}, nil).Once()
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

func TestJobThatOutlastsTheWatchIsLeftToWaitJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(watchedJob, nil).Once()
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{Running: true}, nil).Once()
	env.OnActivity(a.WaitJob, mock.Anything, activities.WaitJobInput{Job: watchedJob, TimeoutSeconds: 600}).
		Return(activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.End.Outcome == api.OutcomeFailed
	})).Return(activities.FinalizeResult{}, nil).Once()
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	requireNodeFailed(t, env)
	env.AssertExpectations(t)
}

// An abort that comes while the local activity watches cancels it, and the Job is deleted
// before the node is let go.
func TestAbortDuringTheWatchDeletesTheJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(watchedJob, nil).Once()
	// The abort comes while the watch runs (the test clock stands still during a local
	// activity, so the watch itself asks for it).
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.WatchJobInput) (activities.JobWatch, error) {
		env.CancelWorkflow()
		<-ctx.Done()
		return activities.JobWatch{}, ctx.Err()
	})
	var deleted []string
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, j activities.JobRef) error {
		deleted = append(deleted, j.Name)
		return nil
	})
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	var canceled *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &canceled)
	var r api.NodeResult
	require.NoError(t, canceled.Details(&r))
	require.Equal(t, api.OutcomeAborted, r.Outcome)
	require.Equal(t, []string{watchedJob.Name}, deleted)
}

// A watch refused for good (say, Forbidden reading the Job) leaves a Job that may still run:
// it is deleted before the node is let go, as when WaitJob fails.
func TestWatchRefusedDeletesTheJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(watchedJob, nil).Once()
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{},
		temporal.NewNonRetryableApplicationError("get jobs: forbidden", api.ErrForbidden, nil)).Once()
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{}, nil).Never()
	var deleted int
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.JobRef) error {
		deleted++
		return nil
	})
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil).Once()
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	require.Error(t, env.GetWorkflowError())
	require.Equal(t, 1, deleted)
}

// Parents set the watch on nodes without maintenance only; a maintained node keeps its steps.
func TestParentSetsTheWatchOnPlainNodesOnly(t *testing.T) {
	for _, maintained := range []bool{false, true} {
		env, _ := rolloutEnv(t)
		var got []NodeRolloutInput
		env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			got = append(got, in)
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		})
		req := request("n1", "n2")
		if maintained {
			req.Maintenance = &api.Maintenance{Cordon: true}
		}
		env.ExecuteWorkflow(api.RolloutWorkflow, req)
		require.NoError(t, env.GetWorkflowError())
		require.Len(t, got, 2)
		for _, in := range got {
			if maintained {
				require.Zero(t, in.WatchSeconds, "a maintained node keeps its activity steps")
			} else {
				require.Equal(t, int64(nodeWatchSeconds), in.WatchSeconds)
			}
		}
	}
}

// A node whose first workflow task created, watched and finalized its Job, but could not be
// recorded, runs again from the start: CreateJob finds the outcome this run left on the Node,
// and the node reports it without watching or finalizing a Job that may be gone.
func TestRepeatedFirstTaskReportsTheOutcomeOnTheNode(t *testing.T) {
	env, a := newTestEnv(nil)
	finalized := watchedJob
	finalized.UID = ""
	finalized.Finalized = api.OutcomeSucceeded
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(finalized, nil).Once()
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{}, errors.New("WatchJob must not run")).Never()
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{}, errors.New("WaitJob must not run")).Never()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, errors.New("FinalizeJob must not run")).Never()
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	require.NoError(t, env.GetWorkflowError())
	var r api.NodeResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.OutcomeSucceeded, r.Outcome)
	require.Equal(t, watchedJob.Name, r.Job)
	require.Equal(t, api.ReasonRecordedOnNode, r.Reason)
	env.AssertExpectations(t)
}

// FinalizeJob is told the run, which it records on the Node next to the marker.
func TestFinalizeIsToldTheRun(t *testing.T) {
	env, a := newTestEnv(nil)
	var runID string // the node workflow's run, as CreateJob was told it
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		runID = in.RunID
		return watchedJob, nil
	}).Once()
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{End: activities.JobEnd{Outcome: api.OutcomeSucceeded}}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return runID != "" && in.RunID == runID
	})).Return(activities.FinalizeResult{}, nil).Once()
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}
