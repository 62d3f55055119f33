// Package workflows holds the deterministic orchestration of a rollout: the Rollout workflow
// that walks the selected nodes within a launch window, the per-node NodeRollout child that
// creates, watches and finalizes one Job, the FleetRollout of many clusters and each
// cluster's ClusterBudget coordinator. All I/O lives in package activities; the request and
// what the workflows answer are package api's.
//
// A rollout's code, by purpose: rollout.go (its life), queue.go, admission.go and launch.go
// (which node starts when, and how), pacing.go and pacer.go (window, canaries, order),
// steering.go (signals, updates, queries), history.go and handover.go (continue-as-new, and
// the nodes in flight it hands to the next run); a node's: node.go,
// maintenance.go, nodestep.go; options.go holds every activity's and child's options, and
// versions.go the ledger of every GetVersion change and node type, with the code that older
// histories still run (node_legacy.go, launch_legacy.go).
package workflows

// Signals between workflows, which no user sends (api holds the names users type).
const (
	// SignalNotifyWhenFree asks a NodeRollout to signal SignalNodeFree to the sender when it
	// ends: how a rollout that finds the node busy learns that it is free, without polling.
	// api.SignalNodeFree is its answer.
	SignalNotifyWhenFree = "notifyWhenFree"
)

// NodeWaiter is the input of SignalNotifyWhenFree: the workflow to tell.
type NodeWaiter struct {
	WorkflowID string `json:"workflowID"`
}
