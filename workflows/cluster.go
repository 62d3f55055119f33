package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Cluster is who a worker rolls out for when one Temporal namespace serves many clusters, and
// the cluster-wide disruption budget it applies. It comes from the worker's config (`cluster`,
// `cluster-budget`): both describe the cluster, not one rollout, so every rollout on it agrees.
type Cluster struct {
	// Name qualifies the task queue and the IDs of the node workflows and the budget
	// coordinator; empty keeps the IDs and queue of a single-cluster install.
	Name string
	// Budget is how many of the cluster's nodes may be in flight across all rollouts at once;
	// 0 means no cluster-wide budget.
	Budget int
}

// ClusterTaskQueue is the task queue of cluster's worker: base itself when cluster is empty.
//
// Qualifying the queue is also why qualified node IDs need no workflow.GetVersion: a worker
// with a cluster name polls a queue no worker without one polls, so a history recorded with
// the unqualified IDs is only ever replayed by a worker that still makes those IDs.
func ClusterTaskQueue(base, cluster string) string {
	if cluster == "" {
		return base
	}
	return base + "-" + cluster
}

// clusterScoped names a per-cluster object: prefix+name, or prefix+cluster+":"+name. A colon
// cannot occur in a node or rollout name, so no qualified ID equals an unqualified one.
func clusterScoped(prefix, cluster, name string) string {
	if cluster == "" {
		return prefix + name
	}
	return prefix + cluster + ":" + name
}

// NodeWorkflowID is the NodeRollout workflow ID of node in this cluster.
func (c Cluster) NodeWorkflowID(node string) string { return clusterScoped(NodeIDPrefix, c.Name, node) }

// RolloutID is the workflow ID of the rollout with this name in this cluster.
func (c Cluster) RolloutID(name string) string { return clusterScoped(RolloutIDPrefix, c.Name, name) }

// BudgetWorkflowID is the ID of the cluster's budget coordinator.
func (c Cluster) BudgetWorkflowID() string {
	if c.Name == "" {
		return BudgetIDPrefix[:len(BudgetIDPrefix)-1]
	}
	return BudgetIDPrefix + c.Name
}

// OnCluster is the workflows as the worker of one cluster runs them: the cluster names the
// node workflows and the budget coordinator, and sets the cluster-wide budget.
type OnCluster struct{ Cluster }

// Rollout is the Rollout workflow as this cluster's worker runs it.
func (c OnCluster) Rollout(ctx workflow.Context, req RolloutRequest, carried *Progress) (RolloutResult, error) {
	return rolloutIn(ctx, c.Cluster, req, carried)
}

// Register registers every workflow the cluster's worker runs on its task queue (on a worker,
// or on a replayer of the cluster's histories).
func (c OnCluster) Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(c.Rollout, workflow.RegisterOptions{Name: RolloutWorkflow})
	w.RegisterWorkflowWithOptions(c.NodeRollout, workflow.RegisterOptions{Name: NodeRolloutWorkflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV2, workflow.RegisterOptions{Name: NodeRolloutV2Workflow})
	w.RegisterWorkflowWithOptions(c.NodeRolloutV3, workflow.RegisterOptions{Name: NodeRolloutV3Workflow})
	w.RegisterWorkflowWithOptions(ClusterBudget, workflow.RegisterOptions{Name: ClusterBudgetWorkflow})
}
