//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestSoakStackJobsCompleteSoonAfterAPIServerOutage checks the stack itself, not noderollout:
// after a 45 s kube-apiserver stop, Jobs whose Pods finished during the outage are marked
// complete soon after the server is back, as a real control plane does (its controller manager
// loses its leader lease and is restarted). Fault tests rely on it for their timing.
func TestSoakStackJobsCompleteSoonAfterAPIServerOutage(t *testing.T) {
	const outage, bound = 45 * time.Second, 40 * time.Second
	f := NewFleet(t, 4)
	ctx := context.Background()
	zero := int32(0)
	for _, node := range f.Nodes {
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "outage-" + node[len(node)-5:]},
			Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"noderollout.dev/run-seconds": "10"}},
				Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "work", Image: "busybox"}}},
			}},
		}
		_, err := stack.Kube.BatchV1().Jobs(f.Namespace).Create(ctx, job, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	waitFor(t, 60*time.Second, "every Pod running", func() bool {
		pods, err := stack.Kube.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) != len(f.Nodes) {
			return false
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				return false
			}
		}
		return true
	})
	devScript(t, "stop-component.sh", "kube-apiserver")
	time.Sleep(outage) // the outage itself; the Pods' 10 s end within it
	devScript(t, "start-component.sh", "kube-apiserver")
	back := time.Now()
	var complete int
	waitFor(t, 5*time.Minute, "every Job complete", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		complete = 0
		for _, j := range list.Items {
			for _, c := range j.Status.Conditions {
				if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
					complete++
				}
			}
		}
		return complete == len(f.Nodes)
	})
	took := time.Since(back)
	t.Logf("after a %v kube-apiserver stop, all %d Jobs were complete %.1f s after it was back", outage, complete, took.Seconds())
	require.Less(t, took, bound, fmt.Sprintf("a real control plane completes them within %v", bound))
}
