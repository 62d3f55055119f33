// Package floor is the Temporal floor under noderollout's design: a parent workflow that runs
// one child workflow per node, P at a time, with the children's IDs derived from the nodes, and
// each child does nothing but wait D seconds in one local activity (where a node watches its
// Job). No Kubernetes. What this costs the Temporal server and the worker per node is what any
// rollout with a child workflow per node costs at least, on the same server; the bench runs it
// as the system "temporal-floor" beside noderollout.
package floor

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/workflow"
)

// Workflow and activity names, as the worker registers them.
const (
	RolloutWorkflow = "FloorRollout"
	NodeWorkflow    = "FloorNode"
	WaitActivity    = "FloorWait"
)

// Request is one floor rollout.
type Request struct {
	Name        string   `json:"name"`
	Nodes       []string `json:"nodes"`
	Parallelism int      `json:"parallelism"`
	JobSeconds  float64  `json:"jobSeconds"`
}

// Result counts the children by how they ended.
type Result struct {
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
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
				WorkflowID:            req.Name + "-" + node,
				WorkflowTaskTimeout:   nodeTaskTimeout,
				WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
				ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
				WaitForCancellation:   true,
				StaticSummary:         "floor " + req.Name + " on node " + node,
			})
			inFlight++
			sel.AddFuture(workflow.ExecuteChildWorkflow(cctx, NodeWorkflow, req.JobSeconds), func(f workflow.Future) {
				inFlight--
				if f.Get(ctx, nil) != nil {
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

// Node waits jobSeconds in one local activity and ends.
func Node(ctx workflow.Context, jobSeconds float64) error {
	d := time.Duration(jobSeconds * float64(time.Second))
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: d + time.Minute})
	return workflow.ExecuteLocalActivity(ctx, WaitActivity, d).Get(ctx, nil)
}

// Wait is the local activity: it stands for watching a Job for d.
func Wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
