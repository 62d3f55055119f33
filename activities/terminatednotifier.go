package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/noderollout/noderollout/api"
)

// TerminatedNodeNotifier tells a rollout of a node workflow it was handed in flight at a
// continue-as-new and that someone then terminated (the UI's Terminate). A terminated workflow
// sends no word, and the run that started it, the only one Temporal tells, has continued as
// new: the current run would find out only at its busy-node recheck, 10 minutes and more later,
// with the node holding its slot meanwhile. Every Every the notifier lists this task queue's
// node workflows terminated since its last look (visibility: no Temporal action), and for each
// whose starting run has continued as new it signals the rollout the node's word, with the
// result the rollout's recheck would give (failed, NodeWorkflowTerminated). The rollout takes a
// word only for a node it was handed, in the run named (handedInEnded); several workers send
// the same word harmlessly.
type TerminatedNodeNotifier struct {
	Temporal  TerminatedNodeClient
	TaskQueue string
	// NodeOfWorkflowID names the node of a node workflow ID of this worker's cluster.
	NodeOfWorkflowID func(id string) (string, bool)
	// Every spaces the looks (default 30 s); LookBack is how far the first look reaches
	// (default 2 h, the longest busy-node recheck): terminations while no worker ran.
	Every, LookBack time.Duration
	Logger          *slog.Logger
	Now             func() time.Time

	told map[string]bool // node workflow runs whose rollout has had the word
}

// TerminatedNodeClient is what TerminatedNodeNotifier asks of Temporal (the client does it).
type TerminatedNodeClient interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// visibilityLag is how far each look reaches back before the last one began: a close is
// listed a moment after it happens.
const visibilityLag = time.Minute

// Run looks until ctx ends. A look that fails is retried at the next tick from where the
// last good one began, so nothing closed meanwhile is missed.
func (n *TerminatedNodeNotifier) Run(ctx context.Context) {
	if n.Every <= 0 {
		n.Every = 30 * time.Second
	}
	if n.LookBack <= 0 {
		n.LookBack = 2 * time.Hour
	}
	if n.Now == nil {
		n.Now = time.Now
	}
	since := n.Now().Add(-n.LookBack)
	tick := time.NewTicker(n.Every)
	defer tick.Stop()
	for {
		began := n.Now()
		if err := n.Look(ctx, since); err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.As(err, new(*serviceerror.PermissionDenied)) {
				n.Logger.Warn("not looking for terminated node workflows: Temporal refuses this worker visibility; rollouts find them at their busy-node recheck", "error", err)
				return
			}
			n.Logger.Warn("could not look for terminated node workflows; rollouts find them at their busy-node recheck", "error", err)
		} else {
			since = began.Add(-visibilityLag)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Look tells the rollouts of node workflows terminated since since.
func (n *TerminatedNodeNotifier) Look(ctx context.Context, since time.Time) error {
	if n.told == nil {
		n.told = map[string]bool{}
	}
	if n.Logger == nil {
		n.Logger = slog.Default()
	}
	types := make([]string, len(api.NodeWorkflowTypes))
	for i, t := range api.NodeWorkflowTypes {
		types[i] = "'" + t + "'"
	}
	query := fmt.Sprintf("WorkflowType IN (%s) AND ExecutionStatus = 'Terminated' AND TaskQueue = '%s' AND CloseTime >= '%s'",
		strings.Join(types, ", "), n.TaskQueue, since.UTC().Format(time.RFC3339Nano))
	var token []byte
	for {
		resp, err := n.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("listing terminated node workflows: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			if err := n.tell(ctx, e); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// tell signals the node's word to its rollout, if the run that started the node has continued
// as new: a run still open hears of its child's termination from Temporal, and one that
// ended another way handed nothing over.
func (n *TerminatedNodeNotifier) tell(ctx context.Context, e *workflowpb.WorkflowExecutionInfo) error {
	id, runID := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
	node, ok := n.NodeOfWorkflowID(id)
	// No node name holds a colon: one here is another cluster's qualified ID.
	if !ok || strings.Contains(node, ":") || n.told[runID] {
		return nil
	}
	parent := e.GetParentExecution()
	if parent == nil {
		// Not every visibility store lists the parent: ask the workflow itself.
		d, err := n.Temporal.DescribeWorkflowExecution(ctx, id, runID)
		if errors.As(err, new(*serviceerror.NotFound)) {
			n.told[runID] = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("describing node workflow %s: %w", id, err)
		}
		parent = d.GetWorkflowExecutionInfo().GetParentExecution()
	}
	if parent == nil {
		n.told[runID] = true // started by hand: no rollout waits for it
		return nil
	}
	d, err := n.Temporal.DescribeWorkflowExecution(ctx, parent.GetWorkflowId(), parent.GetRunId())
	if errors.As(err, new(*serviceerror.NotFound)) {
		n.told[runID] = true // past its retention: long ended
		return nil
	}
	if err != nil {
		return fmt.Errorf("describing rollout %s run %s: %w", parent.GetWorkflowId(), parent.GetRunId(), err)
	}
	if status := d.GetWorkflowExecutionInfo().GetStatus(); status != enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		if status != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			n.told[runID] = true
		}
		return nil
	}
	word := TerminatedNodeWord(node, runID)
	err = n.Temporal.SignalWorkflow(ctx, parent.GetWorkflowId(), "", api.SignalNodeFree, word)
	if errors.As(err, new(*serviceerror.NotFound)) {
		n.told[runID] = true // the rollout has ended: it waits for nothing
		return nil
	}
	if err != nil {
		// The look fails and the next one, from the same point, tries again.
		return fmt.Errorf("telling rollout %s of node %s: %w", parent.GetWorkflowId(), node, err)
	}
	n.told[runID] = true
	n.Logger.Info("told a rollout that a node workflow it was handed was terminated", "rollout", parent.GetWorkflowId(), "node", node, "runID", runID)
	return nil
}

// TerminatedNodeWord is the word sent for a terminated node workflow: the result the rollout's
// own recheck settles such a node with (workflows' handedInLost).
func TerminatedNodeWord(node, runID string) api.NodeFreed {
	return api.NodeFreed{Node: node, RunID: runID, Result: &api.NodeResult{Node: node, Outcome: api.OutcomeFailed,
		Reason: api.ReasonNodeWorkflowTerminated, Message: "the node's workflow, handed over in flight at a continue-as-new, ended without telling the rollout: it was terminated, so none of its clean-up ran (its Job may still run, a cordon stays)"}}
}
