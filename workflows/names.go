// Package workflows holds the deterministic orchestration of a rollout: the Rollout workflow
// that walks the selected nodes within a concurrency window, and the per-node NodeRollout child
// that creates, watches and finalizes one Job. All I/O lives in package activities.
package workflows

// Names that users type in the Temporal UI and CLI; they are public API and never change.
const (
	TaskQueue = "noderollout"
	// RolloutWorkflow is the name to start Rollout by, with the request as the only argument
	// (the function's second parameter is internal continue-as-new state).
	RolloutWorkflow     = "Rollout"
	NodeRolloutWorkflow = "NodeRollout"
	// NodeRolloutV2Workflow is the node workflow as parents from versionNodeV2 on start it.
	NodeRolloutV2Workflow = "NodeRolloutV2"
	// NodeRolloutV3Workflow is the node workflow as parents from the second version of
	// versionNodeV2 on start it.
	NodeRolloutV3Workflow = "NodeRolloutV3"

	SignalPause          = "pause"
	SignalResume         = "resume"
	QueryStatus          = "status"
	UpdateSetParallelism = "setParallelism"

	// SignalNotifyWhenFree asks a NodeRollout to signal SignalNodeFree to the sender when it
	// ends: how a rollout that finds the node busy learns that it is free, without polling.
	SignalNotifyWhenFree = "notifyWhenFree"
	SignalNodeFree       = "nodeFree"

	// RolloutIDPrefix + request name is the workflow ID the starter and Schedules use.
	RolloutIDPrefix = "rollout-"
	// NodeIDPrefix + node name is the NodeRollout workflow ID: one per node across all rollouts,
	// so a node never runs two rollouts' Jobs at once.
	NodeIDPrefix = "noderollout-node-"

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

// NodeWaiter is the input of SignalNotifyWhenFree: the workflow to tell.
type NodeWaiter struct {
	WorkflowID string `json:"workflowID"`
}

// NodeFreed is the input of SignalNodeFree: the node whose NodeRollout ended.
type NodeFreed struct {
	Node string `json:"node"`
}
