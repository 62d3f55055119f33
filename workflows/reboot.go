package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// rebootIfAsked reboots the node after its Job succeeded, when maintenance.reboot says always
// or the Job asked for it, and waits until the node is back: a new boot ID and its health
// conditions met. Each step is a regular activity, so the history holds its result before the
// next starts: the boot ID before the reboot Job exists (a worker crash after the create
// cannot read the new boot as the old), the Job before the wait (a retried wait resumes with
// the same boot ID and deadline). The reboot Job is deleted however the wait ends.
func (n *nodeSteps) rebootIfAsked(ctx workflow.Context) error {
	r := n.in.Maintenance.Reboot
	if r == nil || (!r.Always() && !n.rebootRequested) {
		return nil
	}
	var a *activities.Activities
	in := n.in
	timeout := time.Duration(r.TimeoutSeconds) * time.Second
	setStep(ctx, api.NodeStepReboot, r.TimeoutSeconds, "")
	why := "maintenance.reboot.when: always"
	if !r.Always() {
		why = "its Job asked for it"
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("rebooting node `%s` (%s; timeout %v)", in.Node, why, timeout))
	var bootID string
	if err := workflow.ExecuteActivity(withAPIActivity(ctx, "read the boot ID of node "+in.Node), a.ReadBootID, in.Node).Get(ctx, &bootID); err != nil {
		return err
	}
	backBy := workflow.Now(ctx).Add(timeout)
	runID := workflow.GetInfo(ctx).WorkflowExecution.RunID
	planned := activities.JobRef{Namespace: in.Namespace, Name: activities.StepJobName(in.Rollout, in.Node, runID, activities.StepReboot), Node: in.Node, RunID: runID}
	job, err := createStepJob(ctx, "create the reboot Job "+planned.Name, activities.StepJobRequest{
		JobRequest: activities.JobRequest{Rollout: in.Rollout, Namespace: in.Namespace, Node: in.Node, RunID: runID, TemplateHash: r.TemplateHash,
			Owner: in.Owner, JobTimeoutSeconds: r.TimeoutSeconds, TTLSecondsAfterFinished: in.JobTTLSeconds, Requester: in.Requester},
		Step: activities.StepReboot,
	})
	if err != nil {
		if createMayHaveHappened(err) {
			n.dropRebootJob(ctx, planned)
		}
		return err
	}
	setStepJob(ctx, job.Namespace+"/"+job.Name)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` rebooting (Job `%s/%s`); waiting for a new boot ID and %s by %s",
		in.Node, job.Namespace, job.Name, conditionList(n.in.Maintenance.RebootConditions()), backBy.UTC().Format(time.RFC3339)))
	err = workflow.ExecuteActivity(withHealthActivity(ctx, timeout, "wait for node "+in.Node+" to come back"), a.WaitReboot, activities.RebootWaitInput{
		Node: in.Node, BootID: bootID, Conditions: n.in.Maintenance.RebootConditions(), BackBy: backBy, Job: job,
	}).Get(ctx, nil)
	n.dropRebootJob(ctx, job)
	return err
}

// createStepJob creates a reboot or check Job. From versionStepCreateAwaitsAbort on, an abort
// waits until the create's attempt has stopped: the attempt hears of the abort only at its next
// heartbeat, and could otherwise create the Job after the workflow dropped it by name.
func createStepJob(ctx workflow.Context, summary string, req activities.StepJobRequest) (activities.JobRef, error) {
	var a *activities.Activities
	actx := withAPIActivity(ctx, summary)
	if workflow.GetVersion(ctx, versionStepCreateAwaitsAbort, workflow.DefaultVersion, 1) == 1 {
		opts := workflow.GetActivityOptions(actx)
		opts.WaitForCancellation = true
		actx = workflow.WithActivityOptions(ctx, opts)
	}
	var job activities.JobRef
	err := workflow.ExecuteActivity(actx, a.CreateStepJob, req).Get(ctx, &job)
	return job, err
}

// dropRebootJob deletes the reboot Job on a context an abort cannot cancel, trying until it
// is done: a Job of ours must not outlive the node's workflow.
func (n *nodeSteps) dropRebootJob(ctx workflow.Context, job activities.JobRef) {
	var a *activities.Activities
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	backoff := releaseBackoff
	for {
		err := workflow.ExecuteActivity(withReleaseActivity(cleanup, "delete the reboot Job "+job.Name), a.DropRebootJob, job).Get(cleanup, nil)
		if err == nil {
			return
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("deleting the reboot Job `%s/%s` failed, trying again: %v", job.Namespace, job.Name, err))
		_ = workflow.Sleep(cleanup, backoff)
		backoff = min(2*backoff, releaseMaxBackoff)
	}
}
