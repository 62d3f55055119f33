package api

import "strings"

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

// NodeOfWorkflowID is the node whose workflow ID in this cluster id is (NodeWorkflowID's
// inverse); false when id is no node workflow ID of this cluster.
func (c Cluster) NodeOfWorkflowID(id string) (string, bool) {
	node, ok := strings.CutPrefix(id, c.NodeWorkflowID(""))
	return node, ok && node != ""
}

// RolloutID is the workflow ID of the rollout with this name in this cluster.
func (c Cluster) RolloutID(name string) string { return clusterScoped(RolloutIDPrefix, c.Name, name) }

// BudgetWorkflowID is the ID of the cluster's budget coordinator.
func (c Cluster) BudgetWorkflowID() string {
	if c.Name == "" {
		return BudgetIDPrefix[:len(BudgetIDPrefix)-1]
	}
	return BudgetIDPrefix + c.Name
}

// Names that users type in the Temporal UI and CLI; they are public API and never change.
const (
	TaskQueue = "noderollout"
	// FleetTaskQueue is served by every cluster's worker, so a fleet rollout does not depend
	// on any one cluster's worker being up.
	FleetTaskQueue = "noderollout-fleet"

	// RolloutWorkflow is the name to start Rollout by, with the request as the only argument
	// (the function's second parameter is internal continue-as-new state).
	RolloutWorkflow      = "Rollout"
	FleetRolloutWorkflow = "FleetRollout"
	// The node workflow types: a Rollout starts one per node as its child, never a caller.
	// Which type a Rollout starts depends on its version (workflows/versions.go).
	NodeRolloutWorkflow   = "NodeRollout"
	NodeRolloutV2Workflow = "NodeRolloutV2"
	NodeRolloutV3Workflow = "NodeRolloutV3"
	NodeRolloutV4Workflow = "NodeRolloutV4"
	NodeRolloutV5Workflow = "NodeRolloutV5"
	// ClusterBudgetWorkflow is the coordinator of a cluster-wide budget: one per cluster.
	ClusterBudgetWorkflow = "ClusterBudget"

	// Signals, queries and updates of Rollout (pause, resume, status and setParallelism also
	// of FleetRollout, which passes pause and resume on to its clusters).
	SignalPause          = "pause"
	SignalResume         = "resume"
	QueryStatus          = "status"
	UpdateSetParallelism = "setParallelism"
	UpdateApprove        = "approve"
	// QueryNodeStep asks a node workflow (from versionFieldGuarantees on) which step it is at;
	// it answers a NodeStep. Older node workflows do not know it.
	QueryNodeStep = "step"
	// QueryBudget asks a cluster's budget coordinator for its BudgetStatus.
	QueryBudget = "budget"

	// RolloutIDPrefix + request name is the workflow ID the starter and Schedules use.
	RolloutIDPrefix = "rollout-"
	// FleetIDPrefix + request name is the FleetRollout workflow ID.
	FleetIDPrefix = "fleet-"
	// NodeIDPrefix + node name is the NodeRollout workflow ID: one per node across all rollouts,
	// so a node never runs two rollouts' Jobs at once.
	NodeIDPrefix = "noderollout-node-"
	// BudgetIDPrefix + cluster is the coordinator's workflow ID (without a cluster:
	// "noderollout-budget").
	BudgetIDPrefix = "noderollout-budget-"

	// SearchAttributeRolloutName (Keyword) is set by the starter when the namespace has it.
	SearchAttributeRolloutName = "RolloutName"
)

// NodeWorkflowTypes are every node workflow type, oldest first: a worker registers them all,
// since a rollout's history decides which type its children are.
var NodeWorkflowTypes = []string{NodeRolloutWorkflow, NodeRolloutV2Workflow, NodeRolloutV3Workflow, NodeRolloutV4Workflow, NodeRolloutV5Workflow}

// Error types of the workflows' own ApplicationErrors (outcomes.go has the activities').
const (
	ErrFailureBudgetExceeded      = "FailureBudgetExceeded"
	ErrFleetFailureBudgetExceeded = "FleetFailureBudgetExceeded"
	ErrCanaryFailed               = "CanaryFailed"
	ErrNodeFailed                 = "NodeFailed"
	ErrRolloutFailed              = "RolloutFailed"
)

// RolloutID is the workflow ID of the rollout with this name.
func RolloutID(name string) string { return RolloutIDPrefix + name }

// FleetID is the workflow ID of the fleet rollout with this name.
func FleetID(name string) string { return FleetIDPrefix + name }

// NodeWorkflowID is the NodeRollout workflow ID of this node.
func NodeWorkflowID(node string) string { return NodeIDPrefix + node }

// Who started a rollout. The starter puts it in the workflow's memo (and, where the namespace
// has it, the RolloutRequester search attribute); the workflow hands it to every Job and Node
// marker. It is the starting client's claim: Temporal's own authorization decides who may start.
const (
	MemoRequester = "requester"
	MemoReason    = "reason"
	// SearchAttributeRequester (Keyword) is set by the starter when the namespace has it.
	SearchAttributeRequester = "RolloutRequester"
)
