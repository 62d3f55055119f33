package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// waitBlockingPods holds the node, before anything is done to it, while Pods matching
// gates.blockingPods.selector run on it. It is a step of the node workflow, not a rule of the
// admission point: the rollout decides from its own state which node starts, while this needs
// the node's Pods, read while waiting; so a waiting node holds its parallelism slot, as a
// drain does. One heartbeating activity polls, so the wait costs three history events however
// long it is.
func (n *nodeSteps) waitBlockingPods(ctx workflow.Context) error {
	b := n.in.Maintenance.BlockingPods
	if b == nil {
		return nil
	}
	var a *activities.Activities
	timeout := time.Duration(b.TimeoutSeconds) * time.Second
	setStep(ctx, api.NodeStepBlockingPods, b.TimeoutSeconds, "")
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` waits while Pods matching `%s` run on it (timeout %v)", n.in.Node, b.Selector, timeout))
	return workflow.ExecuteActivity(withHealthActivity(ctx, timeout, "wait for blocking Pods to leave node "+n.in.Node), a.WaitBlockingPods, activities.BlockingPodsInput{
		Node: n.in.Node, Selector: b.Selector, FreeBy: workflow.Now(ctx).Add(timeout),
	}).Get(ctx, nil)
}

// runCheckJob runs gates.checkJob's Job on the node after its Job (and reboot, health): a Job
// that does not succeed fails the node with CheckFailed. The check Job is deleted once it ended
// (its outcome is in the node's result).
func (n *nodeSteps) runCheckJob(ctx workflow.Context) error {
	c := n.in.Maintenance.CheckJob
	if c == nil {
		return nil
	}
	var a *activities.Activities
	in := n.in
	runID := workflow.GetInfo(ctx).WorkflowExecution.RunID
	planned := activities.JobRef{Namespace: in.Namespace, Name: activities.StepJobName(in.Rollout, in.Node, runID, activities.StepCheck), Node: in.Node, RunID: runID}
	setStep(ctx, api.NodeStepCheckJob, c.TimeoutSeconds, planned.Namespace+"/"+planned.Name)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("check Job `%s/%s` running on node `%s`", planned.Namespace, planned.Name, in.Node))
	job, err := createStepJob(ctx, "create the check Job "+planned.Name, activities.StepJobRequest{
		JobRequest: activities.JobRequest{Rollout: in.Rollout, Namespace: in.Namespace, Node: in.Node, RunID: runID, TemplateHash: c.TemplateHash,
			Owner: in.Owner, JobTimeoutSeconds: c.TimeoutSeconds, TTLSecondsAfterFinished: in.JobTTLSeconds, Requester: in.Requester},
		Step: activities.StepCheck,
	})
	if err != nil {
		if createMayHaveHappened(err) {
			release(ctx, planned, "the check Job's create failed")
		}
		return err
	}
	var end activities.JobEnd
	err = workflow.ExecuteActivity(withWaitActivity(ctx, time.Duration(c.TimeoutSeconds)*time.Second, "wait for check Job "+job.Name), a.WaitJob,
		activities.WaitJobInput{Job: job, TimeoutSeconds: c.TimeoutSeconds}).Get(ctx, &end)
	release(ctx, job, "the check ended")
	if err != nil {
		return err
	}
	if end.Outcome != api.OutcomeSucceeded {
		msg := fmt.Sprintf("check Job %s/%s on node %s ended %s", job.Namespace, job.Name, in.Node, end.Outcome)
		if end.Reason != "" {
			msg += " (" + end.Reason + ")"
		}
		if end.Message != "" {
			msg += ": " + end.Message
		}
		return temporal.NewNonRetryableApplicationError(msg, api.ErrCheckFailed, nil)
	}
	return nil
}
