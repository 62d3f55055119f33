package activities

import (
	"context"
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
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

// SlotHolder is who holds a slot of a cluster's disruption budget: the node workflow it was
// granted for, and the run of the Rollout that asked.
type SlotHolder struct {
	Rollout    string `json:"rollout"`
	RolloutRun string `json:"rolloutRun"`
	Node       string `json:"node"`
}

// Key identifies the grant: one per node workflow and rollout run.
func (h SlotHolder) Key() string { return h.Rollout + "/" + h.RolloutRun + "/" + h.Node }

// GoneHolders returns the holders whose slot nobody can return any more: their Rollout run is
// closed (terminated, reset, timed out) and no node workflow it started still runs. Children of
// a closed rollout are cancelled and close only once their Job is gone, so the slot comes back
// when the node is really free, not when the rollout is.
func (c *Coordination) GoneHolders(ctx context.Context, holders []SlotHolder) ([]SlotHolder, error) {
	var gone []SlotHolder
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
