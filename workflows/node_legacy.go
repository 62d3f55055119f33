package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// This file keeps NodeRollout as it ran before versionFieldGuarantees, unchanged, for the
// children that started under it: their histories must replay exactly. New children never
// come here.

func nodeRolloutBeforeGuarantees(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	var a *activities.Activities
	runID := workflow.GetInfo(ctx).WorkflowExecution.RunID
	jobName := jobspec.LegacyJobName(in.Rollout, in.Node, runID)
	result := api.NodeResult{Node: in.Node, Job: jobName, StartedAt: workflow.Now(ctx)}
	// planned is the Job as far as the workflow knows it before CreateJob answers, enough to
	// delete it by name if the rollout is aborted mid-create.
	planned := activities.JobRef{Namespace: in.Namespace, Name: jobName, Node: in.Node}

	var job activities.JobRef
	err := workflow.ExecuteLocalActivity(withLegacyLocalAPIActivity(ctx, "create Job "+jobName), a.CreateJob, in.jobRequest(runID)).Get(ctx, &job)
	if err != nil {
		if isCancel(ctx, err) {
			return legacyAbort(ctx, planned, result)
		}
		end := legacyEndFromError(err)
		result.Job = ""
		return legacyFinalize(ctx, in, nil, end, result)
	}
	result.Job = job.Name
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("Job `%s/%s` running on node `%s`", job.Namespace, job.Name, in.Node))

	var end activities.JobEnd
	waitCtx := withWaitActivity(ctx, time.Duration(in.JobTimeoutSeconds)*time.Second, "wait for Job "+job.Name)
	err = workflow.ExecuteActivity(waitCtx, a.WaitJob, activities.WaitJobInput{Job: job, TimeoutSeconds: in.JobTimeoutSeconds}).Get(ctx, &end)
	if err != nil {
		if isCancel(ctx, err) {
			return legacyAbort(ctx, job, result)
		}
		end = legacyEndFromError(err)
	}
	return legacyFinalize(ctx, in, &job, end, result)
}

// legacyFinalize records the outcome on the Node, tidies the Job, and turns the outcome into the
// workflow's result or error.
func legacyFinalize(ctx workflow.Context, in NodeRolloutInput, job *activities.JobRef, end activities.JobEnd, result api.NodeResult) (api.NodeResult, error) {
	var a *activities.Activities
	var fin activities.FinalizeResult
	err := workflow.ExecuteLocalActivity(withLegacyLocalAPIActivity(ctx, "finalize "+string(end.Outcome)), a.FinalizeJob, in.finalizeInput(job, end)).Get(ctx, &fin)
	if err != nil && isCancel(ctx, err) && job != nil {
		return legacyAbort(ctx, *job, result)
	}
	// A finalize that failed for good (say, Forbidden on the Node) must not hide the Job's outcome.
	if err != nil && end.Message == "" {
		end.Message = "finalize: " + err.Error()
	}
	return nodeOutcome(ctx, in.Node, end, fin, result)
}

// legacyAbort deletes the node's Job when the rollout is cancelled, then reports the cancellation.
func legacyAbort(ctx workflow.Context, job activities.JobRef, result api.NodeResult) (api.NodeResult, error) {
	var a *activities.Activities
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.ExecuteLocalActivity(withLegacyLocalAPIActivity(cleanup, "delete Job "+job.Name), a.DeleteJob, job).Get(cleanup, nil); err != nil {
		workflow.GetLogger(ctx).Error("deleting the Job of an aborted node failed", "job", job.Name, "error", err)
	}
	result.Reason = api.ReasonAborted
	return result, temporal.NewCanceledError(result)
}

// legacyEndFromError turns an activity's final error into the node's outcome.
func legacyEndFromError(err error) activities.JobEnd {
	end := activities.JobEnd{Outcome: api.OutcomeFailed, Message: err.Error()}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		end.Reason = appErr.Type()
		end.Message = appErr.Message()
		if appErr.Type() == api.ErrNodeGone {
			end.Outcome = api.OutcomeNodeGone
			end.Reason = api.ReasonNodeDeleted
		}
	}
	return end
}
