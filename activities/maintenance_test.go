package activities

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/evictable"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// tenantPod is a ReplicaSet's Pod on node.
func tenantPod(name, node string, edit func(*corev1.Pod)) *corev1.Pod {
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant", UID: types.UID("uid-" + name), Labels: map[string]string{"app": "web"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "uid-rs", Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

// evictions makes the fake API server evict like the real one: the Pod goes, unless refuse
// says the (PodDisruptionBudget's) answer is 429 for this try. It records every eviction asked.
type evictions struct {
	cs            *fake.Clientset
	asked         []string
	preconditions []*metav1.Preconditions // of each eviction asked
	refuse        func(pod string, try int) bool
}

func (e *evictions) react(action k8stesting.Action) (bool, runtime.Object, error) {
	if action.GetSubresource() != "eviction" {
		return false, nil, nil
	}
	ev := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
	e.asked = append(e.asked, ev.Name)
	tries := 0
	for _, n := range e.asked {
		if n == ev.Name {
			tries++
		}
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	e.preconditions = append(e.preconditions, ev.DeleteOptions.Preconditions)
	if p := ev.DeleteOptions.Preconditions; p != nil && p.UID != nil {
		// As the API server does: the eviction deletes only the Pod with that UID.
		obj, err := e.cs.Tracker().Get(gvr, ev.Namespace, ev.Name)
		if err != nil {
			return true, nil, err
		}
		if pod := obj.(*corev1.Pod); pod.UID != *p.UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, ev.Name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, pod.UID))
		}
	}
	if e.refuse != nil && e.refuse(ev.Name, tries) {
		return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	}
	return true, nil, e.cs.Tracker().Delete(gvr, ev.Namespace, ev.Name)
}

// answerFirst has answer see every eviction (try counts them from 1) before the fake API
// server does, for a test that needs an answer react does not give: answer (true, err) is the
// server's answer, false leaves the eviction to the server. It returns how many were asked.
func (e *evictions) answerFirst(answer func(try int) (bool, error)) (tries func() int) {
	asked := 0
	e.cs.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		asked++
		handled, err := answer(asked)
		return handled, nil, err
	})
	return func() int { return asked }
}

func drainEnv(t *testing.T, e *evictions, objs ...runtime.Object) *Activities {
	t.Helper()
	e.cs = fake.NewClientset(objs...)
	e.cs.PrependReactor("create", "pods", e.react)
	a := New(e.cs)
	a.DrainRetryInterval = time.Millisecond
	return a
}

func drain(t *testing.T, a *Activities, in DrainInput) (DrainResult, error) {
	t.Helper()
	if in.Deadline.IsZero() {
		in.Deadline = time.Now().Add(time.Minute)
	}
	return execute[DrainResult](t, a, a.DrainNode, in)
}

// cordon and uncordon run CordonNode and UncordonNode for rollout on node, which must not fail.
func cordon(t *testing.T, a *Activities, rollout, node string) CordonResult {
	t.Helper()
	c, err := execute[CordonResult](t, a, a.CordonNode, NodeInput{Rollout: rollout, Node: node})
	require.NoError(t, err)
	return c
}

func uncordon(t *testing.T, a *Activities, rollout, node string) UncordonResult {
	t.Helper()
	u, err := execute[UncordonResult](t, a, a.UncordonNode, NodeInput{Rollout: rollout, Node: node})
	require.NoError(t, err)
	return u
}

func remainingPods(t *testing.T, a *Activities) []string {
	t.Helper()
	list, err := a.Kube.CoreV1().Pods("").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names
}

// TestDrainRetriesEvictionsABudgetRefuses: a 429 is tried again, not given up on or turned
// into a delete.
func TestDrainRetriesEvictionsABudgetRefuses(t *testing.T) {
	e := &evictions{refuse: func(pod string, try int) bool { return pod == "web-1" && try < 3 }}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil), tenantPod("web-2", "n1", nil), tenantPod("other", "n2", nil))
	res, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"tenant/web-1", "tenant/web-2"}, res.Evicted)
	require.Equal(t, 3, countOf(e.asked, "web-1"), "refused twice, evicted on the third try")
	require.Equal(t, []string{"other"}, remainingPods(t, a), "the other node's Pod stays")
	for _, act := range e.cs.Actions() {
		require.NotEqual(t, "delete", act.GetVerb(), "the drain deletes nothing itself")
	}
}

// TestDrainTimesOutOnABudgetThatNeverAllows: the deadline ends the drain with DrainTimedOut
// naming the Pod and the budget's refusal; the Pod is still there.
func TestDrainTimesOutOnABudgetThatNeverAllows(t *testing.T) {
	e := &evictions{refuse: func(string, int) bool { return true }}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil))
	_, err := drain(t, a, DrainInput{Node: "n1", Deadline: time.Now().Add(50 * time.Millisecond)})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, api.ErrDrainTimedOut, appErr.Type())
	require.True(t, appErr.NonRetryable())
	require.Contains(t, appErr.Message(), "tenant/web-1 (")
	require.Contains(t, appErr.Message(), "disruption budget")
	require.Greater(t, len(e.asked), 1, "refused evictions were tried again before the deadline")
	require.Equal(t, []string{"web-1"}, remainingPods(t, a))
}

// TestDrainPassesDaemonSetAndMirrorPods: neither is evicted, and they do not hold the drain up.
func TestDrainPassesDaemonSetAndMirrorPods(t *testing.T) {
	yes := true
	ds := tenantPod("agent", "n1", func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "u", Controller: &yes}}
	})
	mirror := tenantPod("static", "n1", func(p *corev1.Pod) { p.Annotations = map[string]string{evictable.MirrorAnnotation: "h"} })
	e := &evictions{}
	a := drainEnv(t, e, ds, mirror, tenantPod("web-1", "n1", nil))
	res, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant/web-1"}, res.Evicted)
	require.Equal(t, []string{"web-1"}, e.asked)
	require.ElementsMatch(t, []string{"agent", "static"}, remainingPods(t, a))
}

// TestDrainRefusesLocalStorageUnlessAllowed: a Pod with an emptyDir stops the drain before any
// eviction, with an error naming the field that allows it; allowed, it is evicted.
func TestDrainRefusesLocalStorageUnlessAllowed(t *testing.T) {
	scratch := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	}
	drainRefusedUnless(t, tenantPod("cache-1", "n1", scratch), "tenant/cache-1", "maintenance.drain.deleteEmptyDirData",
		DrainInput{Node: "n1", DeleteEmptyDirData: true})
}

// drainRefusedUnless drains node n1, which runs web-1 and pod: the drain is refused before any
// eviction, its error naming why and the field that allows pod; then allowed, it evicts both.
func drainRefusedUnless(t *testing.T, pod *corev1.Pod, why, field string, allowed DrainInput) {
	t.Helper()
	e := &evictions{}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil), pod)
	_, err := drain(t, a, DrainInput{Node: "n1"})
	appErr := requireAppError(t, err, api.ErrDrainRefused, true)
	require.Contains(t, appErr.Message(), why)
	require.Contains(t, appErr.Message(), field)
	require.Empty(t, e.asked, "nothing is evicted when one Pod is refused")

	res, err := drain(t, a, allowed)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"tenant/web-1", pod.Namespace + "/" + pod.Name}, res.Evicted)
}

// TestDrainWaitsForEvictedPodsToGo: an evicted Pod still terminating is not evicted again and
// the drain returns only once it is gone.
func TestDrainWaitsForEvictedPodsToGo(t *testing.T) {
	now := metav1.Now()
	terminating := tenantPod("web-1", "n1", func(p *corev1.Pod) { p.DeletionTimestamp = &now; p.Finalizers = []string{"x"} })
	e := &evictions{}
	a := drainEnv(t, e, terminating)
	lists := 0
	e.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists == 3 {
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			require.NoError(t, e.cs.Tracker().Delete(gvr, "tenant", "web-1"))
		}
		return false, nil, nil
	})
	_, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Empty(t, e.asked)
	require.Equal(t, 3, lists)
}

func countOf(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func cordonEnv(t *testing.T, node *corev1.Node) *Activities {
	t.Helper()
	return New(fake.NewClientset(node))
}

func getNode(t *testing.T, a *Activities, name string) *corev1.Node {
	t.Helper()
	n, err := a.Kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

// TestCordonAndUncordonOnlyWhatWeCordoned: a schedulable node is cordoned and marked, then
// uncordoned and unmarked; a node someone else cordoned is neither marked nor uncordoned.
func TestCordonAndUncordonOnlyWhatWeCordoned(t *testing.T) {
	a := cordonEnv(t, testNode("n1", nil))
	c := cordon(t, a, "kata", "n1")
	require.True(t, c.WeCordoned)
	n := getNode(t, a, "n1")
	require.True(t, n.Spec.Unschedulable)
	require.Equal(t, "kata", n.Annotations[CordonedByKey])

	// A retried cordon is still ours.
	c = cordon(t, a, "kata", "n1")
	require.True(t, c.WeCordoned)

	u := uncordon(t, a, "kata", "n1")
	require.True(t, u.Uncordoned)
	n = getNode(t, a, "n1")
	require.False(t, n.Spec.Unschedulable)
	require.NotContains(t, n.Annotations, CordonedByKey)

	admin := testNode("n2", nil)
	admin.Spec.Unschedulable = true
	b := cordonEnv(t, admin)
	c = cordon(t, b, "kata", "n2")
	require.False(t, c.WeCordoned)
	u = uncordon(t, b, "kata", "n2")
	require.False(t, u.Uncordoned)
	n = getNode(t, b, "n2")
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.NotContains(t, n.Annotations, CordonedByKey)
}

func healthyNode(name string, ready corev1.ConditionStatus) *corev1.Node {
	n := testNode(name, nil)
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}}
	return n
}

// TestHealthSoakFailsWhenTheNodeTurnsNotReady: healthy at first, NotReady during the hold.
func TestHealthSoakFailsWhenTheNodeTurnsNotReady(t *testing.T) {
	cs := fake.NewClientset(healthyNode("n1", corev1.ConditionTrue))
	a := New(cs)
	a.HealthPollInterval = time.Millisecond
	gets := 0
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets == 3 {
			return true, healthyNode("n1", corev1.ConditionFalse), nil
		}
		return false, nil, nil
	})
	_, err := newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1", Conditions: map[string]string{"Ready": "True"},
		HealthyBy: time.Now(), HoldSeconds: 60})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, api.ErrUnhealthy, appErr.Type())
	require.Contains(t, appErr.Message(), "stopped being healthy")
	require.Contains(t, appErr.Message(), "Ready=False")
}

// TestHealthGateTimesOut: a condition never met by HealthyBy is Unhealthy, naming it.
func TestHealthGateTimesOut(t *testing.T) {
	a := New(fake.NewClientset(healthyNode("n1", corev1.ConditionTrue)))
	a.HealthPollInterval = time.Millisecond
	_, err := newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1",
		Conditions: map[string]string{"Ready": "True", "GPUDriverReady": "True"}, HealthyBy: time.Now().Add(20 * time.Millisecond)})
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr)
	require.Equal(t, api.ErrUnhealthy, appErr.Type())
	require.Contains(t, appErr.Message(), "GPUDriverReady is not reported")

	_, err = newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1",
		Conditions: map[string]string{"Ready": "True"}, HealthyBy: time.Now().Add(time.Second)})
	require.NoError(t, err)
}

// TestPlanDrainNamesPodsAndBlockingBudgets is the dry run's view of a node.
func TestPlanDrainNamesPodsAndBlockingBudgets(t *testing.T) {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "tenant"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}
	a := New(fake.NewClientset(pdb, tenantPod("web-1", "n1", nil), tenantPod("web-2", "n2", nil)))
	val, err := newEnv(a).ExecuteActivity(a.PlanDrain, DrainPlanInput{Nodes: []string{"n1", "n3"}})
	require.NoError(t, err)
	var plans []api.DrainPlan
	require.NoError(t, val.Get(&plans))
	require.Equal(t, []api.DrainPlan{{Node: "n1", Evict: []string{"tenant/web-1"}, Blocking: []string{"tenant/web"}}, {Node: "n3"}}, plans)
}

// TestDrainWaitsForATerminatingPodWithLocalStorage: a Pod with an emptyDir that is already
// being deleted (by its Deployment's rollout, say) loses its data whatever the drain does, so
// it does not refuse the drain: the drain waits for it to go like any Pod terminating.
func TestDrainWaitsForATerminatingPodWithLocalStorage(t *testing.T) {
	now := metav1.Now()
	leaving := tenantPod("cache-1", "n1", func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		p.DeletionTimestamp, p.Finalizers = &now, []string{"x"}
	})
	e := &evictions{}
	a := drainEnv(t, e, leaving)
	lists := 0
	e.cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists == 2 { // its grace period ends
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			require.NoError(t, e.cs.Tracker().Delete(gvr, "tenant", "cache-1"))
		}
		return false, nil, nil
	})
	_, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Empty(t, e.asked, "a Pod already terminating is not evicted")
	require.Equal(t, 2, lists)
}

// namespaceTerminating is the API server's answer (the NamespaceLifecycle admission plugin's)
// to an eviction in a namespace being deleted.
func namespaceTerminating(ns string) error {
	err := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "",
		fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	err.ErrStatus.Details.Causes = append(err.ErrStatus.Details.Causes, metav1.StatusCause{
		Type: corev1.NamespaceTerminatingCause, Message: "namespace " + ns + " is being terminated", Field: "metadata.namespace",
	})
	return err
}

// TestDrainWaitsOutATerminatingNamespace: an eviction refused because the Pod's namespace is
// being deleted is no missing permission: the namespace controller deletes the Pod, and the
// drain waits for it instead of failing the node with Forbidden.
func TestDrainWaitsOutATerminatingNamespace(t *testing.T) {
	e := &evictions{}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil))
	tries := e.answerFirst(func(try int) (bool, error) {
		if try == 2 { // meanwhile the namespace controller deleted the Pod
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
			require.NoError(t, e.cs.Tracker().Delete(gvr, "tenant", "web-1"))
		}
		return true, namespaceTerminating("tenant")
	})
	_, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Equal(t, 2, tries())
	require.Empty(t, remainingPods(t, a))
}

// TestPlanDrainNamesABudgetOverTheWholeNamespace: in policy/v1 an empty selector ({}) covers
// every Pod of its namespace, and the Eviction API refuses by it; the dry run names it too. A
// budget without a selector covers nothing.
func TestPlanDrainNamesABudgetOverTheWholeNamespace(t *testing.T) {
	budget := func(name string, sel *metav1.LabelSelector) *policyv1.PodDisruptionBudget {
		return &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
	}
	a := New(fake.NewClientset(budget("all", &metav1.LabelSelector{}), budget("none", nil), tenantPod("web-1", "n1", nil)))
	val, err := newEnv(a).ExecuteActivity(a.PlanDrain, DrainPlanInput{Nodes: []string{"n1"}})
	require.NoError(t, err)
	var plans []api.DrainPlan
	require.NoError(t, val.Get(&plans))
	require.Equal(t, []api.DrainPlan{{Node: "n1", Evict: []string{"tenant/web-1"}, Blocking: []string{"tenant/all"}}}, plans)
}

// TestDrainEvictsOnlyThePodItListed: a StatefulSet's Pod listed on the node is deleted and made
// again under the same name on another node before its eviction goes out. The eviction carries
// the listed Pod's UID, so the API server refuses it for the new Pod (409), which the drain
// takes as the listed Pod gone from the node: the new Pod elsewhere is left alone.
func TestDrainEvictsOnlyThePodItListed(t *testing.T) {
	e := &evictions{}
	a := drainEnv(t, e, tenantPod("db-0", "n1", nil), tenantPod("web-1", "n1", nil))
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	lists := 0
	e.cs.PrependReactor("list", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists != 1 {
			return false, nil, nil
		}
		// Answer the list as it stood, then let the StatefulSet controller replace db-0 on n2.
		_, listed, err := k8stesting.ObjectReaction(e.cs.Tracker())(action)
		require.NoError(t, err)
		require.NoError(t, e.cs.Tracker().Delete(gvr, "tenant", "db-0"))
		moved := tenantPod("db-0", "n2", func(p *corev1.Pod) { p.UID = "uid-db-0-again" })
		require.NoError(t, e.cs.Tracker().Add(moved))
		return true, listed, nil
	})
	res, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant/web-1"}, res.Evicted)
	require.Len(t, e.preconditions, 2)
	for i, p := range e.preconditions {
		require.NotNil(t, p, "eviction %s carries a precondition", e.asked[i])
		require.Equal(t, types.UID("uid-"+e.asked[i]), *p.UID, "eviction %s: the listed Pod's UID", e.asked[i])
	}
	left, err := a.Kube.CoreV1().Pods("tenant").Get(t.Context(), "db-0", metav1.GetOptions{})
	require.NoError(t, err, "the Pod made again on n2 was not evicted")
	require.Equal(t, "n2", left.Spec.NodeName)
}

// TestDrainRetriesAConflictOnThePodItListed: a 409 for a Pod that still has the listed UID is
// no sign that it went: the drain tries it again.
func TestDrainRetriesAConflictOnThePodItListed(t *testing.T) {
	e := &evictions{}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil))
	tries := e.answerFirst(func(try int) (bool, error) {
		if try == 1 {
			return true, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, "web-1", fmt.Errorf("the object has been modified"))
		}
		return false, nil
	})
	res, err := drain(t, a, DrainInput{Node: "n1"})
	require.NoError(t, err)
	require.Equal(t, []string{"tenant/web-1"}, res.Evicted)
	require.Equal(t, 2, tries())
	require.Empty(t, remainingPods(t, a))
}

// daemonPod is a DaemonSet's Pod on node: drains pass it by.
func daemonPod(name, namespace, node string) *corev1.Pod {
	yes := true
	return tenantPod(name, node, func(p *corev1.Pod) {
		p.Namespace = namespace
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "uid-ds", Controller: &yes}}
	})
}

// TestDrainRefusesUnmanagedPodsUnlessForced: a Pod no controller manages would be gone for
// good once evicted, so, as kubectl drain without --force, the drain refuses it before any
// eviction, naming maintenance.drain.force; with force it is evicted.
func TestDrainRefusesUnmanagedPodsUnlessForced(t *testing.T) {
	bare := tenantPod("bare-1", "n1", func(p *corev1.Pod) { p.OwnerReferences = nil })
	drainRefusedUnless(t, bare, "tenant/bare-1 is managed by no controller", "maintenance.drain.force",
		DrainInput{Node: "n1", Force: true})
}

// fieldManagedEnv makes the nodes by server-side apply (their kubelet's, say): from then on the
// fake records every write's field manager in managedFields, as an API server always does.
func fieldManagedEnv(t *testing.T, nodes ...string) *Activities {
	t.Helper()
	cs := fake.NewClientset()
	for _, n := range nodes {
		_, err := cs.CoreV1().Nodes().Apply(t.Context(), corev1ac.Node(n).WithLabels(map[string]string{"kubernetes.io/hostname": n}),
			metav1.ApplyOptions{FieldManager: "kubelet"})
		require.NoError(t, err)
	}
	return New(cs)
}

// adminPatch changes the node as kubectl cordon and uncordon do, under their field manager.
func adminPatch(t *testing.T, a *Activities, node, patch string) {
	t.Helper()
	_, err := a.Kube.CoreV1().Nodes().Patch(t.Context(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-cordon"})
	require.NoError(t, err)
}

// TestAnAdminsRecordonIsNotOurs: we cordon the node; an admin uncordons it (kubectl uncordon)
// and cordons it again (kubectl cordon). Our annotation is still there, but the cordon is the
// admin's now (the API server's managedFields say who set spec.unschedulable): we neither lift
// it at the end nor take it over in a later rollout; our stale annotation is removed.
func TestAnAdminsRecordonIsNotOurs(t *testing.T) {
	a := fieldManagedEnv(t, "n1")
	c := cordon(t, a, "kata", "n1")
	require.True(t, c.WeCordoned)

	adminPatch(t, a, "n1", `{"spec":{"unschedulable":null}}`)
	adminPatch(t, a, "n1", `{"spec":{"unschedulable":true}}`)
	require.Equal(t, "kata", getNode(t, a, "n1").Annotations[CordonedByKey], "the annotation outlived our cordon")

	// A later rollout does not take the admin's cordon over.
	c = cordon(t, a, "other", "n1")
	require.False(t, c.WeCordoned, "the admin's cordon is not ours to take over")

	u := uncordon(t, a, "kata", "n1")
	require.False(t, u.Uncordoned)
	n := getNode(t, a, "n1")
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.NotContains(t, n.Annotations, CordonedByKey, "our stale annotation goes")

	// Our own cordon, kept after a failure and taken over by the next rollout, is still ours.
	b := fieldManagedEnv(t, "n2")
	cordon(t, b, "kata", "n2")
	c = cordon(t, b, "other", "n2")
	require.True(t, c.WeCordoned)
	u = uncordon(t, b, "other", "n2")
	require.True(t, u.Uncordoned)
	require.False(t, getNode(t, b, "n2").Spec.Unschedulable)
}

// outage makes the fake API server answer node GETs as a control plane that is away and comes
// back: the clock moves a minute per GET; GETs from minute `from` to minute `to` fail with a
// 503, and for `unknownFor` GETs after it the node's Ready is Unknown (the node lifecycle
// controller, back before the kubelets, marks them so until they report again).
func outage(t *testing.T, from, to, unknownFor int) *Activities {
	t.Helper()
	cs := fake.NewClientset(healthyNode("n1", corev1.ConditionTrue))
	a := New(cs)
	a.HealthPollInterval = time.Millisecond
	now := t0
	a.Now = func() time.Time { return now }
	gets := 0
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		now = now.Add(time.Minute)
		switch {
		case gets >= from && gets < to:
			return true, nil, apierrors.NewServiceUnavailable("the API server is shutting down")
		case gets >= to && gets < to+unknownFor:
			return true, healthyNode("n1", corev1.ConditionUnknown), nil
		}
		return false, nil, nil
	})
	return a
}

// TestHealthGateAndSoakOutlastAnAPIServerOutage: an outage longer than the gate's timeout, and
// one in the middle of a soak, only delay the check: the time the node could not be read
// counts neither toward the deadline nor toward the soak, and a Ready=Unknown the control
// plane shows for a while after it comes back is no break. A node that is unhealthy once the
// outage is over still fails.
func TestHealthGateAndSoakOutlastAnAPIServerOutage(t *testing.T) {
	ready := map[string]string{"Ready": "True"}
	// The gate: 10 minutes to be healthy, the API server away for 15 from the first read.
	a := outage(t, 1, 16, 1)
	_, err := newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1", Conditions: ready, HealthyBy: t0.Add(10 * time.Minute)})
	require.NoError(t, err, "the gate")

	// The soak: 5 minutes, healthy at first, then the API server away for 15.
	a = outage(t, 3, 18, 2)
	_, err = newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1", Conditions: ready, HealthyBy: t0, HoldSeconds: 300})
	require.NoError(t, err, "the soak")
	require.GreaterOrEqual(t, a.Now().Sub(t0), 17*time.Minute+5*time.Minute, "the soak held 5 observed minutes besides the outage and its grace")

	// Unhealthy for good after the outage: the soak still breaks, once the grace is over.
	a = outage(t, 3, 18, 1000)
	_, err = newEnv(a).ExecuteActivity(a.CheckNodeHealth, HealthInput{Node: "n1", Conditions: ready, HealthyBy: t0, HoldSeconds: 300})
	appErr := requireAppError(t, err, api.ErrUnhealthy, true)
	require.Contains(t, appErr.Message(), "Ready=Unknown")
}

// The drain heartbeats how many Pods it evicted and how many it still waits for, so starter
// status can say "drain (2 Pods left)".
func TestDrainHeartbeatsThePodsLeft(t *testing.T) {
	e := &evictions{refuse: func(pod string, try int) bool { return pod == "web-1" && try < 3 }}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil), tenantPod("web-2", "n1", nil), tenantPod("other", "n2", nil))
	env := newEnv(a)
	var mu sync.Mutex
	var beats [][2]int
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var evicted, left int
		if details.Get(&evicted, &left) == nil {
			mu.Lock()
			beats = append(beats, [2]int{evicted, left})
			mu.Unlock()
		}
	})
	_, err := env.ExecuteActivity(a.DrainNode, DrainInput{Node: "n1", Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	// The SDK sends the first heartbeat at once and holds later ones back; the first says
	// that none was evicted yet and both of the node's Pods are left.
	require.NotEmpty(t, beats)
	require.Equal(t, [2]int{0, 2}, beats[0])
}
