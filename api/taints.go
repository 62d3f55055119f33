package api

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Taints: a Job pinned with nodeName bypasses the scheduler's taint check, so the rollout
// makes it itself: a node with a NoSchedule or NoExecute taint its Job's Pod does not tolerate
// is skipped (not a failure), unless the request says taints: ignore.
const (
	TaintsRespect = "respect"
	TaintsIgnore  = "ignore"
	// SkipUntoleratedTaint is the skip word of such a node in the queue and the dry run's plan.
	SkipUntoleratedTaint = "untoleratedTaint"
	// ReasonUntoleratedTaint is the reason of its skipped result; the message names the taint.
	ReasonUntoleratedTaint = "untoleratedTaint"
)

// TaintCheck is what a listing needs to find untolerated taints: the template's tolerations
// and the taint keys the rollout puts on nodes itself, which never count. Carried across
// continue-as-new; nil in runs that do not check (taints: ignore, or started before the check).
type TaintCheck struct {
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	OwnKeys     []string            `json:"ownKeys,omitempty"`
}

func (r RolloutRequest) checkTaints(ps *problems) {
	switch r.Taints {
	case "", TaintsRespect, TaintsIgnore:
	default:
		ps.add("taints", fmt.Sprintf("%q is not allowed", r.Taints), "use respect (the default: skip nodes whose taints the Job's Pod does not tolerate) or ignore")
	}
}
