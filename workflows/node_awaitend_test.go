package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Tests of NodeRolloutV4: a Job that outlasts RunJob's watch is awaited by AwaitJobEnd, which
// a worker's Job informer completes when the Job ends; no WaitJob heartbeats.

// longJob is a Job created at the test clock's start, with the node's 600 s jobTimeout.
func longJob(env *testsuite.TestWorkflowEnvironment) activities.JobRef {
	j := oneStepJob
	j.CreatedAt = env.Now().UTC()
	return j
}

// outlastsTheWatch makes RunJob return the Job still running.
func outlastsTheWatch(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, job activities.JobRef) {
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: job, Running: true}, nil).Once()
}

// endIsRead makes the watch after the await return end.
func endIsRead(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, job activities.JobRef, end activities.JobEnd) {
	env.OnActivity(a.WatchJob, mock.Anything, activities.WatchJobInput{
		WaitJobInput: activities.WaitJobInput{Job: job, TimeoutSeconds: 600}, ForSeconds: nodeWatchSeconds,
	}).Return(activities.JobWatch{End: end}, nil).Once()
}

func runV4(t *testing.T, env *testsuite.TestWorkflowEnvironment, a *activities.Activities, steps ...string) {
	t.Helper()
	ran := separateSteps(env, a, steps...)
	executeNodeAsChild(env, NodeRolloutV4, api.NodeRolloutV4Workflow, watchedInput())
	require.Empty(t, *ran, "steps that must not run on their own ran")
}

// The await stays open, with no heartbeat, until the informer completes it by its ID; the
// node then reads the end and finalizes it, and WaitJob never runs.
func TestLongJobIsAwaitedUntilTheInformerTellsItsEnd(t *testing.T) {
	env, a := newTestEnv(nil)
	job := longJob(env)
	outlastsTheWatch(env, a, job)
	var info activity.Info
	// The informer's word comes ten minutes into the Job (the activity's own return stands for
	// the completion by ID, which the test environment does not offer).
	env.OnActivity(a.AwaitJobEnd, mock.Anything, activities.AwaitJobEndInput{Job: job}).After(10 * time.Minute).Return(func(ctx context.Context, _ activities.AwaitJobEndInput) error {
		info = activity.GetInfo(ctx)
		return nil
	}).Once()
	end := activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}
	endIsRead(env, a, job, end)
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == job.UID && in.End == end
	})
	runV4(t, env, a, "create", "wait")
	require.NoError(t, env.GetWorkflowError())
	require.GreaterOrEqual(t, env.Now().Sub(job.CreatedAt), 10*time.Minute, "the node waited for the word")
	require.Equal(t, activities.AwaitJobEndActivityID, info.ActivityID, "the informer completes the activity by this ID")
	require.Zero(t, info.HeartbeatTimeout, "a heartbeat is an action: the await has none")
	require.Equal(t, 600*time.Second+awaitEndSlack, info.StartToCloseTimeout, "the await lasts until the Job's deadline")
	require.Equal(t, int32(1), info.Attempt)
	env.AssertExpectations(t)
}

// No word by the deadline (say, every worker was down when the Job ended, or the notice was
// lost): the await times out and the watch runs the deadline's path.
func TestAwaitPastTheDeadlineRunsTheTimeoutPath(t *testing.T) {
	env, a := newTestEnv(nil)
	job := longJob(env)
	outlastsTheWatch(env, a, job)
	env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.Anything).
		Return(temporal.NewTimeoutError(0, errors.New("start-to-close"))).Once()
	timedOut := activities.JobEnd{Outcome: api.OutcomeTimedOut, Reason: api.ReasonJobTimeout}
	endIsRead(env, a, job, timedOut)
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.End.Outcome == api.OutcomeTimedOut
	})
	runV4(t, env, a, "create", "wait")
	requireNodeFailed(t, env)
	env.AssertExpectations(t)
}

// A word that came early (an interim condition whose Pods outlast the watch) or an await that
// could not be set up (no informer) leaves the rest to WaitJob, as before.
func TestEarlyWordLeavesTheRestToWaitJob(t *testing.T) {
	env, a := newTestEnv(nil)
	job := longJob(env)
	outlastsTheWatch(env, a, job)
	env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.Anything).Return(nil).Once()
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{Running: true}, nil).Once()
	env.OnActivity(a.WaitJob, mock.Anything, activities.WaitJobInput{Job: job, TimeoutSeconds: 600}).
		Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil).Once()
	runV4(t, env, a, "create")
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// An abort while the node awaits the word deletes the Job at once: it does not wait for the
// await to hear of the cancellation.
func TestAbortWhileAwaitingTheEndDeletesTheJob(t *testing.T) {
	env, a := newTestEnv(nil)
	job := longJob(env)
	outlastsTheWatch(env, a, job)
	env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.Anything).Return(activity.ErrResultPending).Once()
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Minute)
	var deleted []activities.JobRef
	var deletedAt time.Time
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, j activities.JobRef) error {
		deleted = append(deleted, j)
		deletedAt = env.Now()
		return nil
	})
	runV4(t, env, a, "create", "watch", "wait", "finalize")
	var canceled *temporal.CanceledError
	require.ErrorAs(t, env.GetWorkflowError(), &canceled)
	var r api.NodeResult
	require.NoError(t, canceled.Details(&r))
	require.Equal(t, api.OutcomeAborted, r.Outcome)
	require.Equal(t, []activities.JobRef{job}, deleted)
	require.WithinDuration(t, job.CreatedAt.Add(5*time.Minute), deletedAt, time.Second, "the Job is deleted when the abort comes")
}

// A short Job under NodeRolloutV4 is still one RunJob and nothing else.
func TestShortJobUnderV4IsOneRunJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: oneStepJob, Done: true,
		End: activities.JobEnd{Outcome: api.OutcomeSucceeded}}, nil).Once()
	env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.Anything).Return(nil).Never()
	runV4(t, env, a, "create", "watch", "wait", "finalize")
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}
