//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// runActivity runs one activity of acts in a test environment against the stack.
func runActivity(t *testing.T, acts *activities.Activities, activity, in any, out any) error {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	val, err := env.ExecuteActivity(activity, in)
	if err != nil || out == nil {
		return err
	}
	return val.Get(out)
}

// afterNodePodList is a transport that runs then once, after the API server has answered the
// first list of the Pods bound to node and before the caller sees the answer.
type afterNodePodList struct {
	next http.RoundTripper
	node string
	then func()
	once sync.Once
}

func (a *afterNodePodList) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/pods") &&
		strings.Contains(req.URL.Query().Get("fieldSelector"), "spec.nodeName="+a.node) {
		a.once.Do(a.then)
	}
	return resp, err
}

// moveTenant deletes the Pod at once and makes it again under the same name on another node,
// as a StatefulSet controller does after a forced deletion.
func moveTenant(t *testing.T, ns, name, to string) types.UID {
	t.Helper()
	ctx := context.Background()
	old, err := stack.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	zero := int64(0)
	require.NoError(t, stack.Kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	waitFor(t, 30*time.Second, "pod "+name+" gone", func() bool {
		_, err := stack.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	again := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: old.Labels, OwnerReferences: old.OwnerReferences},
		Spec: corev1.PodSpec{NodeName: to, RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: old.Spec.TerminationGracePeriodSeconds,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	created, err := stack.Kube.CoreV1().Pods(ns).Create(ctx, again, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NotEqual(t, old.UID, created.UID)
	return created.UID
}

// TestSeamsDrainEvictsOnlyThePodItListed: on a real API server, a Pod the drain listed on its
// node is deleted and made again under the same name on another node before the eviction goes
// out. The eviction carries the listed Pod's UID, so the API server refuses it (409; 429 when a
// PodDisruptionBudget covers a running Pod, as the Eviction API turns a conflict under a budget
// into "try again"), the new Pod is left alone, and the drain ends once its node is empty.
func TestSeamsDrainEvictsOnlyThePodItListed(t *testing.T) {
	for _, withBudget := range []bool{false, true} {
		t.Run(fmt.Sprintf("budget=%v", withBudget), func(t *testing.T) {
			f := NewFleet(t, 2)
			drained, other := f.Nodes[0], f.Nodes[1]
			pod := tenants(t, f.Namespace, "db", drained, 1)[0]
			if withBudget {
				budget(t, f.Namespace, "db", 0)
			}
			var movedUID types.UID
			rc, err := clientcmd.BuildConfigFromFlags("", stack.Kubeconfig)
			require.NoError(t, err)
			rc.Wrap(func(next http.RoundTripper) http.RoundTripper {
				return &afterNodePodList{next: next, node: drained, then: func() { movedUID = moveTenant(t, f.Namespace, pod, other) }}
			})
			kube, err := kubernetes.NewForConfig(rc)
			require.NoError(t, err)
			acts := activities.New(kube)
			acts.DrainRetryInterval = 100 * time.Millisecond

			var res activities.DrainResult
			err = runActivity(t, acts, acts.DrainNode, activities.DrainInput{Node: drained, Namespace: f.Namespace, Deadline: time.Now().Add(30 * time.Second)}, &res)
			require.NoError(t, err)
			require.Empty(t, res.Evicted, "the listed Pod was gone before its eviction; the new one is not ours to evict")
			again, err := stack.Kube.CoreV1().Pods(f.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
			require.NoError(t, err, "the Pod made again elsewhere still runs")
			require.Equal(t, movedUID, again.UID)
			require.Equal(t, other, again.Spec.NodeName)
			require.Nil(t, again.DeletionTimestamp)

			// The API server's own answer to a stale UID, which the unit tests' fake mimics.
			stale := types.UID("not-" + string(again.UID))
			err = stack.Kube.PolicyV1().Evictions(f.Namespace).Evict(context.Background(), &policyv1.Eviction{
				ObjectMeta:    metav1.ObjectMeta{Name: pod, Namespace: f.Namespace},
				DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &stale}},
			})
			require.True(t, apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err), "refused: %v", err)
			t.Logf("an eviction with a stale UID: %v", err)
			_, err = stack.Kube.CoreV1().Pods(f.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
			require.NoError(t, err, "and the Pod stays")
		})
	}
}

// TestSeamsAnAdminsRecordonIsNotOurs: on a real API server, whose managedFields record who set
// spec.unschedulable, a cordon an admin made again (kubectl uncordon, then kubectl cordon)
// under our stale annotation is neither taken over nor lifted; our annotation goes.
func TestSeamsAnAdminsRecordonIsNotOurs(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	acts := activities.New(stack.Kube)
	var c activities.CordonResult
	require.NoError(t, runActivity(t, acts, acts.CordonNode, activities.NodeInput{Rollout: "e2e-a", Node: node}, &c))
	require.True(t, c.WeCordoned)
	for _, patch := range []string{`{"spec":{"unschedulable":null}}`, `{"spec":{"unschedulable":true}}`} {
		_, err := stack.Kube.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "kubectl-cordon"})
		require.NoError(t, err)
	}
	require.Equal(t, "e2e-a", nodeNow(t, node).Annotations[activities.CordonedByKey])

	require.NoError(t, runActivity(t, acts, acts.CordonNode, activities.NodeInput{Rollout: "e2e-b", Node: node}, &c))
	require.False(t, c.WeCordoned, "the admin's cordon is not taken over")
	var u activities.UncordonResult
	require.NoError(t, runActivity(t, acts, acts.UncordonNode, activities.NodeInput{Rollout: "e2e-a", Node: node}, &u))
	require.False(t, u.Uncordoned)
	n := nodeNow(t, node)
	require.True(t, n.Spec.Unschedulable, "the admin's cordon stays")
	require.NotContains(t, n.Annotations, activities.CordonedByKey)

	// Our own cordon is still lifted.
	require.NoError(t, runActivity(t, acts, acts.CordonNode, activities.NodeInput{Rollout: "e2e-c", Node: f.AddNodes(t, 1, nil)[0]}, &c))
	require.True(t, c.WeCordoned)
	require.NoError(t, runActivity(t, acts, acts.UncordonNode, activities.NodeInput{Rollout: "e2e-c", Node: f.Nodes[1]}, &u))
	require.True(t, u.Uncordoned)
	require.False(t, nodeNow(t, f.Nodes[1]).Spec.Unschedulable)
}

// TestGuardrailPolicyJudgesTheDrainBeforeTheCordon: a worker whose policy lets the rollout's
// namespace drain, evicting only its own Pods, keeps off a control-plane node and a node with
// another namespace's Pod: each is refused (PolicyDenied) before anything is written to it, so
// neither is cordoned, no Pod is evicted and no Job made; the third node is drained and
// rolled out.
func TestGuardrailPolicyJudgesTheDrainBeforeTheCordon(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(t, 2)
	cp := f.AddNodes(t, 1, map[string]string{"node-role.kubernetes.io/control-plane": ""})[0]
	fine, foreign := f.Nodes[0], f.Nodes[1]
	otherNS := f.Namespace + "-x"
	_, err := stack.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: otherNS}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stack.Kube.CoreV1().Namespaces().Delete(context.Background(), otherNS, metav1.DeleteOptions{})
	})
	ours := tenants(t, f.Namespace, "web", fine, 1)
	theirs := tenants(t, otherNS, "db", foreign, 1)
	onCP := tenants(t, f.Namespace, "sys", cp, 1)

	queue := "e2e-guard-drain-" + rand.String(4)
	policyWorker(t, "guard-drain", queue, fmt.Sprintf("namespaces:\n  %s: {drain: true, evictNamespaces: [%s]}\n", f.Namespace, f.Namespace))
	req := maintenanceRequest(f, "guard-drain", fine, foreign, cp)
	req.MaxFailures = "2"
	res, err := Result(t, StartOn(t, req, queue))
	require.NoError(t, err)
	require.Equal(t, 1, res.Counts.Succeeded)
	require.Equal(t, 2, res.Counts.Failed)
	rules := map[string]string{}
	for _, r := range res.Failures {
		require.Equal(t, api.ErrPolicyDenied, r.Reason, "%s: %s", r.Node, r.Message)
		rules[r.Node] = r.Message
	}
	require.Contains(t, rules[foreign], `"`+policy.RuleEvictNamespaces+`"`)
	require.Contains(t, rules[cp], `"`+policy.RuleProtectedNodeLabels+`"`)
	for _, n := range []string{foreign, cp} {
		node := nodeNow(t, n)
		require.False(t, node.Spec.Unschedulable, "%s was never cordoned", n)
		require.NotContains(t, node.Annotations, activities.CordonedByKey)
		require.Empty(t, f.Jobs(t, req.Name)[n], "no Job on %s", n)
	}
	for ns, pods := range map[string][]string{otherNS: theirs, f.Namespace: onCP} {
		_, err := stack.Kube.CoreV1().Pods(ns).Get(ctx, pods[0], metav1.GetOptions{})
		require.NoError(t, err, "%s/%s was not evicted", ns, pods[0])
	}
	_, err = stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, ours[0], metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the drain evicted %s: %v", ours[0], err)
	require.False(t, nodeNow(t, fine).Spec.Unschedulable)
}
