// Package evictable decides, for each Pod on a node being drained, whether the drain evicts
// it, passes it by, or must refuse to go on. Pure: no I/O, so the rules are table-tested.
package evictable

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// MirrorAnnotation marks a static Pod's mirror: the kubelet owns it and the API cannot evict it.
const MirrorAnnotation = "kubernetes.io/config.mirror"

// Verdict is what a drain does with one Pod.
type Verdict int

const (
	// Evict: the Pod must leave the node before the Job runs.
	Evict Verdict = iota
	// Pass: the drain leaves the Pod alone (a DaemonSet's, a mirror Pod, finished, not selected).
	Pass
	// Refuse: evicting the Pod would lose what the request did not allow losing (its local
	// storage, or the Pod itself when no controller makes it again); the drain stops before
	// evicting anything.
	Refuse
)

// Rules are the request's drain options.
type Rules struct {
	// Selector limits the drain to matching Pods; nil selects every Pod.
	Selector labels.Selector
	// DeleteEmptyDirData allows evicting Pods whose emptyDir volumes die with them.
	DeleteEmptyDirData bool
	// Force allows evicting Pods no controller manages: nothing makes them again.
	Force bool
}

// Judge says what the drain does with pod, and why when it does not simply evict it.
func Judge(pod *corev1.Pod, r Rules) (Verdict, string) {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return Pass, "finished"
	case pod.Annotations[MirrorAnnotation] != "":
		return Pass, "mirror Pod of a static Pod"
	case ownedByDaemonSet(pod):
		// Its controller would put it straight back, and tolerates the cordon.
		return Pass, "managed by a DaemonSet"
	case r.Selector != nil && !r.Selector.Matches(labels.Set(pod.Labels)):
		return Pass, "not selected by maintenance.drain.podSelector"
	}
	// A Pod already being deleted goes whatever the drain does: the drain only waits for it,
	// so neither its local storage nor its lack of a controller is a reason to refuse.
	if pod.DeletionTimestamp != nil {
		return Evict, ""
	}
	if !r.Force && metav1.GetControllerOf(pod) == nil {
		return Refuse, "is managed by no controller, so nothing makes it again once evicted"
	}
	if !r.DeleteEmptyDirData {
		for _, v := range pod.Spec.Volumes {
			if v.EmptyDir != nil {
				return Refuse, fmt.Sprintf("has local storage (emptyDir volume %q) that eviction deletes", v.Name)
			}
		}
	}
	return Evict, ""
}

func ownedByDaemonSet(pod *corev1.Pod) bool {
	for _, o := range pod.OwnerReferences {
		if o.Controller != nil && *o.Controller && o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}
