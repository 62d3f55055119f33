//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
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
	// The bound tells a control plane that recovers (23.5 s typical here, 43.3 s once in a
	// loaded CI rehearsal: the new controller manager waits out the old lease and kwok its
	// retry back-off) from one that does not (89.7 s before the supervisor, dev/components.sh).
	const outage, bound = 45 * time.Second, time.Minute
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
	stopFor(t, "kube-apiserver", outage) // the Pods' 10 s end within it
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

// heldFleet is a one-node fleet whose rollout's Pod kwok holds Running (a missed event, on
// purpose), with the watchdog told to kick it or not.
func heldRequest(t *testing.T, kick bool) (*Fleet, api.RolloutRequest) {
	t.Helper()
	f := NewFleet(t, 1)
	annotations := map[string]string{holdKey: "true"}
	if !kick {
		annotations[noKickKey] = "true"
	}
	req := f.Request("held", 2*time.Second)
	req.JobTemplate = JobTemplate(2*time.Second, annotations)
	requireKwokHolds(t, f)
	return f, req
}

// requireKwokHolds skips a test whose stack's kwok runs stages from before noderollout.dev/hold
// (a stack started from an older checkout): a held Pod would finish on its own.
func requireKwokHolds(t *testing.T, f *Fleet) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hold-probe", Namespace: f.Namespace,
			Labels:      map[string]string{TestLabel: f.ID},
			Annotations: map[string]string{holdKey: "true", runSecondsKey: "0"}},
		Spec: corev1.PodSpec{NodeName: f.Nodes[0], RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	_, err := stack.Kube.CoreV1().Pods(f.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	defer func() {
		zero := int64(0)
		_ = stack.Kube.CoreV1().Pods(f.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	waitFor(t, 30*time.Second, "the probe Pod to run", func() bool {
		p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase != corev1.PodPending
	})
	time.Sleep(3 * time.Second)
	p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	if p.Status.Phase != corev1.PodRunning {
		t.Skipf("the stack's kwok finished a held Pod (%s): it runs stages from before noderollout.dev/hold; restart the stack from this checkout (dev/down.sh; dev/up.sh)", p.Status.Phase)
	}
}

// A Pod whose finishing event kwok missed is found and kicked, and its rollout succeeds
// seconds after the Pod's run time, naming the Pod.
func TestKwokMissedEventIsKicked(t *testing.T) {
	_, req := heldRequest(t, true)
	start := time.Now()
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 1, res.Counts.Succeeded)
	require.Less(t, time.Since(start), 45*time.Second, "kicked within kickAfter of its run time")
	report := watchdog.report(req.Name)
	require.Contains(t, report, "kicked it")
	require.Regexp(t, `Pod `+regexp.QuoteMeta(req.Namespace)+`/`+regexp.QuoteMeta(req.Name)+`-\S+ on node \S+ was still Running`, report)
}

// A Pod that stays Running for good fails its node at its jobTimeout, a minute past its run
// time rather than the default 30 minutes, and the failure names the Pod.
func TestStuckPodFailsItsTestInAMinuteNamingThePod(t *testing.T) {
	_, req := heldRequest(t, false)
	req = withJobTimeout(req)
	require.Equal(t, "1m2s", req.JobTimeout)
	start := time.Now()
	res, err := Result(t, Start(t, req))
	require.Error(t, err)
	require.Equal(t, 1, res.Counts.TimedOut, "%v", err)
	require.Less(t, time.Since(start), 2*time.Minute)
	failure := stuckFailure(req.Name, err)
	require.Contains(t, failure, api.ReasonJobTimeout)
	require.Regexp(t, `Pod `+regexp.QuoteMeta(req.Namespace)+`/`+regexp.QuoteMeta(req.Name)+`-\S+ on node \S+ was still Running .*not kicked`, failure)
}
