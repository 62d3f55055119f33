package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Tests of the guarantees that must hold on a real fleet: each names the failure it guards.

// rolloutEnv is a test environment with Rollout and NodeRollout registered, a stored template
// and explicit node names listed as given.
func rolloutEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *activities.Activities) {
	t.Helper()
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	return env, a
}

func outage() error { return errors.New("dial tcp 127.0.0.1:6443: connect: connection refused") }

// An API server that refuses writes for minutes only delays the node (the SDK's default for
// local activities gave up after one StartToClose, about 31 s of retries).
func TestWritesRetryThroughAMinutesLongOutage(t *testing.T) {
	env, a := newTestEnv(nil)
	job := activities.JobRef{Namespace: "jobs", Name: "demo-node-a-x", UID: "u1", Node: "node-a"}
	var creates, finalizes int
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.JobRequest) (activities.JobRef, error) {
		creates++
		if creates <= 12 { // 1+2+4+8+16+30×6 s of backoff: over four minutes
			return activities.JobRef{}, outage()
		}
		return job, nil
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.FinalizeInput) (activities.FinalizeResult, error) {
		finalizes++
		if finalizes <= 12 {
			return activities.FinalizeResult{}, outage()
		}
		return activities.FinalizeResult{}, nil
	})
	executeNodeAsChild(env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	require.NoError(t, env.GetWorkflowError())
	var r api.NodeResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.OutcomeSucceeded, r.Outcome)
	require.Empty(t, r.Message, "the marker and delete went through, late")
	require.Equal(t, 13, creates)
	require.Equal(t, 13, finalizes)
}

// A create whose reply was lost and whose retry was then refused may have made the Job: the
// name the workflow computed goes to cleanup and finalize, so no Job of ours is left behind.
func TestFailedCreateStillCleansUpTheKnownJobName(t *testing.T) {
	env, a := newTestEnv(nil)
	var deleted, finalized activities.JobRef
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(activities.JobRef{},
		temporal.NewNonRetryableApplicationError("jobs is forbidden", api.ErrForbidden, nil))
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, job activities.JobRef) error {
		deleted = job
		return nil
	}).Once()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		require.NotNil(t, in.Job, "finalize must know the Job's name")
		finalized = *in.Job
		return activities.FinalizeResult{}, nil
	}).Once()
	executeNodeAsChild(env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r, _ := nodeFailure(t, env)
	require.Equal(t, api.ErrForbidden, r.Reason)
	require.NotEmpty(t, r.Job)
	require.Equal(t, r.Job, deleted.Name)
	require.NotEmpty(t, deleted.RunID, "without a UID the delete checks the run that made the Job")
	require.Equal(t, r.Job, finalized.Name)
	env.AssertExpectations(t)
}

// WaitJob failing for good (Forbidden on a GET) says nothing about the Job, which may still
// run: it is deleted, through refusals, before the node is released.
func TestWaitFailureDeletesTheJobBeforeTheNodeIsReleased(t *testing.T) {
	env, a := newTestEnv(nil)
	job := activities.JobRef{Namespace: "jobs", Name: "demo-node-a-x", UID: "u1", Node: "node-a"}
	var order []string
	deletes := 0
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(job, nil)
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{},
		temporal.NewNonRetryableApplicationError("get jobs: forbidden", api.ErrForbidden, nil))
	env.OnActivity(a.DeleteJob, mock.Anything, job).Return(func(context.Context, activities.JobRef) error {
		deletes++
		order = append(order, "delete")
		if deletes <= 3 {
			return temporal.NewNonRetryableApplicationError("delete jobs: forbidden", api.ErrForbidden, nil)
		}
		return nil
	})
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.FinalizeInput) (activities.FinalizeResult, error) {
		order = append(order, "finalize")
		return activities.FinalizeResult{}, nil
	})
	executeNodeAsChild(env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r, _ := nodeFailure(t, env)
	require.Equal(t, api.OutcomeFailed, r.Outcome)
	require.Equal(t, api.ErrForbidden, r.Reason)
	require.Equal(t, []string{"delete", "delete", "delete", "delete", "finalize"}, order,
		"a refused delete is retried; the node waits until the Job is gone")
}

// Once the failure budget is spent nothing new starts, a node that waited for another
// rollout included.
func TestWaitingNodeDoesNotStartOnceTheBudgetIsSpent(t *testing.T) {
	env := rolloutPairEnv(t)
	_, starts := zFailsOthersRun(env, time.Hour)
	env.ExecuteWorkflow("both")
	require.True(t, env.IsWorkflowCompleted())
	require.ErrorContains(t, env.GetWorkflowError(), api.ErrFailureBudgetExceeded)
	require.Equal(t, []string{"first"}, starts("shared"), "the second rollout spent its budget on z while it waited for shared")
}

// rolloutPairEnv runs "both": rollout first over a and shared, then a minute later rollout
// second over shared and z. more registers further workflows (before any mock, as the test
// environment requires).
func rolloutPairEnv(t *testing.T, more ...func(*testsuite.TestWorkflowEnvironment)) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env, a := newTestEnv(nil)
	env.RegisterWorkflowWithOptions(bothRollouts, workflow.RegisterOptions{Name: "both"})
	for _, register := range more {
		register(env)
	}
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		res := activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}
		if len(in.Labels) > 0 { // every asked label's value is "zone-" and the node's first letter
			res.Labels = map[string]map[string]string{}
			for _, n := range in.Names {
				res.Labels[n] = map[string]string{}
				for _, k := range in.Labels {
					res.Labels[n][k] = "zone-" + n[:1]
				}
			}
		}
		return res, nil
	})
	return env
}

// runBothToSuccess runs "both" and requires that each rollout succeeded on both its nodes.
func runBothToSuccess(t *testing.T, env *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	env.ExecuteWorkflow("both")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var results []api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&results))
	require.Len(t, results, 2)
	require.Equal(t, 2, results[0].Counts.Succeeded)
	require.Equal(t, 2, results[1].Counts.Succeeded)
}

// jobEnd is one Job's end as FinalizeJob saw it.
type jobEnd struct {
	rollout string
	at      time.Time
}

// firstHoldsSharedTwoDays mocks the Job activities: rollout first's Job on node shared runs two
// days, every other Job a minute. ended lists each node's Job ends in order.
func firstHoldsSharedTwoDays(env *testsuite.TestWorkflowEnvironment) (ended func() map[string][]jobEnd) {
	a := &activities.Activities{}
	var mu sync.Mutex
	ends := map[string][]jobEnd{}
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		return activities.JobRef{Namespace: in.Namespace, Name: in.Rollout + "-" + in.Node, UID: in.Rollout + in.Node, Node: in.Node}, nil
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.MatchedBy(func(in activities.WaitJobInput) bool { return in.Job.Name == "first-shared" })).
		After(48*time.Hour).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil)
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).After(time.Minute).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		mu.Lock()
		ends[in.Node] = append(ends[in.Node], jobEnd{rollout: in.Rollout, at: env.Now()})
		mu.Unlock()
		return activities.FinalizeResult{}, nil
	})
	return func() map[string][]jobEnd {
		mu.Lock()
		defer mu.Unlock()
		return ends
	}
}

// A node busy with another rollout's two-day Job costs the waiting rollout a bounded number
// of events: it is told when the node frees instead of polling (which scheduled a timer a
// minute, thousands in all).
func TestBusyNodeIsToldWhenFreeInsteadOfPolling(t *testing.T) {
	env := rolloutPairEnv(t)
	ended := firstHoldsSharedTwoDays(env)
	timers := 0
	env.SetOnTimerScheduledListener(func(string, time.Duration) { timers++ })
	env.SetTestTimeout(time.Minute)
	runBothToSuccess(t, env)
	shared := ended()["shared"]
	require.Len(t, shared, 2)
	require.Equal(t, "second", shared[1].rollout)
	require.Less(t, shared[1].at.Sub(shared[0].at), 2*time.Minute, "the waiting rollout starts as soon as the node frees")
	// Looks every 10, 20, 40, 80 minutes, then every 2 hours: 27 in 48 hours, where polling
	// took 2,883.
	require.Less(t, timers, 40, "waiting two days must cost a bounded handful of looks")
}

// A start request cannot smuggle in continue-as-new state (it skipped the template check and
// the parallelism ceiling): the state as the workflow's own second argument is honoured only
// in a run that was continued as new (api's TestCallerCannotSetInternalState... checks it
// inside the request).
func TestCallerCannotSetInternalState(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.ExecuteWorkflow(api.RolloutWorkflow, request("a"), &api.Progress{TemplateHash: "h", Template: "hidden", Parallelism: 1})
	requireInvalid(t, env.GetWorkflowError(), "progress")
	_ = a
}

// The largest template at the largest parallelism: what each node adds to the history does
// not grow with the template, and the state carried across continue-as-new stays small.
func TestHistoryCostDoesNotGrowWithTemplateOrFailures(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	const fleet = 2 * api.MaxReportedFailures
	big := sampleTemplate + "# " + strings.Repeat("x", 256*1024-len(sampleTemplate)-3) + "\n"
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		if in.Store {
			return activities.PreparedTemplate{Hash: "h"}, nil
		}
		return activities.PreparedTemplate{Template: in.Template, Hash: "h"}, nil
	})
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		// Enough nodes to fill the carried failures; the window is the largest allowed.
		return activities.ListNodesResult{Nodes: nodeNames(fleet), Total: fleet}, nil
	})
	largest := 0
	var mu sync.Mutex
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		b, _ := json.Marshal(in)
		mu.Lock()
		largest = max(largest, len(b))
		mu.Unlock()
		res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded",
			Message: strings.Repeat("m", 2048), LogTail: strings.Repeat("l", activities.LogTailBytes)}
		return res, temporal.NewNonRetryableApplicationError("failed", api.ErrNodeFailed, nil, res)
	})
	req := request()
	req.Nodes = nil
	req.NodeSelector = "pool=gpu"
	req.JobTemplate = big
	req.Parallelism = api.MaxParallelism
	req.MaxFailures = "100%"
	req.ContinueAsNewAfter = fleet - 1
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.Less(t, largest, 1024, "a child's input must not carry the template")
	_, carried := continuedAsNew(t, env.GetWorkflowError())
	require.Len(t, carried.Failures, api.MaxReportedFailures)
	b, _ := json.Marshal(carried)
	require.Less(t, len(b), 96*1024, "carried state is bounded: failures travel without log tails")
}

// A pause that arrives in the same workflow task as the decision to continue as new is
// carried into the next run, not lost.
func TestPauseAtTheMomentOfContinueAsNewIsKept(t *testing.T) {
	env, _ := rolloutEnv(t)
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		if err := workflow.Sleep(ctx, time.Minute); err != nil {
			return api.NodeResult{}, err
		}
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	req := request(nodeNames(4)...)
	req.Parallelism = 2
	req.ContinueAsNewAfter = 2
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalPause, nil) }, time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	_, carried := continuedAsNew(t, env.GetWorkflowError())
	require.True(t, carried.Paused, "the pause sent as the last nodes finished is carried over")
}

// status and setParallelism answer while the template is still being prepared.
func TestHandlersAnswerBeforeTheTemplateIsPrepared(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).After(10*time.Minute).Return(activities.PreparedTemplate{Hash: "h"}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		return activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}, nil
	})
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(api.NodeResult{Outcome: api.OutcomeSucceeded}, nil)
	var st api.RolloutStatus
	var queryErr, updateErr error
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(api.QueryStatus)
		queryErr = err
		if err == nil {
			queryErr = v.Get(&st)
		}
		env.UpdateWorkflow(api.UpdateSetParallelism, "u1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { updateErr = err },
			OnAccept:   func() {},
			OnComplete: func(_ interface{}, err error) { updateErr = err },
		}, api.SetParallelismRequest{Parallelism: 3})
	}, time.Minute)
	req := request(nodeNames(4)...)
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, queryErr)
	require.Equal(t, "running", st.Phase)
	require.Equal(t, api.DefaultParallelism, st.Parallelism)
	require.NoError(t, updateErr)
}

// A listing that fails for good on a later page stops new launches, but the nodes in flight
// finish and are reported before the rollout fails.
func TestListingFailureOnALaterPageDrainsAndReports(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		if in.After == "" {
			return activities.ListNodesResult{Nodes: []string{"a", "b", "c"}, More: true, Next: "c", Total: 6}, nil
		}
		return activities.ListNodesResult{}, temporal.NewNonRetryableApplicationError("nodes is forbidden", api.ErrForbidden, nil)
	})
	finished := 0
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		if err := workflow.Sleep(ctx, time.Hour); err != nil {
			return api.NodeResult{}, err
		}
		finished++
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	req := request()
	req.Nodes = nil
	req.NodeSelector = "pool=gpu"
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	appErr := requireAppError(t, env.GetWorkflowError(), api.ErrForbidden)
	require.Equal(t, 3, finished, "the nodes in flight were not cut off")
	var r api.RolloutResult
	require.NoError(t, appErr.Details(&r))
	require.Equal(t, 3, r.Counts.Succeeded)
}

// A node that timed out says why its Pod never ran, in its result and its error.
func TestTimedOutNodeSaysWhyItsPodNeverRan(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(activities.JobRef{Namespace: "jobs", Name: "j", UID: "u1", Node: "node-a"}, nil)
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: api.OutcomeTimedOut, Reason: api.ReasonJobTimeout}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{PodReason: "ImagePullBackOff: pull access denied"}, nil)
	executeNodeAsChild(env, NodeRollout, api.NodeRolloutWorkflow, nodeInput())
	r, appErr := nodeFailure(t, env)
	require.Contains(t, appErr.Message(), "ImagePullBackOff")
	require.Equal(t, "ImagePullBackOff: pull access denied", r.PodReason)
}

// A node whose workflow someone terminated ends failed, and the rollout writes that on the
// Node before it ends: a maintained node's Job success was recorded there before the soak, and
// a re-run would skip it as done; another node's marker keeps what it said before, which a
// converging rollout would run again at once, retryFailedAfter or not.
func TestTerminatedMaintainedNodeIsRecordedFailedOnTheNode(t *testing.T) {
	terminated := temporal.GetDefaultFailureConverter().FailureToError(&failurepb.Failure{
		Message:     "terminated by an operator",
		FailureInfo: &failurepb.Failure_TerminatedFailureInfo{TerminatedFailureInfo: &failurepb.TerminatedFailureInfo{}},
	})
	require.True(t, temporal.IsTerminatedError(terminated))
	for _, maintained := range []bool{true, false} {
		env, a := rolloutEnv(t)
		for _, nodeType := range []any{NodeRolloutV2, NodeRolloutV3, NodeRolloutV4, NodeRolloutV5} {
			env.OnWorkflow(nodeType, mock.Anything, mock.Anything).Return(api.NodeResult{}, terminated).Maybe()
		}
		var recorded []activities.FinalizeInput
		env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
			recorded = append(recorded, in)
			return activities.FinalizeResult{}, nil
		}).Maybe()
		req := request("node-a")
		req.MaxFailures = "1"
		if maintained {
			req.Maintenance = &api.Maintenance{Cordon: true, Soak: "10m"}
		}
		env.ExecuteWorkflow(api.RolloutWorkflow, req)
		require.NoError(t, env.GetWorkflowError())
		var res api.RolloutResult
		require.NoError(t, env.GetWorkflowResult(&res))
		require.Equal(t, 1, res.Counts.Failed, "maintained %v", maintained)
		require.Equal(t, api.ReasonNodeWorkflowTerminated, res.Failures[0].Reason)
		require.Len(t, recorded, 1, "recorded once, before the rollout ended (maintained %v)", maintained)
		require.Equal(t, "node-a", recorded[0].Node)
		require.Nil(t, recorded[0].Job)
		require.Equal(t, api.OutcomeFailed, recorded[0].End.Outcome)
		require.Equal(t, api.ReasonNodeWorkflowTerminated, recorded[0].End.Reason)
		require.NotEmpty(t, recorded[0].TemplateHash)
	}
}
