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

// TerminatedNodeNotifier sends the word a node workflow terminated by hand (the UI's
// Terminate) cannot send. Temporal tells only the run that started it, if that run is open.
// Two kinds of rollout would otherwise find out only at their busy-node recheck, 10 minutes
// and more later: the next run of a rollout that handed the node over in flight at a
// continue-as-new (the node holds its slot meanwhile), and another rollout waiting for the
// node to be free. Every Every the notifier lists this task queue's node workflows terminated
// since its last look (visibility: no Temporal action). For each, it signals the rollout that
// started it, if that run has continued as new, the result its recheck would give (failed,
// NodeWorkflowTerminated), and every other running rollout of the queue a bare word, which wakes
// one waiting for the node. A rollout takes a result only for a node it was handed, in the run
// named (handedInEnded); several workers send the same words harmlessly.
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

	told map[string]time.Time // node workflow runs whose rollouts have had the word → close time
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
		n.told = map[string]time.Time{}
	}
	// A run closed before since is not listed again: forget it, so a worker that runs for
	// months keeps only the last look's window.
	for runID, closed := range n.told {
		if closed.Before(since) {
			delete(n.told, runID)
		}
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
	var rollouts []string // this queue's running rollouts, listed once a look, when needed
	listed := false
	return n.list(ctx, query, func(e *workflowpb.WorkflowExecutionInfo) error {
		id, runID := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
		node, ok := n.NodeOfWorkflowID(id)
		// No node name holds a colon: one here is another cluster's qualified ID.
		if _, told := n.told[runID]; !ok || strings.Contains(node, ":") || told {
			return nil
		}
		rollout, err := n.tellHandedOver(ctx, e, node)
		if err != nil {
			return err
		}
		if !listed {
			if rollouts, err = n.runningRollouts(ctx); err != nil {
				return err
			}
			listed = true
		}
		for _, other := range rollouts {
			if other != rollout {
				if err := n.signal(ctx, other, api.NodeFreed{Node: node, RunID: runID}); err != nil {
					return err
				}
			}
		}
		n.told[runID] = e.GetCloseTime().AsTime()
		return nil
	})
}

// list calls each for every workflow the query lists, page by page.
func (n *TerminatedNodeNotifier) list(ctx context.Context, query string, each func(*workflowpb.WorkflowExecutionInfo) error) error {
	var token []byte
	for {
		resp, err := n.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return fmt.Errorf("listing %q: %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if err := each(e); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// runningRollouts lists the workflow IDs of this task queue's running rollouts: any of them
// may wait for the terminated node's word (a busy node, waitUntilFreed), which would come only
// at its recheck. A bare word (the node and the ended run, no result) wakes such a waiter to
// look at the node again; a rollout not waiting for the node ignores it.
func (n *TerminatedNodeNotifier) runningRollouts(ctx context.Context) ([]string, error) {
	var ids []string
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'", api.RolloutWorkflow, n.TaskQueue)
	err := n.list(ctx, query, func(e *workflowpb.WorkflowExecutionInfo) error {
		ids = append(ids, e.GetExecution().GetWorkflowId())
		return nil
	})
	return ids, err
}

// tellHandedOver signals the node's result to the rollout that started it, if that run has
// continued as new: a run still open hears of its child's termination from Temporal, and one
// that ended another way handed nothing over. It returns that rollout's workflow ID ("" if a
// person started the node workflow).
func (n *TerminatedNodeNotifier) tellHandedOver(ctx context.Context, e *workflowpb.WorkflowExecutionInfo, node string) (string, error) {
	id, runID := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
	parent := e.GetParentExecution()
	if parent == nil {
		// Not every visibility store lists the parent: ask the workflow itself.
		d, err := n.Temporal.DescribeWorkflowExecution(ctx, id, runID)
		if errors.As(err, new(*serviceerror.NotFound)) {
			return "", nil // past its retention
		}
		if err != nil {
			return "", fmt.Errorf("describing node workflow %s: %w", id, err)
		}
		parent = d.GetWorkflowExecutionInfo().GetParentExecution()
	}
	if parent == nil {
		return "", nil
	}
	d, err := n.Temporal.DescribeWorkflowExecution(ctx, parent.GetWorkflowId(), parent.GetRunId())
	if errors.As(err, new(*serviceerror.NotFound)) {
		return parent.GetWorkflowId(), nil // past its retention: long ended
	}
	if err != nil {
		return "", fmt.Errorf("describing rollout %s run %s: %w", parent.GetWorkflowId(), parent.GetRunId(), err)
	}
	if d.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		return parent.GetWorkflowId(), nil
	}
	if err := n.signal(ctx, parent.GetWorkflowId(), TerminatedNodeWord(node, runID)); err != nil {
		return "", err
	}
	n.Logger.Info("told a rollout that a node workflow it was handed was terminated", "rollout", parent.GetWorkflowId(), "node", node, "runID", runID)
	return parent.GetWorkflowId(), nil
}

// signal sends a rollout's current run the node's word. A rollout that has ended waits for
// nothing; any other failure fails the look, and the next one, from the same point, tries
// again.
func (n *TerminatedNodeNotifier) signal(ctx context.Context, rollout string, word api.NodeFreed) error {
	err := n.Temporal.SignalWorkflow(ctx, rollout, "", api.SignalNodeFree, word)
	if err == nil || errors.As(err, new(*serviceerror.NotFound)) {
		return nil
	}
	return fmt.Errorf("telling rollout %s of node %s: %w", rollout, word.Node, err)
}

// TerminatedNodeWord is the word sent for a terminated node workflow: the result the rollout's
// own recheck settles such a node with (workflows' handedInLost).
func TerminatedNodeWord(node, runID string) api.NodeFreed {
	return api.NodeFreed{Node: node, RunID: runID, Result: &api.NodeResult{Node: node, Outcome: api.OutcomeFailed,
		Reason: api.ReasonNodeWorkflowTerminated, Message: "the node's workflow, handed over in flight at a continue-as-new, ended without telling the rollout: it was terminated, so none of its clean-up ran (its Job may still run, a cordon stays)"}}
}
