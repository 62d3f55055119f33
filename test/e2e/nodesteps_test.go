//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Issue 33's node steps on the real stack: the reboot (dev/cmd/fakereboot reboots a kwok Node
// when a Pod annotated with a downtime runs on it), onSuccess, and the node gates.

// rebootTemplate is a reboot Job whose Pod takes its node down for downtime ("never": for good).
func rebootTemplate(downtime string) string {
	return JobTemplate(600*time.Second, map[string]string{"noderollout.dev/reboot-downtime": downtime})
}

// nodeOf reads a Node.
func nodeOf(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := stack.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

// readyBootIDs waits until every node is Ready and returns their boot IDs.
func readyBootIDs(t *testing.T, nodes []string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, n := range nodes {
		waitFor(t, 30*time.Second, "node "+n+" Ready", func() bool {
			ready, id := nodeState(t, n)
			ids[n] = id
			return ready == corev1.ConditionTrue
		})
	}
	return ids
}

// TestRebootJobRebootsTheNodeAndTheRolloutGoesOn: each node's Job asks for a reboot (its
// termination message), the reboot Job takes the node down, and the node counts as back only
// on a new boot ID and Ready; the next node follows, and each ends succeeded, uncordoned,
// without its reboot Job.
func TestRebootJobRebootsTheNodeAndTheRolloutGoesOn(t *testing.T) {
	f := NewFleet(t, 2)
	before := readyBootIDs(t, f.Nodes)
	req := f.Request("reboot", time.Second)
	req.Parallelism = 1
	req.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/termination-message": api.RebootRequiredMessage})
	req.Maintenance = &api.Maintenance{Cordon: true, Soak: "1s",
		Reboot: &api.Reboot{When: api.RebootIfRequested, JobTemplate: rebootTemplate("3s"), Timeout: "45s"}}
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 2, res.Counts.Succeeded)
	for _, n := range f.Nodes {
		node := nodeOf(t, n)
		require.NotEqual(t, before[n], node.Status.NodeInfo.BootID, "node %s rebooted", n)
		require.False(t, node.Spec.Unschedulable, "node %s uncordoned", n)
		for _, j := range f.Jobs(t, req.Name)[n] {
			require.NotEqual(t, activities.StepReboot, j.Labels[activities.LabelStep], "the reboot Job %s is deleted", j.Name)
		}
	}
}

// TestRebootThatNeverComesBackIsRebootTimedOut: a node whose reboot does not end is
// rebootTimedOut after maintenance.reboot.timeout, recorded on it, and kept cordoned.
func TestRebootThatNeverComesBackIsRebootTimedOut(t *testing.T) {
	f := NewFleet(t, 1)
	readyBootIDs(t, f.Nodes)
	req := f.Request("reboot-never", time.Second)
	req.Maintenance = &api.Maintenance{Cordon: true,
		Reboot: &api.Reboot{JobTemplate: rebootTemplate("never"), Timeout: "8s"}}
	res, err := Result(t, Start(t, req))
	require.Error(t, err)
	require.Len(t, res.Failures, 1)
	require.Equal(t, api.OutcomeRebootTimedOut, res.Failures[0].Outcome, "%+v", res.Failures[0])
	require.Contains(t, res.Failures[0].Message, "did not come back")
	require.True(t, strings.HasSuffix(f.Markers(t, req.Name)[f.Nodes[0]], ":"+string(api.OutcomeRebootTimedOut)), "marker %q", f.Markers(t, req.Name)[f.Nodes[0]])
	require.True(t, nodeOf(t, f.Nodes[0]).Spec.Unschedulable, "kept cordoned")
}

// TestOnSuccessLabelsTheNodeAndLiftsItsStartupTaint: after success the node carries the label,
// the start-up taint is gone, the added taint is there, and a taint not named is untouched.
func TestOnSuccessLabelsTheNodeAndLiftsItsStartupTaint(t *testing.T) {
	f := NewFleet(t, 1)
	n := f.Nodes[0]
	// kwok writes the Node's status meanwhile: the taints go in by update, retried on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := nodeOf(t, n)
		node.Spec.Taints = append(node.Spec.Taints,
			corev1.Taint{Key: "example.com/driver-not-ready", Effect: corev1.TaintEffectNoSchedule},
			corev1.Taint{Key: "example.com/other", Value: "x", Effect: corev1.TaintEffectPreferNoSchedule})
		_, err := stack.Kube.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
	req := f.Request("onsuccess", time.Second)
	// The Job tolerates the start-up taint: it is what puts the driver right.
	req.JobTemplate = strings.Replace(req.JobTemplate, "      restartPolicy: Never\n",
		"      restartPolicy: Never\n      tolerations:\n      - key: example.com/driver-not-ready\n        operator: Exists\n", 1)
	req.Maintenance = &api.Maintenance{Cordon: true, OnSuccess: &api.OnSuccess{
		Labels:       map[string]string{"example.com/gpu-driver": "550.54"},
		RemoveTaints: []string{"example.com/driver-not-ready"},
		AddTaints:    []api.Taint{{Key: "example.com/driver", Value: "550.54", Effect: "PreferNoSchedule"}}}}
	Succeeded(t, Start(t, req))
	node := nodeOf(t, n)
	require.Equal(t, "550.54", node.Labels["example.com/gpu-driver"])
	var keys []string
	for _, tt := range node.Spec.Taints {
		keys = append(keys, tt.Key+"="+tt.Value+":"+string(tt.Effect))
	}
	require.NotContains(t, strings.Join(keys, " "), "driver-not-ready", "the start-up taint is lifted")
	require.Contains(t, keys, "example.com/other=x:PreferNoSchedule", "a taint not named stays")
	require.Contains(t, keys, "example.com/driver=550.54:PreferNoSchedule", "the added taint")
	require.False(t, node.Spec.Unschedulable)
}

// TestBlockingPodHoldsItsNodeUntilItEnds: a node running a Pod the gate names does not start
// (no cordon, no Job, its step query says blockingPods) until that Pod has ended.
func TestBlockingPodHoldsItsNodeUntilItEnds(t *testing.T) {
	f := NewFleet(t, 1)
	n := f.Nodes[0]
	ctx := context.Background()
	pod := runBlockingPod(t, f, n, "training", "8")
	req := f.Request("blocking", time.Second)
	req.Maintenance = &api.Maintenance{Cordon: true}
	req.Gates = &api.Gates{BlockingPods: &api.BlockingPodsGate{Selector: "app=training", Timeout: "45s"}}
	run := Start(t, req)
	waitFor(t, 30*time.Second, "the node waiting at blockingPods", func() bool {
		v, err := stack.Temporal.QueryWorkflow(ctx, api.NodeWorkflowID(n), "", api.QueryNodeStep)
		var step api.NodeStep
		return err == nil && v.Get(&step) == nil && step.Step == api.NodeStepBlockingPods
	})
	require.False(t, nodeOf(t, n).Spec.Unschedulable, "not cordoned while blocked")
	require.Empty(t, f.Jobs(t, req.Name)[n], "no Job while blocked")
	Succeeded(t, run)
	p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, corev1.PodSucceeded, p.Status.Phase)
	ended := p.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time
	jobs := f.Jobs(t, req.Name)[n]
	require.Len(t, jobs, 1)
	require.False(t, jobs[0].CreationTimestamp.Time.Before(ended.Truncate(time.Second)), "the Job (%v) came after the blocking Pod ended (%v)", jobs[0].CreationTimestamp.Time, ended)
}

// runBlockingPod runs a Pod labelled app=name on node for runSeconds, and waits until it runs.
func runBlockingPod(t *testing.T, f *Fleet, node, name, runSeconds string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.Namespace, Labels: map[string]string{"app": name, watchedLabel: "true"},
			Annotations: map[string]string{"noderollout.dev/run-seconds": runSeconds}},
		Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: name, Image: "busybox"}}},
	}
	_, err := stack.Kube.CoreV1().Pods(f.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the "+name+" Pod running", func() bool {
		p, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	return pod
}

// TestFailingCheckJobFailsItsNode: a check Job that fails makes its node checkFailed, recorded
// on it and charged to the failure budget (the rollout fails), the node kept cordoned.
func TestFailingCheckJobFailsItsNode(t *testing.T) {
	f := NewFleet(t, 1)
	n := f.Nodes[0]
	req := f.Request("check", time.Second)
	req.Maintenance = &api.Maintenance{Cordon: true}
	req.Gates = &api.Gates{CheckJob: &api.CheckJobGate{JobTemplate: JobTemplate(time.Second, map[string]string{"noderollout.dev/exit-code": "3"}), Timeout: "30s"}}
	res, err := Result(t, Start(t, req))
	require.Error(t, err)
	require.Equal(t, 1, res.Counts.Failed)
	require.Len(t, res.Failures, 1)
	require.Equal(t, api.OutcomeCheckFailed, res.Failures[0].Outcome, "%+v", res.Failures[0])
	require.Equal(t, api.ErrCheckFailed, res.Failures[0].Reason)
	require.True(t, strings.HasSuffix(f.Markers(t, req.Name)[n], ":"+string(api.OutcomeCheckFailed)), "marker %q", f.Markers(t, req.Name)[n])
	require.True(t, nodeOf(t, n).Spec.Unschedulable, "kept cordoned")
	var steps []string
	for _, j := range f.Jobs(t, req.Name)[n] {
		steps = append(steps, j.Labels[activities.LabelStep])
	}
	require.False(t, slices.Contains(steps, activities.StepCheck), "the check Job is deleted: %v", steps)
}

// TestRebootSurvivesAWorkerCrash: the only worker is killed while its node waits for the
// reboot (the node down, its boot ID already new); a worker started afterwards resumes the
// wait with the boot ID recorded before the reboot Job, and the node reboots exactly once.
func TestRebootSurvivesAWorkerCrash(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 1)
	n := f.Nodes[0]
	before := readyBootIDs(t, f.Nodes)[n]
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	seen := map[string]bool{}
	var seenMu sync.Mutex
	go func() { // every boot ID the node shows, read more often than it can reboot
		for ctx.Err() == nil {
			if node, err := stack.Kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err == nil {
				seenMu.Lock()
				seen[node.Status.NodeInfo.BootID] = true
				seenMu.Unlock()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	req := f.Request("reboot-crash", time.Second)
	req.Maintenance = &api.Maintenance{Cordon: true, Reboot: &api.Reboot{JobTemplate: rebootTemplate("8s"), Timeout: "50s"}}
	run := StartOn(t, req, queue)
	waitFor(t, 30*time.Second, "the node down in its reboot", func() bool {
		ready, id := nodeState(t, n)
		return ready == corev1.ConditionFalse && id != before
	})
	ws[0].Kill()
	restarted, err := StartWorker(ws[0].Name+"-restarted", "--task-queue", queue)
	require.NoError(t, err)
	t.Cleanup(func() { _ = restarted.Stop() })
	res := Succeeded(t, run)
	require.Equal(t, 1, res.Counts.Succeeded)
	stop()
	seenMu.Lock()
	defer seenMu.Unlock()
	require.Len(t, seen, 2, "one reboot: the boot before and one after (%v)", seen)
	require.False(t, nodeOf(t, n).Spec.Unschedulable, "uncordoned")
}
