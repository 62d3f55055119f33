package jobspec

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestUntoleratedTaint(t *testing.T) {
	gpu := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	evict := corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute}
	prefer := corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}
	cordon := corev1.Taint{Key: UnschedulableTaintKey, Effect: corev1.TaintEffectNoSchedule}
	startup := corev1.Taint{Key: "example.com/driver-not-ready", Effect: corev1.TaintEffectNoSchedule}
	tolerateGPU := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	tolerateAll := corev1.Toleration{Operator: corev1.TolerationOpExists}
	wrongValue := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpEqual, Value: "absent"}
	ours := func(key string) bool { return key == startup.Key }
	for _, c := range []struct {
		name        string
		tolerations []corev1.Toleration
		taints      []corev1.Taint
		want        *corev1.Taint
	}{
		{"no taints", nil, nil, nil},
		{"a NoSchedule taint not tolerated", nil, []corev1.Taint{gpu}, &gpu},
		{"a NoExecute taint not tolerated", []corev1.Toleration{tolerateGPU}, []corev1.Taint{gpu, evict}, &evict},
		{"tolerated by key and effect", []corev1.Toleration{tolerateGPU}, []corev1.Taint{gpu}, nil},
		{"tolerated by an empty key with Exists", []corev1.Toleration{tolerateAll}, []corev1.Taint{gpu, evict}, nil},
		{"a toleration for another value", []corev1.Toleration{wrongValue}, []corev1.Taint{gpu}, &gpu},
		{"PreferNoSchedule only steers", nil, []corev1.Taint{prefer}, nil},
		{"our own cordon never counts", nil, []corev1.Taint{cordon}, nil},
		{"a taint the rollout puts on nodes itself", nil, []corev1.Taint{startup}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, UntoleratedTaint(c.tolerations, c.taints, ours))
		})
	}
	require.Equal(t, "nvidia.com/gpu=present:NoSchedule", TaintString(&gpu))
	require.Equal(t, "maintenance:NoExecute", TaintString(&evict))
}
