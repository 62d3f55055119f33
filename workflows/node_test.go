package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

type NodeSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
	a   *activities.Activities
}

func TestNodeSuite(t *testing.T) { suite.Run(t, new(NodeSuite)) }

func (s *NodeSuite) SetupTest() {
	s.env, s.a = newTestEnv(&s.WorkflowTestSuite)
}

func (s *NodeSuite) AfterTest(_, _ string) { s.env.AssertExpectations(s.T()) }

func nodeInput() NodeRolloutInput {
	return NodeRolloutInput{Rollout: "demo", Namespace: "jobs", Node: "node-a", Template: sampleTemplate,
		TemplateHash: "h1", JobTimeoutSeconds: 600, JobTTLSeconds: 3600, KeepJobs: api.KeepFailed}
}

func (s *NodeSuite) TestCreateWaitFinalize() {
	job := activities.JobRef{Namespace: "jobs", Name: "demo-node-a-abcde", UID: "u1", Node: "node-a"}
	s.env.OnActivity(s.a.CreateJob, mock.Anything, mock.MatchedBy(func(in activities.JobRequest) bool {
		return in.Node == "node-a" && in.Rollout == "demo" && in.RunID != "" && in.TemplateHash == "h1" &&
			in.JobTimeoutSeconds == 600 && in.TTLSecondsAfterFinished == 3600
	})).Return(job, nil).Once()
	s.env.OnActivity(s.a.WaitJob, mock.Anything, activities.WaitJobInput{Job: job, TimeoutSeconds: 600}).
		Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil).Once()
	finalizedOnce(s.env, s.a, func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeSucceeded && in.KeepJobs == api.KeepFailed
	})
	executeNodeAsChild(s.env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	s.Require().NoError(s.env.GetWorkflowError())
	var r api.NodeResult
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	s.Equal(api.OutcomeSucceeded, r.Outcome)
	s.Equal("node-a", r.Node)
	s.Equal(job.Name, r.Job)
}

func (s *NodeSuite) TestFailedJobFailsTheWorkflowWithTheResult() {
	job := activities.JobRef{Namespace: "jobs", Name: "demo-node-a-abcde", UID: "u1"}
	code := int32(3)
	s.env.OnActivity(s.a.CreateJob, mock.Anything, mock.Anything).Return(job, nil)
	s.env.OnActivity(s.a.WaitJob, mock.Anything, mock.Anything).
		Return(activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}, nil)
	s.env.OnActivity(s.a.FinalizeJob, mock.Anything, mock.Anything).
		Return(activities.FinalizeResult{LogTail: "boom", ExitCode: &code}, nil)
	executeNodeAsChild(s.env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r := s.failedResult()
	s.Equal(api.OutcomeFailed, r.Outcome)
	s.Equal("BackoffLimitExceeded", r.Reason)
	s.Equal("boom", r.LogTail)
	s.Equal(int32(3), *r.ExitCode)
}

func (s *NodeSuite) failedResult() api.NodeResult {
	appErr := requireAppError(s.T(), s.env.GetWorkflowError(), api.ErrNodeFailed)
	var r api.NodeResult
	s.Require().NoError(appErr.Details(&r))
	return r
}

func (s *NodeSuite) TestNodeGoneBeforeCreate() {
	s.env.OnActivity(s.a.CreateJob, mock.Anything, mock.Anything).Return(activities.JobRef{},
		temporal.NewNonRetryableApplicationError("node node-a not found", api.ErrNodeGone, nil)).Once()
	finalizedOnce(s.env, s.a, func(in activities.FinalizeInput) bool {
		return in.Job == nil && in.End.Outcome == api.OutcomeNodeGone
	})
	executeNodeAsChild(s.env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r := s.failedResult()
	s.Equal(api.OutcomeNodeGone, r.Outcome)
	s.Equal(api.ReasonNodeDeleted, r.Reason)
}

func (s *NodeSuite) TestForeignObjectIsAFailureNotARetry() {
	s.env.OnActivity(s.a.CreateJob, mock.Anything, mock.Anything).Return(activities.JobRef{},
		temporal.NewNonRetryableApplicationError("Job jobs/demo-node-a-abcde exists and is not ours", api.ErrForeignObject, nil)).Once()
	s.env.OnActivity(s.a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil).Once()
	executeNodeAsChild(s.env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r := s.failedResult()
	s.Equal(api.OutcomeFailed, r.Outcome)
	s.Equal(api.ErrForeignObject, r.Reason)
}

// TestCancelDeletesRunningJobsAndStartsNoMore aborts a real Rollout (with real NodeRollout
// children over mocked activities) while Jobs run.
func TestCancelDeletesRunningJobsAndStartsNoMore(t *testing.T) {
	env, a := newTestEnv(nil)
	var mu sync.Mutex
	created, deleted := map[string]bool{}, map[string]bool{}
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Template: sampleTemplate, Hash: "h"}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: nodeNames(10), Total: 10}, nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		mu.Lock()
		defer mu.Unlock()
		created[in.Node] = true
		return activities.JobRef{Namespace: in.Namespace, Name: "job-" + in.Node, Node: in.Node}, nil
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		for {
			select {
			case <-ctx.Done():
				return activities.JobEnd{}, ctx.Err()
			case <-time.After(10 * time.Millisecond):
				activity.RecordHeartbeat(ctx)
			}
		}
	})
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, job activities.JobRef) error {
		mu.Lock()
		defer mu.Unlock()
		deleted[job.Node] = true
		return nil
	})
	jobsOutlastTheWatch(env)
	req := request(nodeNames(10)...)
	req.Parallelism = 3
	var before map[string]bool
	env.RegisterDelayedCallback(func() {
		mu.Lock()
		before = map[string]bool{}
		for n := range created {
			before[n] = true
		}
		mu.Unlock()
		env.CancelWorkflow()
	}, time.Second)
	env.SetTestTimeout(time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	var canceled *temporal.CanceledError
	require.True(t, errors.As(env.GetWorkflowError(), &canceled))
	var result api.RolloutResult
	require.NoError(t, canceled.Details(&result))
	require.Equal(t, 3, result.Counts.Aborted, "aborted nodes have their own outcome")
	require.Equal(t, 7, result.Counts.Pending, "the nodes never started are counted, as in a status")
	require.Zero(t, result.Counts.Failures(), "an abort is not charged to the failure budget")
	require.Len(t, before, 3, "three Jobs were running at the abort")
	require.Equal(t, before, created, "no Job is created after the abort")
	require.Equal(t, created, deleted, "every running Job is deleted")
}

// TestBusyNodeWaitsForTheOtherRollout runs two rollouts over overlapping nodes at once: the
// shared node runs for one rollout, then the other, never both.
func TestBusyNodeWaitsForTheOtherRollout(t *testing.T) {
	env := rolloutPairEnv(t)
	type span struct {
		rollout    string
		start, end time.Time
	}
	var mu sync.Mutex
	spans := map[string][]span{}
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		start := workflow.Now(ctx)
		if err := workflow.Sleep(ctx, 10*time.Minute); err != nil {
			return api.NodeResult{}, err
		}
		mu.Lock()
		spans[in.Node] = append(spans[in.Node], span{in.Rollout, start, workflow.Now(ctx)})
		mu.Unlock()
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	runBothToSuccess(t, env)
	shared := spans["shared"]
	require.Len(t, shared, 2)
	require.Equal(t, "first", shared[0].rollout)
	require.Equal(t, "second", shared[1].rollout)
	require.False(t, shared[1].start.Before(shared[0].end), "the second rollout ran on the node before the first finished")
	// The second rollout's other node did not wait for the shared one.
	require.Equal(t, time.Minute, spans["z"][0].start.Sub(shared[0].start))
}

// bothRollouts starts rollout "first" over a and shared, and a minute later "second" over
// shared and z.
func bothRollouts(ctx workflow.Context) ([]api.RolloutResult, error) {
	first := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("first")}),
		api.RolloutWorkflow, api.RolloutRequest{Name: "first", Nodes: []string{"a", "shared"}, JobTemplate: sampleTemplate})
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return nil, err
	}
	second := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("second")}),
		api.RolloutWorkflow, api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z"}, JobTemplate: sampleTemplate})
	var r1, r2 api.RolloutResult
	if err := first.Get(ctx, &r1); err != nil {
		return nil, err
	}
	if err := second.Get(ctx, &r2); err != nil {
		return nil, err
	}
	return []api.RolloutResult{r1, r2}, nil
}

// A node workflow runs only as a Rollout's child under the node's own workflow ID: started
// directly, or as a child under another ID, it refuses before any activity touches the
// cluster (row 7 of the seams issue).
func TestNodeWorkflowStartedOutsideARolloutIsRefused(t *testing.T) {
	for _, name := range []string{api.NodeRolloutWorkflow, api.NodeRolloutV2Workflow, api.NodeRolloutV3Workflow} {
		t.Run(name+"/directly", func(t *testing.T) {
			env, _ := newTestEnv(nil) // no activity mock: any activity call fails the test
			env.ExecuteWorkflow(name, nodeInput())
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, env.GetWorkflowError(), &appErr)
			require.Equal(t, ErrNotStartedByARollout, appErr.Type())
			require.True(t, appErr.NonRetryable())
			require.Contains(t, appErr.Message(), "started directly")
		})
		t.Run(name+"/under another ID", func(t *testing.T) {
			env, _ := newTestEnv(nil)
			env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in NodeRolloutInput) error {
				return workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, "any-id-i-like", "rollout "+in.Rollout, false), name, in).Get(ctx, nil)
			}, workflow.RegisterOptions{Name: "rogue-parent"})
			env.ExecuteWorkflow("rogue-parent", nodeInput())
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, env.GetWorkflowError(), &appErr)
			require.Equal(t, ErrNotStartedByARollout, appErr.Type())
			require.Contains(t, appErr.Message(), `not "noderollout-node-node-a"`)
		})
	}
}

// Tests of NodeRolloutV3: a watched Job runs as one RunJob local activity, and the node goes on
// with the separate steps from wherever RunJob stopped.

// A parent starts NodeRolloutV5 children under their nodes' workflow IDs, with inputs that
// leave the node to the ID and the watch to the child; the node's result names no node, and
// the parent's result does.
func TestParentStartsNodeRolloutV5WithTheNodeInItsID(t *testing.T) {
	env, a := newTestEnv(nil)
	listsNamedNodes(env, a)
	got := map[string]NodeRolloutInput{}
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		id := workflow.GetInfo(ctx).WorkflowExecution.ID
		got[id] = in
		if id == api.NodeWorkflowID("n2") { // fails as a NodeRolloutV5 does: its result names no node
			res := api.NodeResult{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
			return res, temporal.NewNonRetryableApplicationError("node n2 failed", api.ErrNodeFailed, nil, res)
		}
		return api.NodeResult{Outcome: api.OutcomeSucceeded}, nil
	})
	req := request("n1", "n2")
	req.MaxFailures = "1"
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, got, 2)
	for _, node := range []string{"n1", "n2"} {
		in, ok := got[api.NodeWorkflowID(node)]
		require.True(t, ok, "node %s runs under its workflow ID", node)
		require.Empty(t, in.Node, "the ID names the node")
		require.Zero(t, in.WatchSeconds, "an unmaintained V5 node watches without being told")
		recorded, err := json.Marshal(in)
		require.NoError(t, err)
		require.NotContains(t, string(recorded), `"node"`, "the history records no node in the input")
	}
	var result api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, 1, result.Counts.Succeeded)
	require.Len(t, result.Failures, 1)
	require.Equal(t, "n2", result.Failures[0].Node, "the parent fills in the node")
}

var oneStepJob = activities.JobRef{Namespace: "jobs", Name: "demo-node-a-w", UID: "u1", Node: "node-a"}

// separateSteps records every step the node runs on its own, of those named, for the test to
// assert there was none: a mock that panics would only fail the local activity, which the
// workflow may ride out.
func separateSteps(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, steps ...string) *[]string {
	ran := &[]string{}
	for _, step := range steps {
		switch step {
		case "create":
			env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(ranOnItsOwn[activities.JobRequest, activities.JobRef](ran, step)).Maybe()
		case "watch":
			env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(ranOnItsOwn[activities.WatchJobInput, activities.JobWatch](ran, step)).Maybe()
		case "wait":
			env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(ranOnItsOwn[activities.WaitJobInput, activities.JobEnd](ran, step)).Maybe()
		case "finalize":
			env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(ranOnItsOwn[activities.FinalizeInput, activities.FinalizeResult](ran, step)).Maybe()
		}
	}
	return ran
}

// ranOnItsOwn is separateSteps' mock of one step's activity: it records the step in ran and
// fails, "<step> ran on its own".
func ranOnItsOwn[In, Out any](ran *[]string, step string) func(context.Context, In) (Out, error) {
	return func(context.Context, In) (Out, error) {
		*ran = append(*ran, step)
		var zero Out
		return zero, errors.New(step + " ran on its own")
	}
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
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeFailed
	})
	runAsOneStep(t, env, a, "create", "watch")
	requireNodeFailed(t, env)
	env.AssertExpectations(t)
}

// The Job ended but RunJob's finalize failed: the node finalizes again on its own.
func TestRunJobWhoseFinalizeFailedFinalizesAgain(t *testing.T) {
	env, a := newTestEnv(nil)
	end := activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(activities.RunJobResult{Job: oneStepJob, End: end}, nil).Once()
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End == end
	})
	runAsOneStep(t, env, a, "create", "watch", "wait")
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// A create refused for good (nothing was made) is finalized without a Job.
func TestRunJobRefusedCreateFinalizesWithoutAJob(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).
		Return(activities.RunJobResult{}, temporal.NewNonRetryableApplicationError("bad template", api.ErrInvalidRequest, nil)).Once()
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.Job == nil && in.End.Outcome == api.OutcomeFailed
	})
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
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeSucceeded
	})
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
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return in.End.Outcome == api.OutcomeFailed
	})
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
	finalizedOnce(env, a, func(in activities.FinalizeInput) bool {
		return runID != "" && in.RunID == runID
	})
	executeNodeAsChild(env, NodeRolloutV2, api.NodeRolloutV2Workflow, watchedInput())
	require.NoError(t, env.GetWorkflowError())
	env.AssertExpectations(t)
}

// A node workflow answers the step query with the step it is at, since when, and the step's
// length where it has one (the soak's hold, the drain's and health gate's timeouts), so
// starter status can say "soak 12s/40s" instead of "health or soak".
func TestNodeAnswersWhichStepItIsAt(t *testing.T) {
	for _, c := range []struct {
		block   string
		want    string
		seconds int64
	}{
		// The wire words, spelled out: starter status reads them.
		{"drain", "drain", 20},
		{"health", "health", 60},
		{"soak", "soak", 5},
		{"wait", "job", 600},
	} {
		r := newMaintenanceRun(t)
		r.block = c.block
		var got struct {
			Step    string    `json:"step"`
			Since   time.Time `json:"since"`
			Seconds int64     `json:"seconds"`
			Job     string    `json:"job"`
		}
		var queryErr error
		r.env.RegisterDelayedCallback(func() {
			// The node runs as a rollout's child, under the node's workflow ID.
			v, err := r.env.QueryWorkflowByID(api.NodeWorkflowID("node-a"), "step")
			if queryErr = err; err == nil {
				queryErr = v.Get(&got)
			}
			r.env.CancelWorkflow()
		}, 2*time.Second)
		_, _ = r.run(maintainedInput(""))
		require.NoError(t, queryErr, c.block)
		require.Equal(t, c.want, got.Step, c.block)
		require.Equal(t, c.seconds, got.Seconds, c.block)
		require.False(t, got.Since.IsZero(), c.block)
		if c.want == "job" {
			require.Equal(t, "jobs/job-node-a", got.Job)
		}
	}
}

// NodeRolloutV5: NodeRolloutV4's steps with a smaller history.

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
	recorded, err := json.Marshal(r)
	require.NoError(t, err)
	require.NotContains(t, string(recorded), `"node"`, "the history records no node in the result")
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
