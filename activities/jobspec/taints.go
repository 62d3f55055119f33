package jobspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// UnschedulableTaintKey is the taint a cordon puts on a Node (the scheduler's
// TaintNodeUnschedulable); a rollout's own cordon must never keep its Job off the node.
const UnschedulableTaintKey = "node.kubernetes.io/unschedulable"

// UntoleratedTaint is the first of the node's taints that keeps a Pod off it (NoSchedule or
// NoExecute) and that none of the Pod's tolerations tolerates, or nil when the Pod may run
// there. Pinning a Pod with nodeName bypasses the scheduler's own check, so a rollout makes it.
// The cordon's taint never counts, nor do the taints ours says the rollout itself puts on
// nodes (its onSuccess taints); PreferNoSchedule only steers a scheduler.
func UntoleratedTaint(tolerations []corev1.Toleration, taints []corev1.Taint, ours func(key string) bool) *corev1.Taint {
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if taint.Key == UnschedulableTaintKey || (ours != nil && ours(taint.Key)) {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(klog.Background(), taint, true) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return taint
		}
	}
	return nil
}

// TaintString names a taint as kubectl writes it: key=value:Effect.
func TaintString(t *corev1.Taint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}
