package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Defaults and limits of the maintenance section.
const (
	maintenanceHeartbeatTimeout = waitHeartbeatTimeout
)

// runMaintained is the node's rollout with maintenance around the Job: cordon → drain → Job →
// health → soak → uncordon. A node that does not succeed, or is aborted, is left as onFailure
// says: keepCordoned keeps our cordon (a half-drained or half-updated node stays out of
// service for someone to look at), uncordon lifts it. A cordon someone else made is never
// lifted.
func (n *nodeSteps) runMaintained(ctx workflow.Context) (api.NodeResult, error) {
	var a *activities.Activities
	m, in := n.in.Maintenance, n.in
	result := api.NodeResult{Node: in.Node, StartedAt: workflow.Now(ctx)}
	// The namespace is the rollout's: its policy rules judge the cordon and the drain, and the
	// cordon knows the drain and the Job that follow, so the policy can refuse them before
	// anything is written (a local activity's input is not recorded: no history changes).
	job := in.jobRequest(workflow.GetInfo(ctx).WorkflowExecution.RunID)
	node := activities.NodeInput{Rollout: in.Rollout, Node: in.Node, Namespace: in.Namespace,
		Drain: m.Drain, PodSelector: m.PodSelector, DeleteEmptyDirData: m.DeleteEmptyDirData, Force: m.Force, Job: &job}
	if err := n.waitBlockingPods(ctx); err != nil {
		return n.maintenanceFailed(ctx, err, result)
	}
	if m.Cordon {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("cordoning node `%s`", in.Node))
		setStep(ctx, api.NodeStepCordon, 0, "")
		// Until the cordon answers, it may have gone through: UncordonNode reads our annotation.
		n.mayHaveCordoned = true
		var c activities.CordonResult
		err := workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "cordon node "+in.Node), a.CordonNode, node).Get(ctx, &c)
		if err != nil {
			return n.maintenanceFailed(ctx, err, result)
		}
		n.mayHaveCordoned = c.WeCordoned
		if !c.WeCordoned {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` was already cordoned by someone else; it stays cordoned", in.Node))
		}
	}
	if m.Drain {
		timeout := time.Duration(m.DrainTimeoutSeconds) * time.Second
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("draining node `%s` (timeout %v)", in.Node, timeout))
		setStep(ctx, api.NodeStepDrain, m.DrainTimeoutSeconds, "")
		drain := activities.DrainInput{Node: in.Node, Namespace: in.Namespace, PodSelector: m.PodSelector, DeleteEmptyDirData: m.DeleteEmptyDirData,
			Force: m.Force, GracePeriodSeconds: m.GracePeriodSeconds, Deadline: workflow.Now(ctx).Add(timeout)}
		err := workflow.ExecuteActivity(withMaintenanceActivity(ctx, timeout, "drain node "+in.Node), a.DrainNode, drain).Get(ctx, nil)
		if err != nil {
			return n.maintenanceFailed(ctx, err, result)
		}
	}
	done, err := n.runJob(ctx)
	done.StartedAt = result.StartedAt
	if err != nil {
		if n.undoes(ctx, err, done) {
			return n.undo(ctx, done, err)
		}
		n.leave(ctx)
		return done, err
	}
	if err := n.rebootIfAsked(ctx); err != nil {
		return n.maintenanceFailed(ctx, err, done)
	}
	// Health, then the check Job (when the request has one), then the soak: the commands of a
	// node without a check Job are those recorded before it existed.
	var health activities.HealthInput
	if m.Health {
		timeout := time.Duration(m.HealthTimeoutSeconds) * time.Second
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting for node `%s` to be healthy (%s, timeout %v)", in.Node, conditionList(m.Conditions), timeout))
		setStep(ctx, api.NodeStepHealth, m.HealthTimeoutSeconds, "")
		health = activities.HealthInput{Node: in.Node, Conditions: m.Conditions, HealthyBy: workflow.Now(ctx).Add(timeout)}
		err = workflow.ExecuteActivity(withHealthActivity(ctx, timeout, "health gate on node "+in.Node), a.CheckNodeHealth, health).Get(ctx, nil)
	}
	if err == nil {
		err = n.runCheckJob(ctx)
	}
	if err == nil && m.Health && m.SoakSeconds > 0 {
		soak := time.Duration(m.SoakSeconds) * time.Second
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("soaking node `%s` for %v", in.Node, soak))
		setStep(ctx, api.NodeStepSoak, m.SoakSeconds, "")
		health.HealthyBy, health.HoldSeconds = workflow.Now(ctx), m.SoakSeconds
		err = workflow.ExecuteActivity(withHealthActivity(ctx, soak, "soak node "+in.Node), a.CheckNodeHealth, health).Get(ctx, nil)
	}
	if err == nil {
		err = n.markDone(ctx)
	}
	if err != nil {
		return n.maintenanceFailed(ctx, err, done)
	}
	if n.mayHaveCordoned {
		if err := n.uncordon(ctx); err != nil {
			if isCancel(ctx, err) && workflow.GetVersion(ctx, versionAbortDuringUncordon, workflow.DefaultVersion, 1) == 1 {
				// An abort, not an API error: the node ends aborted, uncharged, its cordon left
				// as onFailure says and the abort recorded over the Job's success.
				return n.maintenanceFailed(ctx, err, done)
			}
			end := endFromError(err)
			end.Message = "the Job succeeded but the node could not be uncordoned: " + end.Message
			return n.finalize(ctx, nil, end, done)
		}
	}
	if in.RecordNodeEnd {
		// The marker said succeeded since the Job's end; now the node's maintenance has too.
		n.recordOnNode(ctx, activities.JobEnd{Outcome: api.OutcomeSucceeded,
			Message: fmt.Sprintf("Job %s and the node's maintenance succeeded", done.Job)}, "record succeeded")
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s`: **%s**", in.Node, done.Outcome))
	return done, nil
}

// maintenanceFailed ends a node whose maintenance step failed or was aborted: the node is
// left as onFailure says and the outcome recorded on it (replacing the Job's, when health
// failed after it).
func (n *nodeSteps) maintenanceFailed(ctx workflow.Context, err error, result api.NodeResult) (api.NodeResult, error) {
	// A health gate that failed after the Job ran is undone once its outcome is recorded.
	gateFailed := result.Outcome == api.OutcomeSucceeded && n.in.Maintenance.UndoOnFailure && !isCancel(ctx, err)
	if !gateFailed {
		n.leave(ctx)
	}
	if isCancel(ctx, err) {
		jobRecorded := result.Outcome == api.OutcomeSucceeded
		result.Outcome = api.OutcomeAborted
		result.Reason = api.ReasonAborted
		result.FinishedAt = workflow.Now(ctx)
		if jobRecorded && workflow.GetVersion(ctx, versionRecordAbortAfterJob, workflow.DefaultVersion, 1) == 1 {
			n.recordAbort(ctx)
		}
		return result, temporal.NewCanceledError(result)
	}
	end := endFromError(err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case api.ErrDrainTimedOut:
			end.Outcome = api.OutcomeDrainTimedOut
		case api.ErrUnhealthy:
			end.Outcome = api.OutcomeUnhealthy
		case api.ErrRebootTimedOut:
			end.Outcome = api.OutcomeRebootTimedOut
		case api.ErrCheckFailed:
			end.Outcome = api.OutcomeCheckFailed
		case api.ErrBlocked:
			end.Outcome = api.OutcomeBlocked
		}
	}
	done, err := n.finalize(ctx, nil, end, result)
	if gateFailed && n.undoes(ctx, err, done) {
		return n.undo(ctx, done, err)
	}
	if gateFailed {
		n.leave(ctx)
	}
	return done, err
}

// recordAbort replaces the succeeded marker the Job left on the Node with aborted, so a re-run
// covers the node again (it skips only nodes marked succeeded). It runs on a context the abort
// cannot cancel; should it fail for good, the node's result still says aborted.
func (n *nodeSteps) recordAbort(ctx workflow.Context) {
	n.recordOnNode(ctx, activities.JobEnd{Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
		Message: "aborted after the Job succeeded, before the node's rollout finished (health, soak or uncordon)"}, "record aborted")
}

// recordOnNode records the node's outcome (marker and Event) after its Job's, on a context
// an abort cannot cancel; should it fail for good, the node's result still says how it ended.
func (n *nodeSteps) recordOnNode(ctx workflow.Context, end activities.JobEnd, summary string) {
	var a *activities.Activities
	in := n.in
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.ExecuteLocalActivity(withLocalAPIActivity(cleanup, n.writeDeadline(), summary), a.FinalizeJob, activities.FinalizeInput{
		Rollout:      in.Rollout,
		Node:         in.Node,
		TemplateHash: in.TemplateHash,
		End:          end,
		KeepJobs:     in.KeepJobs,
		Requester:    in.Requester,
		RunID:        workflow.GetInfo(ctx).WorkflowExecution.RunID,
		UndoOf:       in.UndoOf,
	}).Get(cleanup, nil)
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s`: its outcome %s could not be recorded on the Node: %v", in.Node, end.Outcome, err))
	}
}

// leave undoes our cordon of a node that did not succeed, when onFailure says so. It runs on a
// context an abort cannot cancel.
func (n *nodeSteps) leave(ctx workflow.Context) {
	m := n.in.Maintenance
	if !n.mayHaveCordoned {
		return
	}
	if !m.UncordonOnFailure {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` is kept cordoned (maintenance.onFailure: keepCordoned)", n.in.Node))
		return
	}
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	if err := n.uncordon(cleanup); err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` could not be uncordoned: %v", n.in.Node, err))
	}
}

// uncordon lifts our cordon; a cordon that is not ours stays.
func (n *nodeSteps) uncordon(ctx workflow.Context) error {
	var a *activities.Activities
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("uncordoning node `%s` if we cordoned it", n.in.Node))
	setStep(ctx, api.NodeStepUncordon, 0, "")
	return workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "uncordon node "+n.in.Node), a.UncordonNode,
		activities.NodeInput{Rollout: n.in.Rollout, Node: n.in.Node}).Get(ctx, nil)
}

// withMaintenanceActivity is for the drain and the health checks: they heartbeat, so a crashed
// worker's attempt is noticed within the heartbeat timeout and the next resumes (each enforces
// its own deadline, fixed in its input); an abort waits until the attempt has stopped.
// Heartbeating activities rather than timers: three history events per step however long it
// takes, where polling by timers would add events for every check.
func withMaintenanceActivity(ctx workflow.Context, step time.Duration, summary string) workflow.Context {
	opts := heartbeatingStepOptions(step, summary)
	opts.ScheduleToCloseTimeout = step + writeDeadlineMargin
	return workflow.WithActivityOptions(ctx, opts)
}

// withHealthActivity is withMaintenanceActivity without a ScheduleToClose: the health gate and
// the soak enforce their own deadlines, moved by the time the node could not be read, so an
// API-server outage of any length only delays the node; each attempt resumes from the last's
// heartbeat. (Timeouts are no part of what replay compares, so running histories replay.)
func withHealthActivity(ctx workflow.Context, step time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, heartbeatingStepOptions(step, summary))
}

// heartbeatingStepOptions are the options withMaintenanceActivity and withHealthActivity share.
func heartbeatingStepOptions(step time.Duration, summary string) workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: step + 5*time.Minute,
		HeartbeatTimeout:    maintenanceHeartbeatTimeout,
		RetryPolicy:         apiRetry,
		WaitForCancellation: true,
		Summary:             summary,
	}
}

func conditionList(c map[string]string) string {
	s := ""
	for _, k := range workflow.DeterministicKeys(c) {
		if s != "" {
			s += ", "
		}
		s += k + "=" + c[k]
	}
	return s
}

// maxDrainPlanNodes bounds the nodes one PlanDrain call looks at.
const maxDrainPlanNodes = 100

// planDrains fills in, for a dry run with a drain, the Pods each node's drain would evict and
// the PodDisruptionBudgets that would block it.
func planDrains(ctx workflow.Context, nm *api.NodeMaintenance, planned []api.PlannedNode) error {
	if nm == nil || !nm.Drain {
		return nil
	}
	var a *activities.Activities
	var names []string
	at := map[string]int{}
	for i, p := range planned {
		if p.Skip == "" {
			names = append(names, p.Node)
			at[p.Node] = i
		}
	}
	for len(names) > 0 {
		batch := names[:min(len(names), maxDrainPlanNodes)]
		names = names[len(batch):]
		var plans []api.DrainPlan
		err := workflow.ExecuteActivity(withAPIActivity(ctx, fmt.Sprintf("plan the drain of %d nodes", len(batch))), a.PlanDrain,
			activities.DrainPlanInput{Nodes: batch, PodSelector: nm.PodSelector, DeleteEmptyDirData: nm.DeleteEmptyDirData, Force: nm.Force}).Get(ctx, &plans)
		if err != nil {
			return asWorkflowError(err)
		}
		for _, p := range plans {
			plan := p
			planned[at[p.Node]].Drain = &plan
		}
	}
	return nil
}
