//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// tenants makes n Pods of app on node, pinned by nodeName (no scheduler runs); restartPolicy
// Always keeps them running on kwok until evicted, and they go 1 s after. A ReplicaSet of app
// is their controller, as a drain without force evicts only managed Pods; no ReplicaSet
// controller runs on the stack, so it never makes Pods of its own.
func tenants(t *testing.T, ns, app, node string, n int) []string {
	t.Helper()
	owner := tenantOwner(t, ns, app)
	var names []string
	grace := int64(1)
	for i := range n {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", app, node[len(node)-5:], i), Namespace: ns, Labels: map[string]string{"app": app},
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
				Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		}
		_, err := stack.Kube.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
		require.NoError(t, err)
		names = append(names, pod.Name)
	}
	return names
}

// tenantOwner is the controller reference to the ReplicaSet of app in ns, made if missing.
func tenantOwner(t *testing.T, ns, app string) metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	rs, err := stack.Kube.AppsV1().ReplicaSets(ns).Get(ctx, app, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		labels := map[string]string{"app": app}
		rs, err = stack.Kube.AppsV1().ReplicaSets(ns).Create(ctx, &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
			Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}},
		}, metav1.CreateOptions{})
	}
	require.NoError(t, err)
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes, BlockOwnerDeletion: &yes}
}

func budget(t *testing.T, ns, app string, minAvailable int) {
	t.Helper()
	min := intstr.FromInt32(int32(minAvailable))
	_, err := stack.Kube.PolicyV1().PodDisruptionBudgets(ns).Create(context.Background(), &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &min, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the disruption controller to compute budget "+app, func() bool {
		pdb, err := stack.Kube.PolicyV1().PodDisruptionBudgets(ns).Get(context.Background(), app, metav1.GetOptions{})
		return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.ExpectedPods > 0
	})
}

// replaceEvicted plays the tenant's controller: each of the Pods that leaves is made again on
// spare, so the budget allows the next eviction once the replacement runs. It returns when
// stop closes, with the times each Pod was seen gone.
func replaceEvicted(t *testing.T, ns, spare string, pods []string, stop <-chan struct{}) func() map[string]time.Time {
	var mu sync.Mutex
	gone := map[string]time.Time{}
	done := make(chan struct{})
	owner := tenantOwner(t, ns, "web")
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			for _, name := range pods {
				mu.Lock()
				_, seen := gone[name]
				mu.Unlock()
				if seen {
					continue
				}
				if _, err := stack.Kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					mu.Lock()
					gone[name] = time.Now()
					mu.Unlock()
					grace := int64(1)
					_, _ = stack.Kube.CoreV1().Pods(ns).Create(context.Background(), &corev1.Pod{
						ObjectMeta: metav1.ObjectMeta{Name: name + "-r", Namespace: ns, Labels: map[string]string{"app": "web"},
							OwnerReferences: []metav1.OwnerReference{owner}},
						Spec: corev1.PodSpec{NodeName: spare, RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: &grace,
							Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
					}, metav1.CreateOptions{})
				}
			}
		}
	}()
	return func() map[string]time.Time {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return gone
	}
}

func nodeNow(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := stack.Kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

func cordon(t *testing.T, name string) {
	t.Helper()
	_, err := stack.Kube.CoreV1().Nodes().Patch(context.Background(), name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
	require.NoError(t, err)
}

func maintenanceRequest(f *Fleet, name string, nodes ...string) api.RolloutRequest {
	req := f.Request(name, time.Second)
	req.NodeSelector, req.Nodes = "", nodes
	req.Maintenance = &api.Maintenance{Drain: &api.Drain{Timeout: "20s"}, Soak: "3s"}
	return req
}

// blockedDrain makes one node whose one tenant is under a budget that never allows an
// eviction, and a maintenance request that drains it.
func blockedDrain(t *testing.T, name string) (f *Fleet, node, tenant string, req api.RolloutRequest) {
	t.Helper()
	f = NewFleet(t, 1)
	node = f.Nodes[0]
	tenant = tenants(t, f.Namespace, "db", node, 1)[0]
	budget(t, f.Namespace, "db", 1)
	return f, node, tenant, maintenanceRequest(f, name, node)
}

// TestMaintenanceDrainsHonouringTheBudgetAndLeavesNodesAsFound: node 0's three tenants, under
// a budget allowing one disruption at a time, are evicted one by one (each once its
// replacement runs elsewhere) before the Job is created; node 0 is uncordoned after; node 1,
// cordoned by an admin before, is rolled out and stays cordoned.
func TestMaintenanceDrainsHonouringTheBudgetAndLeavesNodesAsFound(t *testing.T) {
	f := NewFleet(t, 3)
	drained, adminCordoned, spare := f.Nodes[0], f.Nodes[1], f.Nodes[2]
	cordon(t, adminCordoned)
	pods := tenants(t, f.Namespace, "web", drained, 3)
	budget(t, f.Namespace, "web", 2)
	stop := make(chan struct{})
	goneAt := replaceEvicted(t, f.Namespace, spare, pods, stop)

	req := maintenanceRequest(f, "drain", drained, adminCordoned)
	res := Succeeded(t, Start(t, req))
	close(stop)
	gone := goneAt()
	require.Equal(t, 2, res.Counts.Succeeded)

	jobs := f.Jobs(t, req.Name)
	require.Len(t, jobs[drained], 1)
	created := jobs[drained][0].CreationTimestamp.Time
	require.Len(t, gone, 3, "every tenant was evicted")
	var times []time.Time
	for _, p := range pods {
		require.True(t, gone[p].Before(created.Add(time.Second)), "tenant %s left (%v) before the Job was created (%v)", p, gone[p], created)
		times = append(times, gone[p])
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	require.Greater(t, times[2].Sub(times[0]), 500*time.Millisecond, "the budget let them go one at a time")

	n := nodeNow(t, drained)
	require.False(t, n.Spec.Unschedulable, "the node we cordoned is uncordoned")
	require.NotContains(t, n.Annotations, activities.CordonedByKey)
	n = nodeNow(t, adminCordoned)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.NotContains(t, n.Annotations, activities.CordonedByKey)
}

// TestMaintenanceBudgetThatNeverAllowsIsDrainTimedOut: no Job is ever made, the node stays
// cordoned (onFailure keepCordoned, the default), and its tenant still runs.
func TestMaintenanceBudgetThatNeverAllowsIsDrainTimedOut(t *testing.T) {
	f, node, tenant, req := blockedDrain(t, "blocked")
	req.MaxFailures = "1"
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 1, res.Counts.Failed)
	require.Len(t, res.Failures, 1)
	require.Equal(t, api.OutcomeDrainTimedOut, res.Failures[0].Outcome)
	require.Contains(t, res.Failures[0].Message, tenant)
	require.Empty(t, f.Jobs(t, req.Name), "no Job is created on a node that did not drain")
	n := nodeNow(t, node)
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, req.Name, n.Annotations[activities.CordonedByKey])
	_, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(context.Background(), tenant, metav1.GetOptions{})
	require.NoError(t, err)
}

// TestMaintenanceNodeUnhealthyDuringSoakIsUnhealthy: the node meets its conditions after the
// Job, then one turns False during the soak. kwok puts Ready back to True at once, so the test
// turns a condition of its own instead.
func TestMaintenanceNodeUnhealthyDuringSoakIsUnhealthy(t *testing.T) {
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	const cond = "E2EMaintenanceHealthy"
	setCondition := func(status string) {
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":"E2E","lastTransitionTime":%q}]}}`, cond, status, time.Now().UTC().Format(time.RFC3339))
		_, err := stack.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		require.NoError(t, err)
	}
	waitFor(t, 30*time.Second, "kwok to ready the node", func() bool {
		for _, c := range nodeNow(t, node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	setCondition("True")
	req := maintenanceRequest(f, "soak", node)
	req.Maintenance.Drain = nil
	req.Maintenance.Cordon = true
	req.Maintenance.Soak = "15s"
	req.Maintenance.Health = &api.HealthGate{Timeout: "10s", Conditions: map[string]string{"Ready": "True", cond: "True"}}
	req.MaxFailures = "1"
	run := Start(t, req)
	waitFor(t, time.Minute, "the node's Job to finish", func() bool {
		jobs := f.Jobs(t, req.Name)[node]
		return len(jobs) == 1 && jobs[0].Status.Succeeded == 1
	})
	setCondition("False")
	res := Succeeded(t, run)
	require.Len(t, res.Failures, 1)
	require.Equal(t, api.OutcomeUnhealthy, res.Failures[0].Outcome)
	require.Contains(t, res.Failures[0].Message, cond+"=False")
	require.True(t, nodeNow(t, node).Spec.Unschedulable, "kept cordoned after failing")
}

// TestMaintenanceAbortDuringABlockedDrain: the node's tenant is under a budget that never
// allows an eviction, the drain may take 10 minutes, and the rollout is aborted while the
// drain waits. The abort reaches the drain within a heartbeat (seconds), no Job is made, the
// tenant is never evicted, and only once the drain has stopped is the node left as onFailure
// says (uncordon: schedulable, our mark gone).
func TestMaintenanceAbortDuringABlockedDrain(t *testing.T) {
	f, node, tenant, req := blockedDrain(t, "abort-drain")
	req.Maintenance.Drain.Timeout = "10m"
	req.Maintenance.OnFailure = api.OnFailureUncordon
	run := Start(t, req)

	waitFor(t, time.Minute, "the drain to be under way on a node we cordoned", func() bool {
		d, err := stack.Temporal.DescribeWorkflow(context.Background(), api.NodeWorkflowID(node), "")
		if err != nil {
			return false
		}
		for _, a := range d.RawResponse.GetPendingActivities() {
			if a.GetActivityType().GetName() == "DrainNode" && a.GetState() == enumspb.PENDING_ACTIVITY_STATE_STARTED {
				n := nodeNow(t, node)
				return n.Spec.Unschedulable && n.Annotations[activities.CordonedByKey] == req.Name
			}
		}
		return false
	})
	// starter status names the node and its step, read from the node workflow.
	var shown string
	// The tenant under its budget is the one Pod the drain waits for.
	waitFor(t, 30*time.Second, "starter status to show the node draining", func() bool {
		out, code := runStarter(t, "status", req.Name)
		shown = out
		return code == 0 && strings.Contains(out, "IN FLIGHT (1)") && regexp.MustCompile(`(?m)^`+node+`\s+drain \(1 Pod left\)\s`).MatchString(out)
	})
	t.Logf("starter status mid-drain:\n%s", shown)
	abortedAt := time.Now()
	out, code := runStarter(t, "abort", req.Name, "--reason", "e2e abort during drain")
	require.Equal(t, 0, code, out)
	_, err := Result(t, run)
	took := time.Since(abortedAt)
	require.Error(t, err)
	require.Contains(t, strings.ToLower(err.Error()), "cancel")
	t.Logf("the rollout ended %v after the abort", took.Round(100*time.Millisecond))
	// The drain heartbeats every round (1-10 s) and the worker sends a heartbeat within 5 s:
	// about 10 s, with the hops around it. 24 s when the SDK held heartbeats back for 80 % of
	// the 30 s heartbeat timeout.
	require.Less(t, took, 20*time.Second, "the abort reached the drain within a heartbeat")

	d, err := stack.Temporal.DescribeWorkflow(context.Background(), api.NodeWorkflowID(node), "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, d.RawResponse.GetWorkflowExecutionInfo().GetStatus())
	drainEnd, uncordon := drainEndAndUncordon(t, node)
	require.Positive(t, drainEnd, "the drain activity ended (cancelled), in the node's history")
	require.Positive(t, uncordon, "the node was uncordoned, in the node's history")
	require.Less(t, drainEnd, uncordon, "the abort waited for the drain to stop before lifting the cordon")
	require.Empty(t, f.Jobs(t, req.Name), "no Job on a node whose drain was aborted")
	n := nodeNow(t, node)
	require.False(t, n.Spec.Unschedulable, "onFailure uncordon lifts our cordon after an abort")
	require.NotContains(t, n.Annotations, activities.CordonedByKey)
	pod, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(context.Background(), tenant, metav1.GetOptions{})
	require.NoError(t, err, "the tenant under the budget was never evicted")
	require.Nil(t, pod.DeletionTimestamp)
}

// drainEndAndUncordon reads the node's latest NodeRollout history for the event that ended its
// DrainNode activity and the marker of its UncordonNode local activity; 0 where there is none.
func drainEndAndUncordon(t *testing.T, node string) (drainEnd, uncordon int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := stack.Temporal.GetWorkflowHistory(ctx, api.NodeWorkflowID(node), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var drainScheduled int64
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		var scheduled int64
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "DrainNode" {
				drainScheduled = e.GetEventId()
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED:
			scheduled = e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			scheduled = e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED:
			scheduled = e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			scheduled = e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId()
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			for _, p := range e.GetMarkerRecordedEventAttributes().GetDetails()["data"].GetPayloads() {
				if strings.Contains(string(p.GetData()), `"UncordonNode"`) && uncordon == 0 {
					uncordon = e.GetEventId()
				}
			}
		}
		if scheduled != 0 && scheduled == drainScheduled {
			drainEnd = e.GetEventId()
		}
	}
	return drainEnd, uncordon
}

// TestTerminatedMaintainedNodeIsRecordedFailed: a node's Job records its success on the Node
// before the soak; an operator who then terminates the node's workflow (the UI's Terminate)
// leaves no clean-up to run. The rollout records the node failed on the Node, so a re-run
// covers it instead of skipping it as done; the node keeps our cordon (onFailure keepCordoned).
func TestTerminatedMaintainedNodeIsRecordedFailed(t *testing.T) {
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	req := f.Request("terminated", time.Second)
	req.NodeSelector, req.Nodes = "", []string{node}
	req.Maintenance = &api.Maintenance{Cordon: true, Soak: "10m"}
	run := Start(t, req)
	ctx := context.Background()
	waitFor(t, 60*time.Second, node+" soaking", func() bool {
		v, err := stack.Temporal.QueryWorkflow(ctx, api.NodeWorkflowID(node), "", api.QueryNodeStep)
		var step api.NodeStep
		return err == nil && v.Get(&step) == nil && step.Step == api.NodeStepSoak
	})
	marker := jobspec.NodeMarkerKey(req.Name)
	require.True(t, strings.HasSuffix(nodeNow(t, node).Annotations[marker], ":succeeded"), "the Job's success is on the Node while it soaks")
	require.NoError(t, stack.Temporal.TerminateWorkflow(ctx, api.NodeWorkflowID(node), "", "an operator ends a stuck-looking node"))

	res, err := Result(t, run)
	require.Error(t, err, "a failed node over a budget of 0")
	require.Len(t, res.Failures, 1)
	require.Equal(t, api.ReasonNodeWorkflowTerminated, res.Failures[0].Reason)
	n := nodeNow(t, node)
	require.True(t, strings.HasSuffix(n.Annotations[marker], ":"+string(api.OutcomeFailed)), "marker %q", n.Annotations[marker])
	require.True(t, n.Spec.Unschedulable, "our cordon stays, as onFailure keepCordoned says")
	require.Equal(t, req.Name, n.Annotations[activities.CordonedByKey])
}
