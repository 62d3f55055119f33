package activities

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// untoleratedTaint is the taint (key=value:Effect) that keeps the rollout's Pod off node, or ""
// when it may run there or the listing checks no taints. The listing reads it before any write
// to the node, so our own cordon's taint (from an earlier run that kept the node cordoned) is
// never what keeps a node from its Job, nor are the taints the rollout adds itself.
func untoleratedTaint(check *api.TaintCheck, node *corev1.Node) string {
	if check == nil {
		return ""
	}
	taint := jobspec.UntoleratedTaint(check.Tolerations, node.Spec.Taints, func(key string) bool {
		return slices.Contains(check.OwnKeys, key)
	})
	if taint == nil {
		return ""
	}
	return jobspec.TaintString(taint)
}
