package api

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

const (
	TaskQueue = "noderollout"
)

const (
	// RolloutWorkflow is the name to start Rollout by, with the request as the only argument
	// (the function's second parameter is internal continue-as-new state).
	RolloutWorkflow = "Rollout"
)

const (
	NodeRolloutWorkflow = "NodeRollout"
)

const (
	// NodeRolloutV2Workflow is the node workflow as parents from versionNodeV2 on start it.
	NodeRolloutV2Workflow = "NodeRolloutV2"
)

const (
	// NodeRolloutV3Workflow is the node workflow as parents from the second version of
	// versionNodeV2 on start it.
	NodeRolloutV3Workflow = "NodeRolloutV3"
)

const (
	SignalPause = "pause"
)

const (
	SignalResume = "resume"
)

const (
	QueryStatus = "status"
)

const (
	UpdateSetParallelism = "setParallelism"
)

const (
	// RolloutIDPrefix + request name is the workflow ID the starter and Schedules use.
	RolloutIDPrefix = "rollout-"
)

const (
	// NodeIDPrefix + node name is the NodeRollout workflow ID: one per node across all rollouts,
	// so a node never runs two rollouts' Jobs at once.
	NodeIDPrefix = "noderollout-node-"
)

const (
	// SearchAttributeRolloutName (Keyword) is set by the starter when the namespace has it.
	SearchAttributeRolloutName = "RolloutName"
)

// Error types of the workflows' own ApplicationErrors (activities define theirs).
const (
	ErrFailureBudgetExceeded = "FailureBudgetExceeded"
	ErrNodeFailed            = "NodeFailed"
	ErrRolloutFailed         = "RolloutFailed"
)

// RolloutID is the workflow ID of the rollout with this name.
func RolloutID(name string) string { return RolloutIDPrefix + name }

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
