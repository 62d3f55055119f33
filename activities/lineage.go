package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/noderollout/noderollout/api"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Lineage lets only the node workflows that a running Rollout started write to the cluster.
// Anyone who may start workflows could start a node workflow directly, or schedule these
// activities from a workflow of their own, and so skip what only the Rollout enforces (the
// policy's cap on parallelism, the cluster-wide budget, the pacing). The writing activities
// ask it before their first write; it reads, from Temporal itself, who called: the calling
// workflow must be a node workflow, its parent a running Rollout whose prepared template (its
// memo) is the one the node carries. The parent is what the server recorded when the node
// started: read from the caller's describe, or, in a local activity, from the caller's own
// history (JobRequest.Parent). A running Rollout has not heard the end of any node it started
// that can still call, so the parent's own list of pending children adds nothing to the check;
// one describe of a rollout run serves all its nodes for a few seconds (rolloutViews).
type Lineage struct {
	Temporal client.Client
	// RolloutType and NodeTypes are the workflow type names (package workflows has them).
	RolloutType string
	NodeTypes   []string

	// Clock is time.Now unless a test sets it.
	Clock func() time.Time

	verified sync.Map // node workflow run ID → the templates its parent was found with (prepared)
	rollouts rolloutViews
}

func (l *Lineage) now() time.Time {
	if l.Clock != nil {
		return l.Clock()
	}
	return time.Now()
}

// prepared are the templates a Rollout prepared, as its memo names them: its own (and its
// onDeselect Job's) and its step Jobs' (the reboot and check Jobs).
type prepared struct {
	hashes []string // its template, then a converging rollout's onDeselect template
	steps  []string
}

// check verifies the calling workflow's lineage before a disruptive write (a Job, a cordon, a
// drain); templateHash, when not empty, must be its rollout's. A node run is looked up once:
// later calls of the same run are answered from memory. Temporal unreachable is a passing
// error, retried.
func (l *Lineage) check(ctx context.Context, templateHash string) error {
	return l.verify(ctx, templateHash, true, nil)
}

// checkJob is check for a node's Job: parent, when the node set it (JobRequest.Parent), spares
// a local activity the describe of its caller.
func (l *Lineage) checkJob(ctx context.Context, templateHash string, parent *WorkflowRun) error {
	return l.verify(ctx, templateHash, true, parent)
}

// checkStep is check for a step's Job (reboot, check): its template must be one of the step
// templates the rollout prepared. A rollout whose memo names none is not held against the node,
// as sameTemplate does.
func (l *Lineage) checkStep(ctx context.Context, stepHash string) error {
	if err := l.verify(ctx, "", true, nil); err != nil || l == nil || l.Temporal == nil {
		return err
	}
	info := activity.GetInfo(ctx)
	p, _ := l.verified.Load(info.WorkflowExecution.RunID)
	steps := p.(prepared).steps
	if len(steps) == 0 || slices.Contains(steps, stepHash) {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"workflow %s asks for a step Job from template %s, which its rollout did not prepare (%v): a node runs only its rollout's templates",
		info.WorkflowExecution.ID, stepHash, steps), api.ErrNotStartedByARollout, nil)
}

// checkCleanUp is check for writes that finish what a node began (its outcome on the Node): a
// node whose rollout was terminated meanwhile must still record it, so the parent need only
// be a Rollout, not a running one that lists the node.
//
// The Rollout itself records the failure of a node whose workflow was terminated (no Job):
// allowed only in its local activity, which runs in this worker, so its caller is this
// worker's own Rollout code and not a workflow elsewhere that schedules activities here.
func (l *Lineage) checkCleanUp(ctx context.Context, templateHash string, job *JobRef) error {
	if info := activity.GetInfo(ctx); l != nil && job == nil && info.IsLocalActivity && info.WorkflowType.Name == l.RolloutType {
		return nil
	}
	return l.verify(ctx, templateHash, false, nil)
}

func (l *Lineage) verify(ctx context.Context, templateHash string, strict bool, known *WorkflowRun) error {
	if l == nil || l.Temporal == nil {
		return nil
	}
	info := activity.GetInfo(ctx)
	caller := info.WorkflowExecution
	if p, ok := l.verified.Load(caller.RunID); ok {
		return l.sameTemplate(caller.ID, p.(prepared).hashes, templateHash)
	}
	refuse := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("workflow %s (%s) may not write to the cluster: ", caller.ID, info.WorkflowType.Name)+
			fmt.Sprintf(format, args...)+"; node workflows run only as the children of a Rollout: start a Rollout instead", api.ErrNotStartedByARollout, nil)
	}
	if !slices.Contains(l.NodeTypes, info.WorkflowType.Name) {
		return refuse("it is not a node workflow")
	}
	parent, err := l.parentOf(ctx, info, known)
	if err != nil {
		return err
	}
	if parent == nil {
		return refuse("it has no parent")
	}
	p, err := l.rollouts.view(ctx, l, *parent)
	if err != nil {
		return fmt.Errorf("describing rollout %s to check it started workflow %s: %w", parent.ID, caller.ID, err)
	}
	switch {
	case p.typ != l.RolloutType:
		return refuse("its parent %s is a %s, not a %s", parent.ID, p.typ, l.RolloutType)
	case !strict:
		return nil
	case p.status == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		// A run that continues as new hands its children in flight to the next run, whose
		// children they are not: the rollout itself must still run.
		if err := l.stillRuns(ctx, parent.ID, refuse); err != nil {
			return err
		}
	case p.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return refuse("its parent %s is %s", parent.ID, p.status)
	}
	l.verified.Store(caller.RunID, p.prepared)
	return l.sameTemplate(caller.ID, p.prepared.hashes, templateHash)
}

// parentOf is the caller's parent: as its node handed it to a local activity (known), else as
// Temporal describes the caller; nil when it has none.
func (l *Lineage) parentOf(ctx context.Context, info activity.Info, known *WorkflowRun) (*WorkflowRun, error) {
	if known != nil && info.IsLocalActivity {
		return known, nil
	}
	caller := info.WorkflowExecution
	self, err := l.Temporal.DescribeWorkflow(ctx, caller.ID, caller.RunID)
	if err != nil {
		return nil, fmt.Errorf("describing workflow %s to check it was started by a rollout: %w", caller.ID, err)
	}
	parent := self.RawResponse.GetWorkflowExecutionInfo().GetParentExecution()
	if parent == nil {
		return nil, nil
	}
	return &WorkflowRun{ID: parent.GetWorkflowId(), RunID: parent.GetRunId()}, nil
}

// describeRollout reads what Lineage checks of a rollout run: its type, status and the
// templates its memo says it prepared.
func (l *Lineage) describeRollout(ctx context.Context, rollout WorkflowRun) (*rolloutView, error) {
	d, err := l.Temporal.DescribeWorkflow(ctx, rollout.ID, rollout.RunID)
	if err != nil {
		return nil, err
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	v := &rolloutView{typ: info.GetType().GetName(), status: info.GetStatus()}
	// A converging rollout also prepared its onDeselect Job (deselectHash), and a node with
	// maintenance.onFailure undo runs its rollout's undo template (undoTemplateHash).
	for _, key := range []string{"templateHash", "deselectHash", "undoTemplateHash"} {
		var h string
		if f := info.GetMemo().GetFields()[key]; f != nil {
			_ = json.Unmarshal(f.GetData(), &h)
		}
		v.prepared.hashes = append(v.prepared.hashes, h)
	}
	if f := info.GetMemo().GetFields()["stepTemplateHashes"]; f != nil {
		_ = json.Unmarshal(f.GetData(), &v.prepared.steps)
	}
	return v, nil
}

// stillRuns checks that the rollout whose run started the caller and continued as new runs on:
// its current run is a running Rollout.
func (l *Lineage) stillRuns(ctx context.Context, rolloutID string, refuse func(string, ...any) error) error {
	d, err := l.Temporal.DescribeWorkflow(ctx, rolloutID, "")
	if err != nil {
		return fmt.Errorf("describing rollout %s to check it still runs: %w", rolloutID, err)
	}
	current := d.RawResponse.GetWorkflowExecutionInfo()
	switch {
	case current.GetType().GetName() != l.RolloutType:
		return refuse("its parent %s continued as new into a %s, not a %s", rolloutID, current.GetType().GetName(), l.RolloutType)
	case current.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return refuse("its parent %s continued as new and its rollout is %s", rolloutID, current.GetStatus())
	}
	return nil
}

// sameTemplate refuses a node that carries another template than its rollout prepared. A
// rollout whose memo names no template (none prepared yet, or a memo a run did not carry) is
// not held against the node: CreateJob still runs only a template under its own hash.
func (l *Lineage) sameTemplate(node string, rolloutHashes []string, templateHash string) error {
	rolloutHash := rolloutHashes[0]
	if templateHash == "" || rolloutHash == "" || slices.Contains(rolloutHashes, templateHash) {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"workflow %s carries template %s, but its rollout prepared %s: a node runs only its rollout's template",
		node, templateHash, rolloutHash), api.ErrNotStartedByARollout, nil)
}
