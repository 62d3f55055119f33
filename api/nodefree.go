package api

// SignalNodeFree tells a rollout that a node's workflow has ended. The node workflow sends it
// to each rollout that asked (workflows.SignalNotifyWhenFree). A worker sends it for a node
// workflow terminated by hand, which sends nothing: with the node's result to the rollout that
// handed the node over at a continue-as-new, and bare to every other running rollout, one of
// which may wait for the node (activities.TerminatedNodeNotifier). Without it they would hear
// only at their busy-node recheck. No user sends it.
const SignalNodeFree = "nodeFree"

// NodeFreed is the input of SignalNodeFree: the node whose NodeRollout ended, with the run
// that ended and its result, so that a rollout that was handed the node in flight across
// continue-as-new counts the node without running it again (older workers send the node
// alone).
type NodeFreed struct {
	Node   string      `json:"node"`
	RunID  string      `json:"runID,omitempty"`
	Result *NodeResult `json:"result,omitempty"`
}
