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

	verified sync.Map // node workflow run ID → template hash its parent was found with
}

// check verifies the calling workflow's lineage before a disruptive write (a Job, a cordon, a
// drain); templateHash, when not empty, must be its rollout's. A node run is looked up once:
// later calls of the same run are answered from memory. Temporal unreachable is a passing
// error, retried.
func (l *Lineage) check(ctx context.Context, templateHash string) error {
	return l.verify(ctx, templateHash, true)
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
	if h, ok := l.verified.Load(caller.RunID); ok {
		return l.sameTemplate(caller.ID, h.(string), templateHash)
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
	case p.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return refuse("its parent %s is %s", parent.GetWorkflowId(), p.GetStatus())
	}
	listed := slices.ContainsFunc(d.RawResponse.GetPendingChildren(), func(c *workflowpb.PendingChildExecutionInfo) bool {
		return c.GetWorkflowId() == caller.ID && c.GetRunId() == caller.RunID
	})
	if !listed {
		return refuse("its parent %s does not list it among its running children", parent.GetWorkflowId())
	}
	var rolloutHash string
	if f := p.GetMemo().GetFields()["templateHash"]; f != nil {
		_ = json.Unmarshal(f.GetData(), &rolloutHash)
	}
	l.verified.Store(caller.RunID, rolloutHash)
	return l.sameTemplate(caller.ID, rolloutHash, templateHash)
}

// sameTemplate refuses a node that carries another template than its rollout prepared. A
// rollout whose memo names no template (none prepared yet, or a memo a run did not carry) is
// not held against the node: CreateJob still runs only a template under its own hash.
func (l *Lineage) sameTemplate(node, rolloutHash, templateHash string) error {
	if templateHash == "" || rolloutHash == "" || rolloutHash == templateHash {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"workflow %s carries template %s, but its rollout prepared %s: a node runs only its rollout's template",
		node, templateHash, rolloutHash), api.ErrNotStartedByARollout, nil)
}
