package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
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
	s.env.OnActivity(s.a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job != nil && in.Job.UID == "u1" && in.End.Outcome == api.OutcomeSucceeded && in.KeepJobs == api.KeepFailed
	})).Return(activities.FinalizeResult{}, nil).Once()
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
	var appErr *temporal.ApplicationError
	s.Require().True(errors.As(s.env.GetWorkflowError(), &appErr), "%v", s.env.GetWorkflowError())
	s.Equal(api.ErrNodeFailed, appErr.Type())
	var r api.NodeResult
	s.Require().NoError(appErr.Details(&r))
	return r
}

func (s *NodeSuite) TestNodeGoneBeforeCreate() {
	s.env.OnActivity(s.a.CreateJob, mock.Anything, mock.Anything).Return(activities.JobRef{},
		temporal.NewNonRetryableApplicationError("node node-a not found", api.ErrNodeGone, nil)).Once()
	s.env.OnActivity(s.a.FinalizeJob, mock.Anything, mock.MatchedBy(func(in activities.FinalizeInput) bool {
		return in.Job == nil && in.End.Outcome == api.OutcomeNodeGone
	})).Return(activities.FinalizeResult{}, nil).Once()
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
	env.ExecuteWorkflow("both")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var results []api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&results))
	require.Equal(t, 2, results[0].Counts.Succeeded)
	require.Equal(t, 2, results[1].Counts.Succeeded)
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
				return workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, in.Rollout, in.Node, "any-id-i-like"), name, in).Get(ctx, nil)
			}, workflow.RegisterOptions{Name: "rogue-parent"})
			env.ExecuteWorkflow("rogue-parent", nodeInput())
			var appErr *temporal.ApplicationError
			require.ErrorAs(t, env.GetWorkflowError(), &appErr)
			require.Equal(t, ErrNotStartedByARollout, appErr.Type())
			require.Contains(t, appErr.Message(), `not "noderollout-node-node-a"`)
		})
	}
}
