//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeReady and bootID read a Node's Ready condition and boot ID.
func nodeState(t *testing.T, name string) (ready corev1.ConditionStatus, bootID string) {
	t.Helper()
	n, err := stack.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = c.Status
		}
	}
	return ready, n.Status.NodeInfo.BootID
}

// The stack reboots a kwok Node as a reboot Job would: a Pod annotated with a downtime that
// runs on the Node takes it down (a new boot ID, NotReady) and dies with it; the Node comes
// back Ready after the downtime, keeping its new boot ID (dev/cmd/fakereboot).
func TestStackRebootsAKwokNode(t *testing.T) {
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	var before string
	waitFor(t, 30*time.Second, "the node Ready", func() bool {
		var ready corev1.ConditionStatus
		ready, before = nodeState(t, node)
		return ready == corev1.ConditionTrue
	})
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "reboot", Namespace: f.Namespace,
			Annotations: map[string]string{"noderollout.dev/reboot-downtime": "6s", "noderollout.dev/run-seconds": "600"}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "reboot", Image: "busybox"}}},
	}
	_, err := stack.Kube.CoreV1().Pods(f.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	var during string
	waitFor(t, 30*time.Second, "the node down with a new boot ID", func() bool {
		ready, id := nodeState(t, node)
		during = id
		return ready == corev1.ConditionFalse && id != before
	})
	waitFor(t, 30*time.Second, "the reboot Pod dead with its node", func() bool {
		p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, "reboot", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "NodeRebooted"
	})
	start := time.Now()
	waitFor(t, 60*time.Second, "the node back", func() bool {
		ready, _ := nodeState(t, node)
		return ready == corev1.ConditionTrue
	})
	require.Greater(t, time.Since(start), 2*time.Second, "it stayed down for its downtime")
	_, after := nodeState(t, node)
	require.Equal(t, during, after, "the new boot ID is kept once Ready")
}
