// Package workflows holds the deterministic orchestration of a rollout: the Rollout workflow
// that walks the selected nodes within a concurrency window, and the per-node NodeRollout child
// that creates, watches and finalizes one Job. All I/O lives in package activities.
package workflows

// Names that users type in the Temporal UI and CLI; they are public API and never change.
const (

	// SignalNotifyWhenFree asks a NodeRollout to signal SignalNodeFree to the sender when it
	// ends: how a rollout that finds the node busy learns that it is free, without polling.
	SignalNotifyWhenFree = "notifyWhenFree"
	SignalNodeFree       = "nodeFree"
)

// NodeWaiter is the input of SignalNotifyWhenFree: the workflow to tell.
type NodeWaiter struct {
	WorkflowID string `json:"workflowID"`
}

// NodeFreed is the input of SignalNodeFree: the node whose NodeRollout ended.
type NodeFreed struct {
	Node string `json:"node"`
}
