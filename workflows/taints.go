package workflows

import (
	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Taints: each listing skips the nodes whose NoSchedule/NoExecute taints the Job's Pod does
// not tolerate (activities.ListNodes reads them before anything is written to the node), so a
// skipped node is counted as skipped, never charged to the failure budget, and the dry run
// lists it.

// taintCheck is what the listings check taints with, from the prepared template's
// tolerations; nil when the request says taints: ignore, or when the preparation was
// recorded by a worker from before the check (a rollout under way at the upgrade goes on as
// it began, its template's tolerations unknown).
func (r *rollout) taintCheck(prepared activities.PreparedTemplate) *api.TaintCheck {
	if r.settings.IgnoreTaints || !prepared.TolerationsRead {
		return nil
	}
	return &api.TaintCheck{Tolerations: prepared.Tolerations, OwnKeys: r.ownTaintKeys()}
}

// ownTaintKeys are the taint keys the request puts on nodes itself: they never keep a node
// from its Job. Our cordon's taint never counts either (jobspec.UntoleratedTaint).
func (r *rollout) ownTaintKeys() []string {
	return nil
}

// untoleratedResult is the result of a node skipped for a taint.
func untoleratedResult(n queuedNode) api.NodeResult {
	return api.NodeResult{Node: n.name, Outcome: api.OutcomeSkipped, Reason: api.ReasonUntoleratedTaint,
		Message: "the node carries the taint " + n.reason + ", which the Job's Pod does not tolerate; add a toleration to the template, or set taints: ignore to run it anyway"}
}
