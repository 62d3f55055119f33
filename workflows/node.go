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

// NodeRolloutInput is everything one node's rollout needs; the parent fills it from the request.
type NodeRolloutInput struct {
	Rollout   string `json:"rollout"`
	Namespace string `json:"namespace"`
	// Node is empty in a NodeRolloutV5's input: its workflow ID names the node.
	Node string `json:"node,omitempty"`
	// Template is set only by parents from before templates were stored by hash.
	Template          string        `json:"template,omitempty"`
	TemplateHash      string        `json:"templateHash"`
	Owner             *api.OwnerRef `json:"owner,omitempty"`
	JobTimeoutSeconds int64         `json:"jobTimeoutSeconds"`
	JobTTLSeconds     int32         `json:"jobTTLSeconds"`
	KeepJobs          api.KeepJobs  `json:"keepJobs"`
	Requester         string        `json:"requester,omitempty"`
	// Maintenance is the request's maintenance section, nil when it has none.
	Maintenance *api.NodeMaintenance `json:"maintenance,omitempty"`
	// WatchSeconds, when set, is how long the node first watches its Job from a local activity
	// in its first workflow task (see nodeWatchSeconds). Only NodeRolloutV2 nodes have it.
	WatchSeconds int64 `json:"watchSeconds,omitempty"`
	// UndoTemplateHash is the stored undo template (maintenance.onFailure undo); UndoOf, on a
	// node of an undo rollout, the rollout it undoes (undo.go).
	UndoTemplateHash string `json:"undoTemplateHash,omitempty"`
	UndoOf           string `json:"undoOf,omitempty"`
	// TellWhenFree, when set, is the rollout's workflow ID, told when this node workflow ends as
	// if it had asked with SignalNotifyWhenFree: a child that may outlive its run learns it at
	// its start (versionHandOverInFlight 2), so its run hands it over without asking it.
	TellWhenFree string `json:"tellWhenFree,omitempty"`
	// RecordNodeEnd: a maintained node records its own success once its maintenance ends (its
	// Job's was recorded at the Job's end). Set by every rollout since; a history recorded
	// before has no such input and makes no such command, so no version marker is needed (it
	// would cost every maintained node an event and a search-attribute upsert).
	RecordNodeEnd bool `json:"recordNodeEnd,omitempty"`
}

// jobRequest is the node's Job as CreateJob makes it: the part every node workflow type sends
// alike (the legacy one sends no more).
func (in NodeRolloutInput) jobRequest(runID string) activities.JobRequest {
	return activities.JobRequest{
		Rollout:                 in.Rollout,
		Namespace:               in.Namespace,
		Node:                    in.Node,
		RunID:                   runID,
		Template:                in.Template,
		TemplateHash:            in.TemplateHash,
		Owner:                   in.Owner,
		JobTimeoutSeconds:       in.JobTimeoutSeconds,
		TTLSecondsAfterFinished: in.JobTTLSeconds,
	}
}

// finalizeInput is what FinalizeJob needs to record the node's outcome and tidy its Job: the
// part every node workflow type sends alike (the legacy one sends no more).
func (in NodeRolloutInput) finalizeInput(job *activities.JobRef, end activities.JobEnd) activities.FinalizeInput {
	return activities.FinalizeInput{
		Rollout:      in.Rollout,
		Node:         in.Node,
		TemplateHash: in.TemplateHash,
		Job:          job,
		End:          end,
		KeepJobs:     in.KeepJobs,
	}
}

// NodeRollout creates the node's Job, waits for it to end and finalizes it. Its workflow ID is
// per node, so two rollouts never run Jobs on one node at once: the workflow is the node's
// lock, and it ends only when no Pod of a Job it created can still run. A node that does not
// succeed fails this workflow with ErrNodeFailed and the NodeResult as details, so the UI shows
// it red. Rollouts that found the node busy are told when it ends.
func NodeRollout(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return OnCluster{}.NodeRollout(ctx, in)
}

// NodeRollout is NodeRollout as the cluster's worker runs it.
func (c OnCluster) NodeRollout(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	if err := c.checkLineage(ctx, in); err != nil {
		return api.NodeResult{}, err
	}
	if workflow.GetVersion(ctx, versionFieldGuarantees, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return nodeRolloutBeforeGuarantees(ctx, in)
	}
	return runNode(ctx, in, false)
}

// NodeRolloutV2 is NodeRollout as parents from versionNodeV2 on start it. Its own type stands
// in for the version marker, which would cost every node a marker, a search-attribute upsert
// and a visibility update; and a worker from before it, which cannot run it, fails its
// workflow task instead of running old code on a new node, so the task goes to a newer worker
// during a rolling update.
func NodeRolloutV2(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return OnCluster{}.NodeRolloutV2(ctx, in)
}

// NodeRolloutV2 is NodeRolloutV2 as the cluster's worker runs it.
func (c OnCluster) NodeRolloutV2(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return c.runChecked(ctx, in, false)
}

// NodeRolloutV3 is NodeRolloutV2 whose watched Job is created, watched and finalized by one
// local activity (RunJob): one marker in its history instead of three. Parents from the second
// version of versionNodeV2 on start it.
func NodeRolloutV3(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return OnCluster{}.NodeRolloutV3(ctx, in)
}

// NodeRolloutV3 is NodeRolloutV3 as the cluster's worker runs it.
func (c OnCluster) NodeRolloutV3(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return c.runChecked(ctx, in, true)
}

// NodeRolloutV4 is NodeRolloutV3 whose Job, once it outlasts RunJob's watch, is awaited without
// heartbeats: the worker's Job informer completes an AwaitJobEnd activity when the Job ends, so
// a Job of any length costs its node the same Temporal actions. Parents from the third version
// of versionNodeV2 on start it.
func NodeRolloutV4(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return OnCluster{}.NodeRolloutV4(ctx, in)
}

// NodeRolloutV4 is NodeRolloutV4 as the cluster's worker runs it.
func (c OnCluster) NodeRolloutV4(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	if err := c.checkLineage(ctx, in); err != nil {
		return api.NodeResult{}, err
	}
	return runNodeSteps(ctx, nodeSteps{in: in, oneStep: true, awaitEnd: true})
}

// NodeRolloutV5 is NodeRolloutV4 with a smaller history, the same steps: it takes its node from
// its workflow ID rather than its input, and its watch from the absence of a maintenance
// section; its RunJob result leaves out the Job reference's parts that its input says
// (activities.JobRef.TrimmedOf), or all of it once the Job is finalized; its RunJob marker has
// no summary; and its result leaves out the node, which its parent knows, and times finer than
// a millisecond. Parents from the fourth version of versionNodeV2 on start it.
func NodeRolloutV5(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	return OnCluster{}.NodeRolloutV5(ctx, in)
}

// NodeRolloutV5 is NodeRolloutV5 as the cluster's worker runs it.
func (c OnCluster) NodeRolloutV5(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	if in.Node == "" {
		in.Node, _ = c.NodeOfWorkflowID(workflow.GetInfo(ctx).WorkflowExecution.ID)
	}
	if in.WatchSeconds == 0 && in.Maintenance == nil {
		in.WatchSeconds = nodeWatchSeconds // what every parent of a V2 to V4 node sent
	}
	if err := c.checkLineage(ctx, in); err != nil {
		return api.NodeResult{}, err
	}
	return runNodeSteps(ctx, nodeSteps{in: in, oneStep: true, awaitEnd: true, compact: true})
}

// runChecked runs the node (runNode) once checkLineage let it.
func (c OnCluster) runChecked(ctx workflow.Context, in NodeRolloutInput, oneStep bool) (api.NodeResult, error) {
	if err := c.checkLineage(ctx, in); err != nil {
		return api.NodeResult{}, err
	}
	return runNode(ctx, in, oneStep)
}

// ErrNotStartedByARollout is the error of a node workflow that a Rollout did not start.
const ErrNotStartedByARollout = api.ErrNotStartedByARollout

// checkLineage refuses a node workflow that a rollout did not start as its child under the
// node's own workflow ID: the ID is the node's lock (one rollout per node at a time), and only
// a Rollout applies the policy's cap, the cluster-wide budget and the pacing before a node
// starts. It makes no command, so it changes no history of a node a rollout started; the
// worker's activities check the parent itself before they touch the cluster.
func (c OnCluster) checkLineage(ctx workflow.Context, in NodeRolloutInput) error {
	info := workflow.GetInfo(ctx)
	want := c.NodeWorkflowID(in.Node)
	switch {
	case info.ParentWorkflowExecution == nil:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s was started directly: node workflows run only as children of a Rollout, which paces them; start a Rollout (workflow type %s) naming node %q instead",
			info.WorkflowType.Name, api.RolloutWorkflow, in.Node), ErrNotStartedByARollout, nil)
	case info.WorkflowExecution.ID != want:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"%s runs under workflow ID %q, not %q: a node's workflow ID is its lock, derived from the node; start a Rollout instead",
			info.WorkflowType.Name, info.WorkflowExecution.ID, want), ErrNotStartedByARollout, nil)
	}
	return nil
}

// runNode is a node's rollout from versionFieldGuarantees on; oneStep runs a watched Job with
// RunJob.
func runNode(ctx workflow.Context, in NodeRolloutInput, oneStep bool) (api.NodeResult, error) {
	return runNodeSteps(ctx, nodeSteps{in: in, oneStep: oneStep})
}

// runNodeSteps runs n and then tells the rollouts that wait for the node.
func runNodeSteps(ctx workflow.Context, n nodeSteps) (api.NodeResult, error) {
	ctx, err := withStepQuery(ctx)
	if err != nil {
		return api.NodeResult{}, err
	}
	waiters := workflow.GetSignalChannel(ctx, SignalNotifyWhenFree)
	in := n.in
	result, err := n.run(ctx)
	ended := carriedFailure(nodeResult(in.Node, err, result)) // without its log tail: a signal stays small
	tellWaiters(ctx, waiters, in.TellWhenFree, api.NodeFreed{Node: in.Node, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID, Result: &ended})
	if n.compact {
		return compactResult(result, err)
	}
	return result, err
}

// compactResult is a NodeRolloutV5's result, or the failure that carries it, as its history
// records it twice (its completion and its parent's copy): without the node, which the parent
// fills in (nodeResult), and with its times to the millisecond.
func compactResult(result api.NodeResult, err error) (api.NodeResult, error) {
	compact := func(r api.NodeResult) api.NodeResult {
		r.Node = ""
		r.StartedAt = r.StartedAt.Truncate(time.Millisecond)
		r.FinishedAt = r.FinishedAt.Truncate(time.Millisecond)
		return r
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == api.ErrNodeFailed && appErr.HasDetails() {
		var carried api.NodeResult
		if appErr.Details(&carried) == nil {
			err = temporal.NewNonRetryableApplicationError(appErr.Message(), api.ErrNodeFailed, nil, compact(carried))
		}
	}
	if err != nil {
		return result, err
	}
	return compact(result), nil
}

// nodeSteps is one NodeRollout from versionFieldGuarantees on.
type nodeSteps struct {
	in NodeRolloutInput
	// mayHaveCordoned: our cordon may be on the node, so it is ours to lift.
	mayHaveCordoned bool
	// oneStep: a watched Job runs as one RunJob local activity (NodeRolloutV3).
	oneStep bool
	// awaitEnd: a Job that outlasts RunJob's watch is awaited with AwaitJobEnd, not WaitJob
	// (NodeRolloutV4).
	awaitEnd bool
	// compact: the RunJob result and the node's result leave out what the history holds
	// already (NodeRolloutV5).
	compact bool
	// abortedInFinalize: an abort cut short the finalize of a Job that succeeded, which may
	// have recorded the success on the Node already.
	abortedInFinalize bool
	// rebootRequested: the node's Job succeeded asking for a reboot (maintenance.reboot).
	rebootRequested bool
}

func (n *nodeSteps) run(ctx workflow.Context) (api.NodeResult, error) {
	// No GetVersion here: only inputs with a maintenance section take the new path, and no
	// history recorded before the section existed has one, so every running history replays
	// the commands it recorded; a marker per child would cost every node history events.
	var result api.NodeResult
	var err error
	if n.in.Maintenance != nil {
		result, err = n.runMaintained(ctx)
	} else {
		result, err = n.runJob(ctx)
	}
	if n.abortedInFinalize && workflow.GetVersion(ctx, versionRecordAbortInFinalize, workflow.DefaultVersion, 1) == 1 {
		// The node ends aborted: so must its marker, or a re-run would skip it.
		n.recordAbort(ctx)
	}
	return result, err
}

// runJob creates the node's Job, waits for it and finalizes it.
func (n *nodeSteps) runJob(ctx workflow.Context) (api.NodeResult, error) {
	var a *activities.Activities
	in := n.in
	runID := workflow.GetInfo(ctx).WorkflowExecution.RunID
	// planned is the Job as the workflow knows it before CreateJob answers: enough to find and
	// delete it, should the create have gone through and its reply been lost.
	req := in.jobRequest(runID)
	planned := activities.PlannedJob(req)
	result := api.NodeResult{Node: in.Node, Job: planned.Name, StartedAt: workflow.Now(ctx)}
	writes := n.writeDeadline()
	req.Requester = in.Requester
	if parent := workflow.GetInfo(ctx).ParentWorkflowExecution; parent != nil {
		req.Parent = &activities.WorkflowRun{ID: parent.ID, RunID: parent.RunID}
	}
	req.FirstTask = workflow.GetInfo(ctx).GetCurrentHistoryLength() <= firstTaskHistoryLength

	var job activities.JobRef
	var run activities.RunJobResult
	var err error
	inOneStep := n.oneStep && in.WatchSeconds > 0
	setStep(ctx, api.NodeStepJob, in.JobTimeoutSeconds, planned.Namespace+"/"+planned.Name)
	if inOneStep {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Job `%s/%s` created and watched on node `%s`", planned.Namespace, planned.Name, in.Node))
		watch := time.Duration(in.WatchSeconds) * time.Second
		summary := "run Job " + planned.Name
		if n.compact {
			summary = "" // the activity's type says as much, and the node's result names the Job
		}
		err = workflow.ExecuteLocalActivity(withLocalWatchActivity(ctx, watch, writes, summary), a.RunJob, activities.RunJobInput{
			Job: req, WatchSeconds: in.WatchSeconds, TimeoutSeconds: in.JobTimeoutSeconds, KeepJobs: in.KeepJobs, UndoOf: in.UndoOf, Trim: n.compact,
		}).Get(ctx, &run)
		job = run.Job
		if n.compact {
			job = job.RestoredFrom(planned)
		}
	} else {
		err = workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, writes, "create Job "+planned.Name), a.CreateJob, req).Get(ctx, &job)
	}
	if err != nil {
		if isCancel(ctx, err) {
			return abort(ctx, planned, result)
		}
		end := endFromError(err)
		if !createMayHaveHappened(err) {
			return n.finalize(ctx, nil, end, result)
		}
		// The create may have made the Job before failing (a lost reply, then a refusal):
		// none of ours may stay behind, and the known name goes on to finalize.
		release(ctx, planned, "the create failed: "+end.Reason)
		return n.finalize(ctx, &planned, end, result)
	}
	result.Job = job.Name
	setStepJob(ctx, job.Namespace+"/"+job.Name)
	if job.Finalized != "" {
		// This run finished the node in a workflow task whose completion was lost, and now runs
		// again from the start: the Node's marker holds the outcome; the Job may be gone.
		end := activities.JobEnd{Outcome: job.Finalized, Reason: api.ReasonRecordedOnNode,
			Message: "outcome read from the Node's marker: this run had finalized the node, but the workflow task that did so could not be recorded"}
		return nodeOutcome(ctx, in.Node, end, activities.FinalizeResult{}, result)
	}
	var end activities.JobEnd
	switch {
	case inOneStep && run.Done:
		return nodeOutcome(ctx, in.Node, run.End, run.Fin, result)
	case inOneStep && !run.Running:
		return n.finalize(ctx, &job, run.End, result) // the Job ended; its finalize failed
	case inOneStep:
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Job `%s/%s` running on node `%s`", job.Namespace, job.Name, in.Node))
		if n.awaitEnd {
			end, err = n.awaitJobEnd(ctx, job)
		} else {
			end, err = n.wait(ctx, job)
		}
	default:
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Job `%s/%s` running on node `%s`", job.Namespace, job.Name, in.Node))
		end, err = n.waitFor(ctx, job)
	}
	if err != nil {
		if isCancel(ctx, err) {
			return abort(ctx, job, result)
		}
		end = endFromError(err)
		// Waiting failed for good (say, Forbidden): the Job may still run, so it goes before
		// the node does.
		release(ctx, job, "waiting for it failed: "+end.Reason)
	}
	return n.finalize(ctx, &job, end, result)
}

// firstTaskHistoryLength is a node's history when its first workflow task starts:
// WorkflowExecutionStarted, WorkflowTaskScheduled, WorkflowTaskStarted. A later task has a
// longer one, at least by the failed or timed-out task before it.
const firstTaskHistoryLength = 3

// waitFor waits until the Job has ended and its Pods are gone. When the parent asked for a
// watch, a local activity watches first, within this workflow task: a Job that ends in that
// time costs the node one workflow task, and an abort still reaches it within a workflow-task
// heartbeat (80 % of nodeTaskTimeout, 12 s). A Job that runs on is left to the heartbeating
// WaitJob activity, so a long Job does not heartbeat the workflow task (three events each).
func (n *nodeSteps) waitFor(ctx workflow.Context, job activities.JobRef) (activities.JobEnd, error) {
	var a *activities.Activities
	wait := activities.WaitJobInput{Job: job, TimeoutSeconds: n.in.JobTimeoutSeconds}
	if n.in.WatchSeconds > 0 {
		var w activities.JobWatch
		watchCtx := withLocalWatchActivity(ctx, time.Duration(n.in.WatchSeconds)*time.Second, n.writeDeadline(), "watch Job "+job.Name)
		err := workflow.ExecuteLocalActivity(watchCtx, a.WatchJob, activities.WatchJobInput{WaitJobInput: wait, ForSeconds: n.in.WatchSeconds}).Get(ctx, &w)
		if err != nil || !w.Running {
			return w.End, err
		}
	}
	return n.wait(ctx, job)
}

// awaitJobEnd waits for the word that the Job ended (AwaitJobEnd, completed by a worker's Job
// informer) or for the Job's deadline, whichever comes first, and then reads the end with a
// local watch, in the workflow task that finalizes: a Job of any length costs the node one
// activity and one workflow task more than a short one. The watch also runs the deadline's
// path (it deletes a Job past its deadline and awaits its Pods), and a notice that came early
// (an interim condition whose Pods outlast the watch) or a wait that could not be set up
// falls back to WaitJob.
func (n *nodeSteps) awaitJobEnd(ctx workflow.Context, job activities.JobRef) (activities.JobEnd, error) {
	var a *activities.Activities
	deadline := job.CreatedAt
	if deadline.IsZero() {
		deadline = workflow.Now(ctx)
	}
	deadline = deadline.Add(time.Duration(n.in.JobTimeoutSeconds) * time.Second)
	awaitCtx := withAwaitEndActivity(ctx, deadline.Sub(workflow.Now(ctx)), "await the end of Job "+job.Name)
	err := workflow.ExecuteActivity(awaitCtx, a.AwaitJobEnd, activities.AwaitJobEndInput{Job: job}).Get(ctx, nil)
	if err != nil && isCancel(ctx, err) {
		return activities.JobEnd{}, err
	}
	// Told, past the deadline, or not awaited at all: the watch finds out which.
	var w activities.JobWatch
	wait := activities.WaitJobInput{Job: job, TimeoutSeconds: n.in.JobTimeoutSeconds}
	watchCtx := withLocalWatchActivity(ctx, nodeWatchSeconds*time.Second, n.writeDeadline(), "read the end of Job "+job.Name)
	err = workflow.ExecuteLocalActivity(watchCtx, a.WatchJob, activities.WatchJobInput{WaitJobInput: wait, ForSeconds: nodeWatchSeconds}).Get(ctx, &w)
	if err != nil || !w.Running {
		return w.End, err
	}
	return n.wait(ctx, job)
}

// wait leaves the whole wait to the heartbeating WaitJob activity.
func (n *nodeSteps) wait(ctx workflow.Context, job activities.JobRef) (activities.JobEnd, error) {
	var a *activities.Activities
	var end activities.JobEnd
	waitCtx := withWaitActivity(ctx, time.Duration(n.in.JobTimeoutSeconds)*time.Second, "wait for Job "+job.Name)
	readReboot := n.in.Maintenance != nil && n.in.Maintenance.Reboot != nil && !n.in.Maintenance.Reboot.Always()
	err := workflow.ExecuteActivity(waitCtx, a.WaitJob, activities.WaitJobInput{Job: job, TimeoutSeconds: n.in.JobTimeoutSeconds, ReadRebootRequest: readReboot}).Get(ctx, &end)
	n.rebootRequested = end.RebootRequested
	return end, err
}

// writeDeadline is how long the node's writes keep retrying: an API server that refuses
// them for any time up to the node's own deadline only delays the node.
func (n *nodeSteps) writeDeadline() time.Duration {
	return time.Duration(n.in.JobTimeoutSeconds)*time.Second + writeDeadlineMargin
}

// finalize records the outcome on the Node, tidies the Job, and turns the outcome into the
// workflow's result or error.
func (n *nodeSteps) finalize(ctx workflow.Context, job *activities.JobRef, end activities.JobEnd, result api.NodeResult) (api.NodeResult, error) {
	var a *activities.Activities
	in := n.in
	var fin activities.FinalizeResult
	setStep(ctx, api.NodeStepFinalize, 0, "")
	finalize := in.finalizeInput(job, end)
	finalize.Requester, finalize.RunID, finalize.UndoOf = in.Requester, workflow.GetInfo(ctx).WorkflowExecution.RunID, in.UndoOf
	finalize.StepsFollow = in.Maintenance != nil && job != nil // the Job's end, not the node's
	err := workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "finalize "+string(end.Outcome)), a.FinalizeJob, finalize).Get(ctx, &fin)
	if err != nil && isCancel(ctx, err) && job != nil {
		n.abortedInFinalize = end.Outcome == api.OutcomeSucceeded
		return abort(ctx, *job, result)
	}
	// A finalize that failed for good (say, Forbidden on the Node) must not hide the Job's outcome.
	if err != nil {
		msg := "finalize failed (" + activities.ReasonForError(err) + "): " + err.Error()
		if end.Message != "" {
			msg = end.Message + "; " + msg
		}
		end.Message = msg
	}
	return nodeOutcome(ctx, in.Node, end, fin, result)
}

// nodeOutcome turns how the Job ended, and what finalize learned, into the workflow's result:
// a succeeded node returns it, any other fails the workflow with ErrNodeFailed and the result
// as details, so the UI shows the node red.
func nodeOutcome(ctx workflow.Context, node string, end activities.JobEnd, fin activities.FinalizeResult, result api.NodeResult) (api.NodeResult, error) {
	result.Outcome = end.Outcome
	result.Reason = end.Reason
	result.Message = end.Message
	result.LogTail = fin.LogTail
	result.ExitCode = fin.ExitCode
	result.TerminationMessage = fin.TerminationMessage
	result.PodReason = fin.PodReason
	result.FinishedAt = workflow.Now(ctx)
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s`: **%s** %s", node, result.Outcome, result.Reason))
	if result.Outcome == api.OutcomeSucceeded {
		return result, nil
	}
	return result, nodeFailed(node, result)
}

// nodeFailed is the error of a node that did not succeed: ErrNodeFailed with the result.
func nodeFailed(node string, result api.NodeResult) error {
	msg := fmt.Sprintf("node %s %s", node, result.Outcome)
	if result.Reason != "" {
		msg += ": " + result.Reason
	}
	if result.PodReason != "" {
		msg += " (Pod: " + result.PodReason + ")"
	}
	if result.Message != "" {
		msg += ": " + result.Message
	}
	msg += undoNote(result)
	return temporal.NewNonRetryableApplicationError(msg, api.ErrNodeFailed, nil, result)
}

// abort deletes the node's Job when the rollout is cancelled and waits for its Pods to go,
// then reports the node as aborted.
func abort(ctx workflow.Context, job activities.JobRef, result api.NodeResult) (api.NodeResult, error) {
	release(ctx, job, "the rollout was aborted")
	result.Outcome = api.OutcomeAborted
	result.Reason = api.ReasonAborted
	return result, temporal.NewCanceledError(result)
}

// release deletes the Job and waits until none of its Pods remains, however long that takes:
// the node is not handed on while a Job of ours may still run there. Even a refusal that
// retrying within one call cannot fix (Forbidden) is tried again, backing off to once every
// releaseMaxBackoff, while the node's details say why it is held. It runs on a context that an
// abort cannot cancel.
func release(ctx workflow.Context, job activities.JobRef, why string) {
	var a *activities.Activities
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	details := fmt.Sprintf("deleting Job `%s/%s` (%s); node `%s` is held until its Pods are gone", job.Namespace, job.Name, why, job.Node)
	workflow.SetCurrentDetails(ctx, details)
	setStep(ctx, api.NodeStepRelease, 0, job.Namespace+"/"+job.Name)
	backoff := releaseBackoff
	for {
		err := workflow.ExecuteActivity(withReleaseActivity(cleanup, "delete Job "+job.Name+" and wait for its Pods"), a.DeleteJob, job).Get(cleanup, nil)
		if err == nil {
			return
		}
		workflow.SetCurrentDetails(ctx, details+"; the last try failed: "+err.Error())
		_ = workflow.Sleep(cleanup, backoff)
		backoff = min(2*backoff, releaseMaxBackoff)
	}
}

// tellWaiters signals every rollout that asked to know when this node frees, and toldAtStart
// (the input's TellWhenFree) if set. It reads the
// requests without blocking: one that arrives after the last read makes the server reject the
// workflow's completion, and the task runs again and reads it. Only the signal's input carries
// the result, which replay does not compare: histories recorded before replay unchanged.
//
// A rollout told the node is free may try it while this workflow still waits for its words to
// be delivered, be refused (the node is still held) and ask again: that request came in after
// the read and before the completion, so it is read again once the words are out
// (versionTellLateWaiters), or that rollout would wait for its recheck, minutes later.
func tellWaiters(ctx workflow.Context, waiters workflow.ReceiveChannel, toldAtStart string, freed api.NodeFreed) {
	notify, _ := workflow.NewDisconnectedContext(ctx)
	told := map[string]bool{}
	var ids []string
	if toldAtStart != "" {
		told[toldAtStart] = true
		ids = append(ids, toldAtStart)
	}
	sent := signalFreed(notify, append(ids, newWaiters(waiters, told)...), freed)
	for len(sent) > 0 {
		for _, f := range sent {
			// A waiter that has ended has nothing to be told.
			_ = f.Get(notify, nil)
		}
		sent = nil
		if late := newWaiters(waiters, told); len(late) > 0 && workflow.GetVersion(notify, versionTellLateWaiters, workflow.DefaultVersion, 1) == 1 {
			sent = signalFreed(notify, late, freed)
		}
	}
}

// newWaiters reads the requests that have come in and returns the workflows not yet told.
func newWaiters(waiters workflow.ReceiveChannel, told map[string]bool) []string {
	var ids []string
	for {
		var w NodeWaiter
		if !waiters.ReceiveAsync(&w) {
			return ids
		}
		if w.WorkflowID != "" && !told[w.WorkflowID] {
			told[w.WorkflowID] = true
			ids = append(ids, w.WorkflowID)
		}
	}
}

func signalFreed(notify workflow.Context, ids []string, freed api.NodeFreed) []workflow.Future {
	sent := make([]workflow.Future, 0, len(ids))
	for _, id := range ids {
		sent = append(sent, workflow.SignalExternalWorkflow(notify, id, "", api.SignalNodeFree, freed))
	}
	return sent
}

// createMayHaveHappened says whether a failed CreateJob may have left a Job of ours: not when
// the node was gone (CreateJob removes what it made), the request could not be rendered or
// its namespace is missing (nothing was sent), or the name belongs to someone else's Job.
func createMayHaveHappened(err error) bool {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		return true
	}
	switch appErr.Type() {
	case api.ErrNodeGone, api.ErrInvalidRequest, api.ErrForeignObject, api.ErrPolicyDenied, api.ErrNotStartedByARollout:
		return false
	}
	return true
}

// endFromError turns an activity's final error into the node's outcome, with a reason word
// from the documented list.
func endFromError(err error) activities.JobEnd {
	end := activities.JobEnd{Outcome: api.OutcomeFailed, Reason: activities.ReasonForError(err), Message: err.Error()}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		end.Message = appErr.Message()
		if appErr.Type() == api.ErrNodeGone {
			end.Outcome = api.OutcomeNodeGone
			end.Reason = api.ReasonNodeDeleted
		}
	}
	return end
}

func isCancel(ctx workflow.Context, err error) bool {
	return temporal.IsCanceledError(err) || ctx.Err() != nil
}
