package workflows

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// maintenanceRun is one NodeRollout with maintenance over mocked activities that record each
// step, fail a step for passing reasons a number of times (a crashed worker's attempt), end a
// step with an error, or block a step until the workflow is aborted.
type maintenanceRun struct {
	env         *testsuite.TestWorkflowEnvironment
	mu          sync.Mutex
	calls       []string
	crashes     map[string]int
	errs        map[string]error
	block       string
	preCordoned bool
	// Issue 33's steps: what the node's Job says of a reboot, how the check Job ends, and the
	// inputs the reboot wait was given.
	rebootRequested bool
	checkEnd        activities.JobEnd
	rebootWaits     []activities.RebootWaitInput
	cordonIn        activities.NodeInput
	drainIn         activities.DrainInput
	finalized       []activities.FinalizeInput
	// childOfAnOlderRollout runs the node as a rollout from before RecordNodeEnd started it.
	childOfAnOlderRollout bool
}

func newMaintenanceRun(t *testing.T) *maintenanceRun {
	env, a := newTestEnv(nil)
	r := &maintenanceRun{env: env, crashes: map[string]int{}, errs: map[string]error{}}
	env.SetTestTimeout(time.Minute)
	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.NodeInput) (activities.CordonResult, error) {
		r.mu.Lock()
		r.cordonIn = in
		r.mu.Unlock()
		return activities.CordonResult{WeCordoned: !r.preCordoned}, r.step(ctx, "cordon")
	})
	env.OnActivity(a.DrainNode, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.DrainInput) (activities.DrainResult, error) {
		r.mu.Lock()
		r.drainIn = in
		r.mu.Unlock()
		return activities.DrainResult{}, r.step(ctx, "drain")
	})
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.JobRequest) (activities.JobRef, error) {
		return activities.JobRef{Namespace: in.Namespace, Name: "job-" + in.Node, UID: "u1", Node: in.Node}, r.step(ctx, "create")
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		if strings.HasPrefix(in.Job.Name, "check-") {
			return r.checkEnd, r.step(ctx, "checkWait")
		}
		return activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed", RebootRequested: in.ReadRebootRequest && r.rebootRequested}, r.step(ctx, "wait")
	})
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		r.mu.Lock()
		r.finalized = append(r.finalized, in)
		r.mu.Unlock()
		step := "finalize:" + string(in.End.Outcome)
		if in.Job == nil && in.End.Outcome == api.OutcomeSucceeded {
			step = "record:succeeded" // the node's own success, once its maintenance ended
		}
		return activities.FinalizeResult{}, r.step(ctx, step)
	})
	env.OnActivity(a.CheckNodeHealth, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.HealthInput) error {
		if in.HoldSeconds > 0 {
			return r.step(ctx, "soak")
		}
		return r.step(ctx, "health")
	})
	env.OnActivity(a.UncordonNode, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.NodeInput) (activities.UncordonResult, error) {
		return activities.UncordonResult{Uncordoned: true}, r.step(ctx, "uncordon")
	})
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, job activities.JobRef) error {
		return r.step(ctx, "delete")
	})
	mockNodeSteps(env, a, r)
	return r
}

func (r *maintenanceRun) step(ctx context.Context, name string) error {
	r.mu.Lock()
	r.calls = append(r.calls, name)
	crash := r.crashes[name] > 0
	if crash {
		r.crashes[name]--
	}
	err, block := r.errs[name], r.block == name
	if block {
		// Only this call blocks: a later call of the step (the clean-up's) goes through, even
		// if it starts before this one has seen its cancellation (the workflow does not wait
		// for that).
		r.block = ""
	}
	r.mu.Unlock()
	switch {
	case crash:
		return errors.New("the worker running this attempt went away")
	case err != nil:
		return err
	case block:
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(10 * time.Millisecond):
				activity.RecordHeartbeat(ctx)
			}
		}
	}
	return nil
}

func maintainedInput(onFailure string) NodeRolloutInput {
	in := nodeInput()
	in.Maintenance = resolvedMaintenance(&api.Maintenance{Drain: &api.Drain{Timeout: "20s"}, Health: &api.HealthGate{Timeout: "1m"}, Soak: "5s", OnFailure: onFailure})
	return in
}

func (r *maintenanceRun) run(in NodeRolloutInput) (api.NodeResult, error) {
	in.RecordNodeEnd = in.Maintenance != nil && !r.childOfAnOlderRollout // as startChild sets it
	executeNodeAsChild(r.env, NodeRollout, api.NodeRolloutWorkflow, in)
	if !r.env.IsWorkflowCompleted() {
		return api.NodeResult{}, errors.New("the workflow did not complete")
	}
	err := r.env.GetWorkflowError()
	var res api.NodeResult
	if err == nil {
		return res, r.env.GetWorkflowResult(&res)
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		_ = appErr.Details(&res)
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) && canceled.HasDetails() {
		_ = canceled.Details(&res)
	}
	return res, err
}

var allSteps = []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "soak", "uncordon", "record:succeeded"}

func TestMaintenanceStepOrder(t *testing.T) {
	r := newMaintenanceRun(t)
	res, err := r.run(maintainedInput(""))
	require.NoError(t, err)
	require.Equal(t, api.OutcomeSucceeded, res.Outcome)
	require.Equal(t, allSteps, r.calls)
}

// TestMaintenanceResumesAfterACrashAtEachStep: an attempt that fails for a passing reason (the
// worker running it died) is retried, and the node goes on to succeed with no step skipped,
// repeated other than the crashed one, or reordered.
func TestMaintenanceResumesAfterACrashAtEachStep(t *testing.T) {
	for _, step := range allSteps {
		t.Run(step, func(t *testing.T) {
			r := newMaintenanceRun(t)
			r.crashes[step] = 1
			res, err := r.run(maintainedInput(""))
			require.NoError(t, err)
			require.Equal(t, api.OutcomeSucceeded, res.Outcome)
			i := slices.Index(allSteps, step)
			want := slices.Concat(allSteps[:i+1], allSteps[i:])
			require.Equal(t, want, r.calls)
		})
	}
}

// TestMaintenanceAbortAtEachStep aborts the node while each long step runs: the step stops,
// a Job that may run is deleted, no later step starts, our cordon is lifted only when
// onFailure says uncordon, and a Job success already recorded on the Node is replaced by the
// abort.
func TestMaintenanceAbortAtEachStep(t *testing.T) {
	for _, step := range []string{"cordon", "drain", "wait", "finalize:succeeded", "health", "soak", "uncordon"} {
		for _, onFailure := range []string{api.OnFailureKeepCordoned, api.OnFailureUncordon} {
			t.Run(step+"/"+onFailure, func(t *testing.T) {
				r := newMaintenanceRun(t)
				r.block = step
				r.env.RegisterDelayedCallback(r.env.CancelWorkflow, time.Second)
				res, err := r.run(maintainedInput(onFailure))
				require.True(t, temporal.IsCanceledError(err), "%v", err)
				require.Equal(t, api.OutcomeAborted, res.Outcome)
				i := slices.Index(allSteps, step)
				want := slices.Clone(allSteps[:i+1])
				if step == "wait" || step == "finalize:succeeded" {
					want = append(want, "delete")
				}
				if onFailure == api.OnFailureUncordon {
					want = append(want, "uncordon")
				}
				if step == "finalize:succeeded" || step == "health" || step == "soak" || step == "uncordon" {
					// The Job's success is already on the Node: the abort replaces it.
					want = append(want, "finalize:aborted")
				}
				require.Equal(t, want, r.calls)
			})
		}
	}
}

// TestDrainTimeoutFailsTheNodeBeforeAnyJob: drainTimedOut is the node's outcome and recorded
// on it, no Job is made, and the node stays cordoned (keepCordoned is the default).
func TestDrainTimeoutFailsTheNodeBeforeAnyJob(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["drain"] = temporal.NewNonRetryableApplicationError("drain of node node-a timed out with 1 Pod(s) left", api.ErrDrainTimedOut, nil)
	res, err := r.run(maintainedInput(""))
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, api.ErrNodeFailed, appErr.Type())
	require.Equal(t, api.OutcomeDrainTimedOut, res.Outcome)
	require.Equal(t, api.ErrDrainTimedOut, res.Reason)
	require.Contains(t, res.Message, "1 Pod(s) left")
	require.Equal(t, []string{"cordon", "drain", "finalize:drainTimedOut"}, r.calls)
}

// TestHealthTimeoutIsUnhealthy: a node that is not healthy in time after its Job succeeded is
// unhealthy, the marker on it says so (replacing succeeded), and onFailure decides the cordon.
func TestHealthTimeoutIsUnhealthy(t *testing.T) {
	for _, onFailure := range []string{api.OnFailureKeepCordoned, api.OnFailureUncordon} {
		t.Run(onFailure, func(t *testing.T) {
			r := newMaintenanceRun(t)
			r.errs["health"] = temporal.NewNonRetryableApplicationError("node node-a was not healthy in time: Ready=False", api.ErrUnhealthy, nil)
			res, err := r.run(maintainedInput(onFailure))
			require.Error(t, err)
			require.Equal(t, api.OutcomeUnhealthy, res.Outcome)
			require.Equal(t, "job-node-a", res.Job)
			want := []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "finalize:unhealthy"}
			if onFailure == api.OnFailureUncordon {
				want = []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "uncordon", "finalize:unhealthy"}
			}
			require.Equal(t, want, r.calls)
		})
	}
}

// TestSoakInterruptedByAnUnhealthyCondition: the node was healthy, then not during the soak.
func TestSoakInterruptedByAnUnhealthyCondition(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["soak"] = temporal.NewNonRetryableApplicationError("node node-a stopped being healthy 3s after it was: Ready=False", api.ErrUnhealthy, nil)
	res, err := r.run(maintainedInput(""))
	require.Error(t, err)
	require.Equal(t, api.OutcomeUnhealthy, res.Outcome)
	require.Contains(t, res.Message, "stopped being healthy")
	require.Equal(t, []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "soak", "finalize:unhealthy"}, r.calls)
}

// TestPreCordonedNodeIsLeftCordoned: a node someone else cordoned is drained and updated, and
// not uncordoned afterwards, nor on failure with onFailure uncordon.
func TestPreCordonedNodeIsLeftCordoned(t *testing.T) {
	r := newMaintenanceRun(t)
	r.preCordoned = true
	res, err := r.run(maintainedInput(api.OnFailureUncordon))
	require.NoError(t, err)
	require.Equal(t, api.OutcomeSucceeded, res.Outcome)
	require.NotContains(t, r.calls, "uncordon")

	r = newMaintenanceRun(t)
	r.preCordoned = true
	r.errs["wait"] = temporal.NewNonRetryableApplicationError("forbidden", api.ErrForbidden, nil)
	_, err = r.run(maintainedInput(api.OnFailureUncordon))
	require.Error(t, err)
	require.NotContains(t, r.calls, "uncordon")
}

// TestCordonOnlyNeedsNoDrainOrHealth: cordon alone cordons and uncordons around the Job.
func TestCordonOnlyNeedsNoDrainOrHealth(t *testing.T) {
	r := newMaintenanceRun(t)
	in := nodeInput()
	in.Maintenance = resolvedMaintenance(&api.Maintenance{Cordon: true})
	_, err := r.run(in)
	require.NoError(t, err)
	require.Equal(t, []string{"cordon", "create", "wait", "finalize:succeeded", "uncordon", "record:succeeded"}, r.calls)
}

// TestMaintenanceTellsThePolicyWhoWrites: the cordon and the drain carry the rollout's
// namespace, whose policy rules judge them, and the cordon knows the drain that follows and
// what it would evict, so the policy can refuse it before the cordon. A refusal ends the node
// at once: no drain, no Job.
func TestMaintenanceTellsThePolicyWhoWrites(t *testing.T) {
	r := newMaintenanceRun(t)
	in := maintainedInput("")
	in.Maintenance = resolvedMaintenance(&api.Maintenance{Drain: &api.Drain{Timeout: "20s", PodSelector: "app=web", DeleteEmptyDirData: true, Force: true}})
	_, err := r.run(in)
	require.NoError(t, err)
	require.NotNil(t, r.cordonIn.Job, "the cordon knows the Job that follows, for the policy to judge")
	require.Equal(t, in.jobRequest(r.cordonIn.Job.RunID), *r.cordonIn.Job)
	require.Equal(t, activities.NodeInput{Rollout: in.Rollout, Node: in.Node, Namespace: in.Namespace,
		Drain: true, PodSelector: "app=web", DeleteEmptyDirData: true, Force: true, Job: r.cordonIn.Job}, r.cordonIn)
	require.Equal(t, in.Namespace, r.drainIn.Namespace)
	require.True(t, r.drainIn.Force)
	require.Equal(t, "app=web", r.drainIn.PodSelector)

	r = newMaintenanceRun(t)
	r.errs["cordon"] = temporal.NewNonRetryableApplicationError("policy rule \"protectedNodeLabels\" denies node n1", api.ErrPolicyDenied, nil)
	res, err := r.run(maintainedInput(""))
	require.Error(t, err)
	require.Equal(t, api.ErrPolicyDenied, res.Reason)
	require.Equal(t, []string{"cordon", "finalize:failed"}, r.calls, "nothing after the refusal")
}

// activityTimeouts records the options every activity is scheduled with, by activity type.
type activityTimeouts struct {
	mu   sync.Mutex
	opts map[string][]workflow.ActivityOptions
}

func (a *activityTimeouts) interceptor() interceptor.WorkerInterceptor {
	return outboundSeen{activity: func(ctx workflow.Context, activityType string) {
		a.mu.Lock()
		a.opts[activityType] = append(a.opts[activityType], workflow.GetActivityOptions(ctx))
		a.mu.Unlock()
	}}.interceptor()
}

// TestMaintenanceHealthOutlastsAnAPIServerOutage: the health gate and the soak enforce their
// own deadlines, moved by the time the node could not be read (activities
// TestHealthGateAndSoakOutlastAnAPIServerOutage), so their retries must not run out first: an
// outage longer than the step plus 10 minutes failed a healthy node when each check had a
// ScheduleToClose of its step plus 10 minutes. Each attempt is still bounded, and heartbeats.
func TestMaintenanceHealthOutlastsAnAPIServerOutage(t *testing.T) {
	r := newMaintenanceRun(t)
	rec := &activityTimeouts{opts: map[string][]workflow.ActivityOptions{}}
	intercept(r.env, rec.interceptor())
	res, err := r.run(maintainedInput(""))
	require.NoError(t, err)
	require.Equal(t, api.OutcomeSucceeded, res.Outcome)
	checks := rec.opts["CheckNodeHealth"]
	require.Len(t, checks, 2, "the gate and the soak")
	for _, o := range checks {
		require.Zero(t, o.ScheduleToCloseTimeout, "%s: no bound on the retries", o.Summary)
		require.Positive(t, o.StartToCloseTimeout, o.Summary)
		require.Positive(t, o.HeartbeatTimeout, o.Summary)
		require.Zero(t, o.RetryPolicy.MaximumAttempts, o.Summary)
	}
}

// resolvedMaintenance is the section as the Rollout hands it to its nodes.
func resolvedMaintenance(m *api.Maintenance) *api.NodeMaintenance {
	return api.RolloutRequest{Maintenance: m}.Settings().Maintenance
}

// A maintained node's Job's success is recorded at once (a run repeated from its start then
// creates no second Job) but as the Job's, not the node's: the node's own success is recorded
// only once its maintenance has ended, after the uncordon, and a node that fails after its
// Job records its failure instead.
func TestMaintainedNodeRecordsItsSuccessWhenItsMaintenanceEnds(t *testing.T) {
	for _, healthy := range []bool{true, false} {
		r := newMaintenanceRun(t)
		if !healthy {
			r.errs["health"] = temporal.NewNonRetryableApplicationError("node node-a was not healthy in time: Ready=False", api.ErrUnhealthy, nil)
		}
		_, err := r.run(maintainedInput(""))
		require.Equal(t, healthy, err == nil, "%v", err)
		require.Len(t, r.finalized, 2, "the Job's end, then the node's")
		jobEnd, nodeEnd := r.finalized[0], r.finalized[1]
		require.NotNil(t, jobEnd.Job)
		require.Equal(t, api.OutcomeSucceeded, jobEnd.End.Outcome)
		require.True(t, jobEnd.StepsFollow, "the Job's end is not yet the node's")
		require.Nil(t, nodeEnd.Job)
		require.False(t, nodeEnd.StepsFollow)
		if healthy {
			require.Equal(t, api.OutcomeSucceeded, nodeEnd.End.Outcome)
			require.Equal(t, "uncordon", r.calls[len(r.calls)-2], "recorded after the uncordon")
		} else {
			require.Equal(t, api.OutcomeUnhealthy, nodeEnd.End.Outcome)
		}
	}

	// A child of a rollout from before makes the commands its history recorded: no record of
	// its own after the uncordon.
	r := newMaintenanceRun(t)
	r.childOfAnOlderRollout = true
	_, err := r.run(maintainedInput(""))
	require.NoError(t, err)
	require.Len(t, r.finalized, 1, "only the Job's end")
	require.Equal(t, "uncordon", r.calls[len(r.calls)-1])
}
