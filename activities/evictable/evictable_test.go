package evictable

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestJudge(t *testing.T) {
	yes := true
	// pod is a ReplicaSet's Pod unless edit changes its owners.
	pod := func(edit func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs", Controller: &yes}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		edit(p)
		return p
	}
	unmanaged := func(p *corev1.Pod) { p.OwnerReferences = nil }
	emptyDir := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	db := labels.SelectorFromSet(labels.Set{"app": "db"})
	for _, c := range []struct {
		name  string
		pod   *corev1.Pod
		rules Rules
		want  Verdict
	}{
		{"a ReplicaSet's running Pod is evicted", pod(func(*corev1.Pod) {}), Rules{}, Evict},
		{"a StatefulSet's Pod is evicted", pod(func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "StatefulSet", Name: "db", Controller: &yes}}
		}), Rules{}, Evict},
		{"a DaemonSet's Pod is passed by", pod(func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
		}), Rules{}, Pass},
		{"a mirror Pod is passed by", pod(func(p *corev1.Pod) { p.Annotations = map[string]string{MirrorAnnotation: "x"} }), Rules{}, Pass},
		{"a finished Pod is passed by", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), Rules{}, Pass},
		{"a failed Pod is passed by", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), Rules{}, Pass},
		{"a selected Pod is evicted", pod(func(*corev1.Pod) {}), Rules{Selector: web}, Evict},
		{"an unselected Pod is passed by", pod(func(*corev1.Pod) {}), Rules{Selector: db}, Pass},
		{"local storage is refused", pod(emptyDir), Rules{}, Refuse},
		{"local storage is evicted when allowed", pod(emptyDir), Rules{DeleteEmptyDirData: true}, Evict},
		{"local storage of a Pod already terminating is waited for, not refused", pod(func(p *corev1.Pod) {
			emptyDir(p)
			p.DeletionTimestamp = &metav1.Time{}
		}), Rules{}, Evict},
		{"an unselected Pod with local storage is passed by", pod(emptyDir), Rules{Selector: db}, Pass},
		// kubectl drain --force
		{"a Pod no controller manages is refused", pod(unmanaged), Rules{}, Refuse},
		{"a Pod owned but not controlled is refused", pod(func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "ConfigMap", Name: "cm"}}
		}), Rules{}, Refuse},
		{"a Pod no controller manages is evicted with force", pod(unmanaged), Rules{Force: true}, Evict},
		{"an unselected Pod no controller manages is passed by", pod(unmanaged), Rules{Selector: db}, Pass},
		{"a finished Pod no controller manages is passed by", pod(func(p *corev1.Pod) { unmanaged(p); p.Status.Phase = corev1.PodFailed }), Rules{}, Pass},
		{"a Pod no controller manages already terminating is waited for", pod(func(p *corev1.Pod) {
			unmanaged(p)
			p.DeletionTimestamp = &metav1.Time{}
		}), Rules{}, Evict},
		{"a mirror Pod (no controller) is passed by", pod(func(p *corev1.Pod) {
			unmanaged(p)
			p.Annotations = map[string]string{MirrorAnnotation: "x"}
		}), Rules{}, Pass},
		{"a DaemonSet's Pod with local storage is passed by", pod(func(p *corev1.Pod) {
			emptyDir(p)
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ds", Controller: &yes}}
		}), Rules{}, Pass},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, why := Judge(c.pod, c.rules)
			require.Equal(t, c.want, got, why)
			if got != Evict {
				require.NotEmpty(t, why)
			}
		})
	}
}
