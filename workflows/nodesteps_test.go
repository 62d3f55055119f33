package workflows

import (
	"context"
	"slices"
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

// Tests of issue 33's node steps: the blocking-Pods gate, the reboot, the check Job and
// onSuccess, around the maintenance steps, on maintenanceRun's recording mocks.

// mockNodeSteps mocks the activities of the reboot, the gates and onSuccess, each recording
// its step on r.
func mockNodeSteps(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, r *maintenanceRun) {
	env.OnActivity(a.WaitBlockingPods, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.BlockingPodsInput) error {
		return r.step(ctx, "blockingPods")
	})
	env.OnActivity(a.ReadBootID, mock.Anything, mock.Anything).Return(func(ctx context.Context, node string) (string, error) {
		return "boot-1", r.step(ctx, "bootID")
	})
	env.OnActivity(a.CreateStepJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.StepJobRequest) (activities.JobRef, error) {
		return activities.JobRef{Namespace: in.Namespace, Name: in.Step + "-" + in.Node, UID: "u-" + in.Step, Node: in.Node}, r.step(ctx, "create:"+in.Step)
	})
	env.OnActivity(a.WaitReboot, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.RebootWaitInput) error {
		r.mu.Lock()
		r.rebootWaits = append(r.rebootWaits, in)
		r.mu.Unlock()
		return r.step(ctx, "waitReboot")
	})
	env.OnActivity(a.DropRebootJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, job activities.JobRef) error {
		return r.step(ctx, "dropReboot")
	})
	env.OnActivity(a.MarkNodeDone, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.MarkNodeInput) error {
		return r.step(ctx, "onSuccess")
	})
	r.checkEnd = activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}
}

// fullInput is a node with every step of issue 33: a blocking-Pods gate, drain, a reboot
// (when), health, a check Job, a soak and onSuccess.
func fullInput(when, onFailure string) NodeRolloutInput {
	in := nodeInput()
	req := api.RolloutRequest{
		Maintenance: &api.Maintenance{Drain: &api.Drain{Timeout: "20s"}, Health: &api.HealthGate{Timeout: "1m"}, Soak: "5s", OnFailure: onFailure,
			Reboot:    &api.Reboot{When: when, JobTemplate: "reboot", Timeout: "2m"},
			OnSuccess: &api.OnSuccess{Labels: map[string]string{"gpu-driver": "550.54"}, RemoveTaints: []string{"example.com/driver-not-ready"}}},
		Gates: &api.Gates{BlockingPods: &api.BlockingPodsGate{Selector: "app=training", Timeout: "1m"}, CheckJob: &api.CheckJobGate{JobTemplate: "check", Timeout: "1m"}},
	}
	in.Maintenance = req.Settings().Maintenance
	in.Maintenance.Reboot.TemplateHash, in.Maintenance.CheckJob.TemplateHash = "reboot-hash", "check-hash"
	return in
}

// fullSteps is the order of a full request's steps: the gate before the cordon, the reboot
// after the Job's success is recorded, the check between health and soak, onSuccess before
// the uncordon. A step Job is deleted right after its step.
var fullSteps = []string{"blockingPods", "cordon", "drain", "create", "wait", "finalize:succeeded",
	"bootID", "create:reboot", "waitReboot", "dropReboot", "health", "create:check", "checkWait", "delete", "soak", "onSuccess", "uncordon", "record:succeeded"}

func TestFullRequestStepOrder(t *testing.T) {
	r := newMaintenanceRun(t)
	res, err := r.run(fullInput(api.RebootAlways, ""))
	require.NoError(t, err)
	require.Equal(t, api.OutcomeSucceeded, res.Outcome)
	require.Equal(t, fullSteps, r.calls)
	require.Len(t, r.rebootWaits, 1)
	require.Equal(t, "boot-1", r.rebootWaits[0].BootID, "the wait leaves the boot read before the reboot Job")
	require.Equal(t, map[string]string{"Ready": "True"}, r.rebootWaits[0].Conditions)
}

// TestRebootIfRequested: with when: ifRequested the node reboots only when its Job said
// reboot-required.
func TestRebootIfRequested(t *testing.T) {
	r := newMaintenanceRun(t)
	_, err := r.run(fullInput(api.RebootIfRequested, ""))
	require.NoError(t, err)
	require.Equal(t, slices.DeleteFunc(slices.Clone(fullSteps), func(s string) bool {
		return s == "bootID" || s == "create:reboot" || s == "waitReboot" || s == "dropReboot"
	}), r.calls, "not asked: no reboot")

	r = newMaintenanceRun(t)
	r.rebootRequested = true
	_, err = r.run(fullInput(api.RebootIfRequested, ""))
	require.NoError(t, err)
	require.Equal(t, fullSteps, r.calls, "asked: the reboot")
}

// TestRebootResumesAfterACrash: a worker that dies before the reboot Job (reading the boot
// ID), while creating it, or while waiting for the node resumes at that step, with the boot ID
// read before the reboot Job was made.
func TestRebootResumesAfterACrash(t *testing.T) {
	for _, step := range []string{"bootID", "create:reboot", "waitReboot", "dropReboot", "health"} {
		t.Run(step, func(t *testing.T) {
			r := newMaintenanceRun(t)
			r.crashes[step] = 1
			res, err := r.run(fullInput(api.RebootAlways, ""))
			require.NoError(t, err)
			require.Equal(t, api.OutcomeSucceeded, res.Outcome)
			i := slices.Index(fullSteps, step)
			require.Equal(t, slices.Concat(fullSteps[:i+1], fullSteps[i:]), r.calls)
			for _, w := range r.rebootWaits {
				require.Equal(t, "boot-1", w.BootID)
			}
		})
	}
}

// TestRebootBootIDIsInTheHistoryBeforeTheRebootJob: the boot ID is read by a regular activity,
// whose result the history holds before the reboot Job's create is scheduled; a local
// activity's would be lost with a crashed workflow task and read again after the reboot.
func TestRebootBootIDIsInTheHistoryBeforeTheRebootJob(t *testing.T) {
	r := newMaintenanceRun(t)
	rec := &activityTimeouts{opts: map[string][]workflow.ActivityOptions{}}
	intercept(r.env, rec.interceptor())
	_, err := r.run(fullInput(api.RebootAlways, ""))
	require.NoError(t, err)
	require.Len(t, rec.opts["ReadBootID"], 1, "ReadBootID runs as a regular activity")
	require.Len(t, rec.opts["CreateStepJob"], 2, "the reboot and check Jobs are created by regular activities")
	require.Positive(t, rec.opts["WaitReboot"][0].HeartbeatTimeout, "the reboot wait heartbeats")
}

// TestAbortDuringTheRebootWait: the wait stops, the reboot Job goes, the Job's recorded success
// is replaced by the abort, and the cordon stays or goes as onFailure says.
func TestAbortDuringTheRebootWait(t *testing.T) {
	for _, onFailure := range []string{api.OnFailureKeepCordoned, api.OnFailureUncordon} {
		t.Run(onFailure, func(t *testing.T) {
			r := newMaintenanceRun(t)
			r.block = "waitReboot"
			r.env.RegisterDelayedCallback(r.env.CancelWorkflow, time.Second)
			res, err := r.run(fullInput(api.RebootAlways, onFailure))
			require.True(t, temporal.IsCanceledError(err), "%v", err)
			require.Equal(t, api.OutcomeAborted, res.Outcome)
			want := slices.Concat(fullSteps[:slices.Index(fullSteps, "dropReboot")+1])
			if onFailure == api.OnFailureUncordon {
				want = append(want, "uncordon")
			}
			want = append(want, "finalize:aborted")
			require.Equal(t, want, r.calls)
		})
	}
}

// TestRebootTimeoutKeepsTheNodeCordoned: a node that does not come back is rebootTimedOut,
// recorded on it, its reboot Job deleted, and kept cordoned (the default onFailure).
func TestRebootTimeoutKeepsTheNodeCordoned(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["waitReboot"] = temporal.NewNonRetryableApplicationError("node node-a did not come back from its reboot", api.ErrRebootTimedOut, nil)
	res, err := r.run(fullInput(api.RebootAlways, ""))
	requireNodeFailed(t, r.env)
	require.Error(t, err)
	require.Equal(t, api.OutcomeRebootTimedOut, res.Outcome)
	require.Equal(t, api.ErrRebootTimedOut, res.Reason)
	want := append(slices.Clone(fullSteps[:slices.Index(fullSteps, "dropReboot")+1]), "finalize:rebootTimedOut")
	require.Equal(t, want, r.calls)
}

// TestCheckJobFailureFailsTheNode: a check Job that fails makes the node checkFailed, after
// its Job's success was recorded; no soak, no onSuccess, kept cordoned.
func TestCheckJobFailureFailsTheNode(t *testing.T) {
	r := newMaintenanceRun(t)
	r.checkEnd = activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}
	res, err := r.run(fullInput(api.RebootAlways, ""))
	require.Error(t, err)
	requireNodeFailed(t, r.env)
	require.Equal(t, api.OutcomeCheckFailed, res.Outcome)
	require.Equal(t, api.ErrCheckFailed, res.Reason)
	require.Contains(t, res.Message, "BackoffLimitExceeded")
	want := append(slices.Clone(fullSteps[:slices.Index(fullSteps, "delete")+1]), "finalize:checkFailed")
	require.Equal(t, want, r.calls)
}

// TestBlockingPodsTimeoutBlocksTheNode: Pods that still run when the gate's timeout passes
// leave the node blocked, with nothing done to it (no cordon, no Job) but the outcome recorded.
func TestBlockingPodsTimeoutBlocksTheNode(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["blockingPods"] = temporal.NewNonRetryableApplicationError("1 Pod(s) matching gates.blockingPods.selector still run", api.ErrBlocked, nil)
	res, err := r.run(fullInput(api.RebootAlways, api.OnFailureUncordon))
	require.Error(t, err)
	require.Equal(t, api.OutcomeBlocked, res.Outcome)
	require.Equal(t, []string{"blockingPods", "finalize:blocked"}, r.calls)
	var c api.Counts
	c.Add(res.Outcome)
	require.Zero(t, c.Failures(), "a blocked node is not charged to the failure budget")
	require.Equal(t, 1, c.Skipped)
}

// TestOnSuccessRefusedFailsTheNode: an onSuccess the policy refuses (it may have changed since
// the start) fails the node, kept cordoned.
func TestOnSuccessRefusedFailsTheNode(t *testing.T) {
	r := newMaintenanceRun(t)
	r.errs["onSuccess"] = temporal.NewNonRetryableApplicationError("policy rule \"forbiddenNodeLabels\" denies", api.ErrPolicyDenied, nil)
	res, err := r.run(fullInput(api.RebootAlways, ""))
	require.Error(t, err)
	require.Equal(t, api.OutcomeFailed, res.Outcome)
	require.Equal(t, api.ErrPolicyDenied, res.Reason)
	require.Equal(t, append(slices.Clone(fullSteps[:slices.Index(fullSteps, "onSuccess")+1]), "finalize:failed"), r.calls)
}

// TestGatesWithoutMaintenance: a request with gates and no maintenance section still runs them
// around its Job, with no cordon.
func TestGatesWithoutMaintenance(t *testing.T) {
	r := newMaintenanceRun(t)
	in := nodeInput()
	in.Maintenance = api.RolloutRequest{Gates: &api.Gates{BlockingPods: &api.BlockingPodsGate{Selector: "app=x"}, CheckJob: &api.CheckJobGate{JobTemplate: "t"}}}.Settings().Maintenance
	_, err := r.run(in)
	require.NoError(t, err)
	require.Equal(t, []string{"blockingPods", "create", "wait", "finalize:succeeded", "create:check", "checkWait", "delete", "record:succeeded"}, r.calls)
}

// TestAbortDuringAStepJobCreateAwaitsTheCreate: an abort while the reboot (or check) Job is
// being created drops the Job by its planned name (dropRebootJob, release). On a Temporal
// server an activity scheduled without WaitForCancellation is reported cancelled to the
// workflow at once, while its attempt runs on: it hears of the cancellation only at its next
// heartbeat (keepAlive beats after 10 s). So DropRebootJob can find no Job and return, and the
// still-running CreateStepJob then creates the reboot Job: the node reboots after the abort
// (after its uncordon, with onFailure uncordon), and the Job, holding our finalizer, outlives
// its node workflow. The test environment never waits for a cancelled activity, so this checks
// what makes the server wait: the creates are scheduled with WaitForCancellation.
func TestAbortDuringAStepJobCreateAwaitsTheCreate(t *testing.T) {
	r := newMaintenanceRun(t)
	rec := &activityTimeouts{opts: map[string][]workflow.ActivityOptions{}}
	intercept(r.env, rec.interceptor())
	r.block = "create:reboot"
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, time.Second)
	res, err := r.run(fullInput(api.RebootAlways, api.OnFailureUncordon))
	require.True(t, temporal.IsCanceledError(err), "%v", err)
	require.Equal(t, api.OutcomeAborted, res.Outcome)
	require.Contains(t, r.calls, "dropReboot", "the planned reboot Job is dropped")
	creates := rec.opts["CreateStepJob"]
	require.Len(t, creates, 1)
	require.True(t, creates[0].WaitForCancellation,
		"%s: an abort drops the planned reboot Job while the create's attempt may still run and create it after the drop", creates[0].Summary)
}
