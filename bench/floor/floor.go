// Package floor is the Temporal floor under noderollout's design: a parent workflow that runs
// one child workflow per node, P at a time, each child's ID derived from its node alone (so a
// node's ID is reused by every run over it, as a real rollout's node workflows are), and each
// child makes, in one local activity, exactly the Kubernetes calls of the benchmark's baseline
// for its node (package nodejob: the Job's create beside a Node read, the wait for its end on
// a shared informer, the outcome annotation, Event and delete). What this costs the Temporal
// server and the worker per node is what any rollout with a child workflow per node doing the
// baseline's work costs at least, on the same server; the bench runs it as the system
// "temporal-floor" beside noderollout.
package floor

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/bench/nodejob"
)

// Workflow and activity names, as the worker registers them.
const (
	RolloutWorkflow = "FloorRollout"
	NodeWorkflow    = "FloorNode"
	RunJobActivity  = "FloorRunJob"
)

// NodeIDPrefix starts every floor node workflow's ID: the prefix and the node's name, the same
// for every run over the node (noderollout's are noderollout-node-<node>).
const NodeIDPrefix = "floor-node-"

// NodeWorkflowID is the node's workflow ID.
func NodeWorkflowID(node string) string { return NodeIDPrefix + node }

// Request is one floor rollout.
type Request struct {
	Name        string   `json:"name"`
	Nodes       []string `json:"nodes"`
	Parallelism int      `json:"parallelism"`
	// JobSeconds is how long a node's Job runs, for the local activity's timeout.
	JobSeconds float64 `json:"jobSeconds"`
}

// Result counts the nodes by their Job's outcome.
type Result struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
}

// NodeResult is one node's outcome.
type NodeResult struct {
	Succeeded bool `json:"succeeded"`
}

// NodeRequest is one node's input.
type NodeRequest struct {
	Node       string  `json:"node"`
	JobSeconds float64 `json:"jobSeconds"`
}

// nodeTaskTimeout is noderollout's node workflow-task timeout, so that a child's task that
// waits in its local activity heartbeats at the same point as a node's does.
const nodeTaskTimeout = 15 * time.Second

// Rollout starts a child per node, at most req.Parallelism at once, and waits for them all.
func Rollout(ctx workflow.Context, req Request) (Result, error) {
	if req.Parallelism < 1 {
		return Result{}, fmt.Errorf("parallelism %d: want 1 or more", req.Parallelism)
	}
	var res Result
	inFlight := 0
	sel := workflow.NewSelector(ctx)
	for next := 0; next < len(req.Nodes) || inFlight > 0; {
		for ; next < len(req.Nodes) && inFlight < req.Parallelism; next++ {
			node := req.Nodes[next]
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID:            NodeWorkflowID(node),
				WorkflowTaskTimeout:   nodeTaskTimeout,
				WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
				ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
				WaitForCancellation:   true,
				StaticSummary:         "floor " + req.Name + " on node " + node,
			})
			inFlight++
			sel.AddFuture(workflow.ExecuteChildWorkflow(cctx, NodeWorkflow, NodeRequest{Node: node, JobSeconds: req.JobSeconds}), func(f workflow.Future) {
				inFlight--
				var out NodeResult
				if f.Get(ctx, &out) != nil || !out.Succeeded {
					res.Failed++
				} else {
					res.Succeeded++
				}
			})
		}
		sel.Select(ctx)
	}
	return res, nil
}

// Node runs the node's Job in one local activity and returns its outcome.
func Node(ctx workflow.Context, req NodeRequest) (NodeResult, error) {
	d := time.Duration(req.JobSeconds * float64(time.Second))
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: d + 5*time.Minute})
	var out NodeResult
	err := workflow.ExecuteLocalActivity(ctx, RunJobActivity, req.Node).Get(ctx, &out)
	return out, err
}

// Activities is the local activity's dependencies: the run's Kubernetes calls and the ends of
// its Jobs, fed by one shared informer.
type Activities struct {
	Calls *nodejob.Calls
	Ends  *nodejob.Ends
}

// RunJob creates the node's Job, waits for its end and finishes it, as the baseline does. A
// Job that could not be created is a failed node, as in the baseline.
func (a *Activities) RunJob(ctx context.Context, node string) (NodeResult, error) {
	if err := a.Calls.Create(ctx, node); err != nil {
		return NodeResult{}, nil
	}
	name := a.Calls.JobName(node)
	succeeded, err := a.Ends.Wait(ctx, name)
	if err != nil {
		return NodeResult{}, err
	}
	a.Calls.Finish(ctx, name, node, succeeded)
	return NodeResult{Succeeded: succeeded}, nil
}
