package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/noderollout/noderollout/api"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// Lineage lets only the node workflows that a running Rollout started write to the cluster.
// Anyone who may start workflows could start a node workflow directly, or schedule these
// activities from a workflow of their own, and so skip what only the Rollout enforces (the
// policy's cap on parallelism, the cluster-wide budget, the pacing). The writing activities
// ask it before their first write; it reads, from Temporal itself, who called: the calling
// workflow must be a node workflow, its parent a running Rollout that lists it among its
// pending children and whose prepared template (its memo) is the one the node carries.
type Lineage struct {
	Temporal client.Client
	// RolloutType and NodeTypes are the workflow type names (package workflows has them).
	RolloutType string
	NodeTypes   []string

	verified sync.Map // node workflow run ID → the templates its parent was found with (prepared)
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
	return l.verify(ctx, templateHash, true)
}

// checkStep is check for a step's Job (reboot, check): its template must be one of the step
// templates the rollout prepared. A rollout whose memo names none is not held against the node,
// as sameTemplate does.
func (l *Lineage) checkStep(ctx context.Context, stepHash string) error {
	if err := l.verify(ctx, "", true); err != nil || l == nil || l.Temporal == nil {
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
func (l *Lineage) checkCleanUp(ctx context.Context, templateHash string) error {
	return l.verify(ctx, templateHash, false)
}

func (l *Lineage) verify(ctx context.Context, templateHash string, strict bool) error {
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
	self, err := l.Temporal.DescribeWorkflow(ctx, caller.ID, caller.RunID)
	if err != nil {
		return fmt.Errorf("describing workflow %s to check it was started by a rollout: %w", caller.ID, err)
	}
	parent := self.RawResponse.GetWorkflowExecutionInfo().GetParentExecution()
	if parent == nil {
		return refuse("it has no parent")
	}
	d, err := l.Temporal.DescribeWorkflow(ctx, parent.GetWorkflowId(), parent.GetRunId())
	if err != nil {
		return fmt.Errorf("describing rollout %s to check it started workflow %s: %w", parent.GetWorkflowId(), caller.ID, err)
	}
	p := d.RawResponse.GetWorkflowExecutionInfo()
	switch {
	case p.GetType().GetName() != l.RolloutType:
		return refuse("its parent %s is a %s, not a %s", parent.GetWorkflowId(), p.GetType().GetName(), l.RolloutType)
	case !strict:
		return nil
	case p.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		// A run that continues as new hands its children in flight to the next run, whose
		// children they are not: the rollout itself must still run.
		if err := l.stillRuns(ctx, parent.GetWorkflowId(), refuse); err != nil {
			return err
		}
	case p.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return refuse("its parent %s is %s", parent.GetWorkflowId(), p.GetStatus())
	default:
		listed := slices.ContainsFunc(d.RawResponse.GetPendingChildren(), func(c *workflowpb.PendingChildExecutionInfo) bool {
			return c.GetWorkflowId() == caller.ID && c.GetRunId() == caller.RunID
		})
		if !listed {
			return refuse("its parent %s does not list it among its running children", parent.GetWorkflowId())
		}
	}
	// A converging rollout also prepared its onDeselect Job (deselectHash), and a node with
	// maintenance.onFailure undo runs its rollout's undo template (undoTemplateHash).
	var rollout prepared
	for _, key := range []string{"templateHash", "deselectHash", "undoTemplateHash"} {
		var h string
		if f := p.GetMemo().GetFields()[key]; f != nil {
			_ = json.Unmarshal(f.GetData(), &h)
		}
		rollout.hashes = append(rollout.hashes, h)
	}
	if f := p.GetMemo().GetFields()["stepTemplateHashes"]; f != nil {
		_ = json.Unmarshal(f.GetData(), &rollout.steps)
	}
	l.verified.Store(caller.RunID, rollout)
	return l.sameTemplate(caller.ID, rollout.hashes, templateHash)
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
