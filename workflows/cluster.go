package workflows

import (
	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// OnCluster is the workflows as the worker of one cluster runs them: the cluster names the
// node workflows and the budget coordinator, and sets the cluster-wide budget.
type OnCluster struct{ api.Cluster }

// Rollout is the Rollout workflow as this cluster's worker runs it.
func (c OnCluster) Rollout(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	return rolloutIn(ctx, c.Cluster, req, carried)
}

// Register registers every workflow the cluster's worker runs on its task queue (on a worker,
// or on a replayer of the cluster's histories).
func (c OnCluster) Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(c.Rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow})
	w.RegisterWorkflowWithOptions(c.NodeRollout, workflow.RegisterOptions{Name: api.NodeRolloutWorkflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV2, workflow.RegisterOptions{Name: api.NodeRolloutV2Workflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV3, workflow.RegisterOptions{Name: api.NodeRolloutV3Workflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV4, workflow.RegisterOptions{Name: api.NodeRolloutV4Workflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV5, workflow.RegisterOptions{Name: api.NodeRolloutV5Workflow})
	w.RegisterWorkflowWithOptions(ClusterBudget, workflow.RegisterOptions{Name: api.ClusterBudgetWorkflow})
}
