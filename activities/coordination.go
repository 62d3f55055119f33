package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/noderollout/noderollout/api"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// Coordination holds the activities that talk to Temporal itself rather than to Kubernetes:
// starting a cluster's budget coordinator on demand, and telling which holders of a budget
// slot are gone. Register it next to Activities (worker.RegisterActivity(c)).
type Coordination struct {
	Temporal client.Client
}

// SignalWithStartInput signals a workflow, starting it first if it is not running.
type SignalWithStartInput struct {
	WorkflowID string `json:"workflowID"`
	Workflow   string `json:"workflow"`
	TaskQueue  string `json:"taskQueue"`
	Signal     string `json:"signal"`
	SignalArg  any    `json:"signalArg"`
	// WorkflowArg is the workflow's one argument when it has to be started.
	WorkflowArg any `json:"workflowArg"`
}

// SignalWithStart delivers the signal, starting the workflow if needed. Temporal does both
// atomically, so two rollouts racing to start the same coordinator both reach one run.
func (c *Coordination) SignalWithStart(ctx context.Context, in SignalWithStartInput) error {
	defer keepAlive(ctx, apiKeepAlive)()
	_, err := c.Temporal.SignalWithStartWorkflow(ctx, in.WorkflowID, in.Signal, in.SignalArg, client.StartWorkflowOptions{
		ID:        in.WorkflowID,
		TaskQueue: in.TaskQueue,
		// The coordinator of a cluster is one long-lived workflow; a closed one (terminated by
		// an operator) is simply started again with no holders.
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		StaticSummary:         "cluster-wide disruption budget",
	}, in.Workflow, in.WorkflowArg)
	return err
}

// GoneHolders returns the holders whose slot nobody can return any more: their Rollout run is
// closed (terminated, reset, timed out) and no node workflow it started still runs. Children of
// a closed rollout are cancelled and close only once their Job is gone, so the slot comes back
// when the node is really free, not when the rollout is.
func (c *Coordination) GoneHolders(ctx context.Context, holders []api.SlotHolder) ([]api.SlotHolder, error) {
	var gone []api.SlotHolder
	for _, h := range holders {
		rolloutOpen, _, err := c.running(ctx, h.Rollout, h.RolloutRun)
		if err != nil {
			return nil, err
		}
		if rolloutOpen {
			continue
		}
		nodeOpen, parent, err := c.running(ctx, h.Node, "")
		if err != nil {
			return nil, err
		}
		if nodeOpen && parent != nil && parent.GetWorkflowId() == h.Rollout && parent.GetRunId() == h.RolloutRun {
			continue
		}
		gone = append(gone, h)
	}
	return gone, nil
}

// running describes one workflow run (the latest when runID is empty); a workflow Temporal
// does not know is not running.
func (c *Coordination) running(ctx context.Context, id, runID string) (bool, *commonpb.WorkflowExecution, error) {
	d, err := c.Temporal.DescribeWorkflow(ctx, id, runID)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("describing workflow %s: %w", id, err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	return info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, info.GetParentExecution(), nil
}

// NodeHoldersInput names the node workflows that hold slots of a cluster's budget.
type NodeHoldersInput struct {
	TaskQueue     string   `json:"taskQueue"`
	WorkflowTypes []string `json:"workflowTypes"`
}

// NodeHolders lists the node workflows running on the task queue, each as the holder of the
// slot its Rollout took for it.
func (c *Coordination) NodeHolders(ctx context.Context, in NodeHoldersInput) ([]api.SlotHolder, error) {
	types := make([]string, len(in.WorkflowTypes))
	for i, t := range in.WorkflowTypes {
		types[i] = "'" + t + "'"
	}
	req := &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running' AND WorkflowType IN (%s)",
			in.TaskQueue, strings.Join(types, ", ")),
		PageSize: 1000,
	}
	var holders []api.SlotHolder
	for {
		page, err := c.Temporal.ListWorkflow(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("listing the node workflows running on task queue %s: %w", in.TaskQueue, err)
		}
		for _, e := range page.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			parent := e.GetParentExecution()
			if parent == nil {
				// Not every visibility store lists the parent: ask the workflow itself.
				if _, parent, err = c.running(ctx, id, e.GetExecution().GetRunId()); err != nil {
					return nil, err
				}
			}
			if parent != nil {
				holders = append(holders, api.SlotHolder{Rollout: parent.GetWorkflowId(), RolloutRun: parent.GetRunId(), Node: id})
			}
		}
		if len(page.GetNextPageToken()) == 0 {
			return holders, nil
		}
		req.NextPageToken = page.GetNextPageToken()
	}
}
