package api

// SignalNodeFree tells a rollout that a node's workflow has ended. The node workflow sends it
// to each rollout that asked (workflows.SignalNotifyWhenFree). A worker sends it for a node
// workflow that was terminated after its rollout handed it over at a continue-as-new: a
// terminated workflow sends nothing, and the rollout's next run would otherwise hear of it only
// at its busy-node recheck (activities.TerminatedNodeNotifier). No user sends it.
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
