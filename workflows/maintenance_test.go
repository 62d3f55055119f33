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
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities"
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
}

func newMaintenanceRun(t *testing.T) *maintenanceRun {
	var ts testsuite.WorkflowTestSuite
	r := &maintenanceRun{env: newTestEnv(&ts), crashes: map[string]int{}, errs: map[string]error{}}
	env, a := r.env, &activities.Activities{}
	env.RegisterActivity(a)
	env.SetTestTimeout(time.Minute)
	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.NodeInput) (activities.CordonResult, error) {
		return activities.CordonResult{WeCordoned: !r.preCordoned}, r.step(ctx, "cordon")
	})
	env.OnActivity(a.DrainNode, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.DrainInput) (activities.DrainResult, error) {
		return activities.DrainResult{}, r.step(ctx, "drain")
	})
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.JobRequest) (activities.JobRef, error) {
		return activities.JobRef{Namespace: in.Namespace, Name: "job-" + in.Node, UID: "u1", Node: in.Node}, r.step(ctx, "create")
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		return activities.JobEnd{Outcome: activities.OutcomeSucceeded, Reason: "Completed"}, r.step(ctx, "wait")
	})
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		return activities.FinalizeResult{}, r.step(ctx, "finalize:"+string(in.End.Outcome))
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
				r.mu.Lock()
				r.block = "" // a later call of the step (the clean-up's) goes through
				r.mu.Unlock()
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
	in.Maintenance = nodeMaintenance(&Maintenance{Drain: &Drain{Timeout: "20s"}, Health: &HealthGate{Timeout: "1m"}, Soak: "5s", OnFailure: onFailure})
	return in
}

func (r *maintenanceRun) run(in NodeRolloutInput) (NodeResult, error) {
	executeNodeAsChild(r.env, NodeRollout, NodeRolloutWorkflow, in)
	if !r.env.IsWorkflowCompleted() {
		return NodeResult{}, errors.New("the workflow did not complete")
	}
	err := r.env.GetWorkflowError()
	var res NodeResult
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

var allSteps = []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "soak", "uncordon"}

func TestMaintenanceStepOrder(t *testing.T) {
	r := newMaintenanceRun(t)
	res, err := r.run(maintainedInput(""))
	require.NoError(t, err)
	require.Equal(t, activities.OutcomeSucceeded, res.Outcome)
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
			require.Equal(t, activities.OutcomeSucceeded, res.Outcome)
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
		for _, onFailure := range []string{OnFailureKeepCordoned, OnFailureUncordon} {
			t.Run(step+"/"+onFailure, func(t *testing.T) {
				r := newMaintenanceRun(t)
				r.block = step
				r.env.RegisterDelayedCallback(r.env.CancelWorkflow, time.Second)
				res, err := r.run(maintainedInput(onFailure))
				require.True(t, temporal.IsCanceledError(err), "%v", err)
				require.Equal(t, activities.OutcomeAborted, res.Outcome)
				i := slices.Index(allSteps, step)
				want := slices.Clone(allSteps[:i+1])
				if step == "wait" || step == "finalize:succeeded" {
					want = append(want, "delete")
				}
				if onFailure == OnFailureUncordon {
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
	r.errs["drain"] = temporal.NewNonRetryableApplicationError("drain of node node-a timed out with 1 Pod(s) left", activities.ErrDrainTimedOut, nil)
	res, err := r.run(maintainedInput(""))
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, ErrNodeFailed, appErr.Type())
	require.Equal(t, activities.OutcomeDrainTimedOut, res.Outcome)
	require.Equal(t, activities.ErrDrainTimedOut, res.Reason)
	require.Contains(t, res.Message, "1 Pod(s) left")
	require.Equal(t, []string{"cordon", "drain", "finalize:drainTimedOut"}, r.calls)
}

// TestHealthTimeoutIsUnhealthy: a node that is not healthy in time after its Job succeeded is
// unhealthy, the marker on it says so (replacing succeeded), and onFailure decides the cordon.
func TestHealthTimeoutIsUnhealthy(t *testing.T) {
	for _, onFailure := range []string{OnFailureKeepCordoned, OnFailureUncordon} {
		t.Run(onFailure, func(t *testing.T) {
			r := newMaintenanceRun(t)
			r.errs["health"] = temporal.NewNonRetryableApplicationError("node node-a was not healthy in time: Ready=False", activities.ErrUnhealthy, nil)
			res, err := r.run(maintainedInput(onFailure))
			require.Error(t, err)
			require.Equal(t, activities.OutcomeUnhealthy, res.Outcome)
			require.Equal(t, "job-node-a", res.Job)
			want := []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "finalize:unhealthy"}
			if onFailure == OnFailureUncordon {
				want = []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "uncordon", "finalize:unhealthy"}
			}
			require.Equal(t, want, r.calls)
		})
	}
}

// TestSoakInterruptedByAnUnhealthyCondition: the node was healthy, then not during the soak.
func TestSoakInterruptedByAnUnhealthyCondition(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["soak"] = temporal.NewNonRetryableApplicationError("node node-a stopped being healthy 3s after it was: Ready=False", activities.ErrUnhealthy, nil)
	res, err := r.run(maintainedInput(""))
	require.Error(t, err)
	require.Equal(t, activities.OutcomeUnhealthy, res.Outcome)
	require.Contains(t, res.Message, "stopped being healthy")
	require.Equal(t, []string{"cordon", "drain", "create", "wait", "finalize:succeeded", "health", "soak", "finalize:unhealthy"}, r.calls)
}

// TestPreCordonedNodeIsLeftCordoned: a node someone else cordoned is drained and updated, and
// not uncordoned afterwards, nor on failure with onFailure uncordon.
func TestPreCordonedNodeIsLeftCordoned(t *testing.T) {
	r := newMaintenanceRun(t)
	r.preCordoned = true
	res, err := r.run(maintainedInput(OnFailureUncordon))
	require.NoError(t, err)
	require.Equal(t, activities.OutcomeSucceeded, res.Outcome)
	require.NotContains(t, r.calls, "uncordon")

	r = newMaintenanceRun(t)
	r.preCordoned = true
	r.errs["wait"] = temporal.NewNonRetryableApplicationError("forbidden", activities.ErrForbidden, nil)
	_, err = r.run(maintainedInput(OnFailureUncordon))
	require.Error(t, err)
	require.NotContains(t, r.calls, "uncordon")
}

// TestCordonOnlyNeedsNoDrainOrHealth: cordon alone cordons and uncordons around the Job.
func TestCordonOnlyNeedsNoDrainOrHealth(t *testing.T) {
	r := newMaintenanceRun(t)
	in := nodeInput()
	in.Maintenance = nodeMaintenance(&Maintenance{Cordon: true})
	_, err := r.run(in)
	require.NoError(t, err)
	require.Equal(t, []string{"cordon", "create", "wait", "finalize:succeeded", "uncordon"}, r.calls)
}

func TestMaintenanceFailuresChargeTheBudget(t *testing.T) {
	var c Counts
	c.add(activities.OutcomeDrainTimedOut)
	c.add(activities.OutcomeUnhealthy)
	require.Equal(t, 2, c.Failures())
	require.Equal(t, 2, c.Finished())
}

func TestMaintenanceValidation(t *testing.T) {
	for _, c := range []struct {
		json, field string
	}{
		{`{"maintenance": {}}`, "maintenance"},
		{`{"maintenance": {"drain": {"timout": "1m"}}}`, "maintenance.drain.timout"},
		{`{"maintenance": {"drain": {"timeout": "soon"}}}`, "maintenance.drain.timeout"},
		{`{"maintenance": {"drain": {"podSelector": "app in ("}}}`, "maintenance.drain.podSelector"},
		{`{"maintenance": {"drain": {"gracePeriod": "-1s"}}}`, "maintenance.drain.gracePeriod"},
		{`{"maintenance": {"health": {"conditions": {"Ready": "yes"}}}}`, "maintenance.health.conditions.Ready"},
		{`{"maintenance": {"health": {"timeout": "0s"}}}`, "maintenance.health.timeout"},
		{`{"maintenance": {"soak": "forever"}}`, "maintenance.soak"},
		{`{"maintenance": {"cordon": true, "onFailure": "ignore"}}`, "maintenance.onFailure"},
		{`{"maintenance": {"cordon": "yes"}}`, "maintenance.cordon"},
	} {
		t.Run(c.field, func(t *testing.T) {
			req := decodeRequest(t, c.json)
			_, err := Validate(req)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.field+":")
		})
	}

	req := decodeRequest(t, `{"maintenance": {"drain": {"timeout": "20s", "gracePeriod": "5s"}, "soak": "5s"}}`)
	_, err := Validate(req)
	require.NoError(t, err)
	g := int64(5)
	require.Equal(t, &NodeMaintenance{Cordon: true, Drain: true, DrainTimeoutSeconds: 20, GracePeriodSeconds: &g,
		Health: true, HealthTimeoutSeconds: 600, Conditions: map[string]string{"Ready": "True"}, SoakSeconds: 5}, nodeMaintenance(req.Maintenance))
}

// decodeRequest is a valid request with the given fields merged in.
func decodeRequest(t *testing.T, fields string) RolloutRequest {
	t.Helper()
	base := `{"name": "demo", "nodes": ["a"], "jobTemplate": "apiVersion: batch/v1\nkind: Job\n", `
	var req RolloutRequest
	require.NoError(t, req.UnmarshalJSON([]byte(base+strings.TrimPrefix(fields, "{"))))
	return req
}
