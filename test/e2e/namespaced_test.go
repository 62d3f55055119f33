//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/deploy"
)

// namespacedRollout applies the namespaced overlay's RBAC (its Job-namespace Role and
// RoleBinding moved into a test namespace), shows that the worker's ServiceAccount can then do
// exactly what those rules say — Jobs, Pods and ConfigMaps in that namespace only — and runs
// rollouts with a worker acting as the ServiceAccount, its Job watch confined to the namespace.
func namespacedRollout(t *testing.T, a *applier) {
	ctx := context.Background()
	f := NewFleet(t, 4)
	objs := renderKustomization(t, deploy.NamespacedKustomization)
	var rbac []*unstructured.Unstructured
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		o = o.DeepCopy()
		if o.GetNamespace() == deploy.JobNamespace {
			o.SetNamespace(f.Namespace)
		}
		rbac = append(rbac, o)
	}
	clusterRules, eventRules, jobRules := rulesOf(t, rbac, f.Namespace)
	require.NotEmpty(t, jobRules)
	applyReal(t, a, rbac)

	match := func(rules []rbacv1.PolicyRule, x access) bool {
		resource := x.resource
		if x.subresource != "" {
			resource += "/" + x.subresource
		}
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, x.group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, x.verb)
		})
	}
	checkAccess(t, serviceAccountUser(workerSA), accessUniverse(f.Namespace), func(x access) bool {
		return match(clusterRules, x) ||
			(x.namespace == activities.EventNamespace && match(eventRules, x)) ||
			(x.namespace == f.Namespace && match(jobRules, x))
	})

	kubeconfig := writeImpersonatingKubeconfig(t, serviceAccountUser(workerSA))
	queue := "noderollout-ns-" + rand.String(6)
	policyWorker(t, "namespaced", queue,
		fmt.Sprintf("namespaces: {%s: {}}\nimages: [docker.io/library/busybox]\n", f.Namespace),
		"--kubeconfig", kubeconfig, "--job-namespaces", f.Namespace)

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "ns-template", Namespace: f.Namespace},
		Data:       map[string]string{activities.DefaultTemplateKey: JobTemplate(time.Second, nil)},
	}
	_, err := stack.Kube.CoreV1().ConfigMaps(f.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	req := f.Request("ns-"+rand.String(4), time.Second)
	req.JobTemplate, req.JobTemplateRef = "", &api.TemplateRef{Name: cm.Name}
	req.KeepJobs = string(api.KeepNever)
	res := Succeeded(t, startOn(t, queue, req))
	require.Equal(t, 4, res.Counts.Succeeded)
	for node, marker := range f.Markers(t, req.Name) {
		require.Equal(t, jobspec.NodeMarker(res.TemplateHash, string(api.OutcomeSucceeded)), marker, node)
	}

	failing := f.Request("ns-fail-"+rand.String(4), time.Second)
	failing.NodeSelector, failing.Nodes = "", f.Nodes[:2]
	failing.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/exit-code": "7"})
	failing.MaxFailures = "100%"
	res = Succeeded(t, startOn(t, queue, failing))
	require.Equal(t, 2, res.Counts.Failed)
	for _, r := range res.Failures {
		require.NotNil(t, r.ExitCode, "node %s: the failed Job's Pods were listed in the namespace", r.Node)
		require.EqualValues(t, 7, *r.ExitCode)
	}

	elsewhere := f.Request("ns-elsewhere-"+rand.String(4), time.Second)
	elsewhere.Namespace = activities.EventNamespace
	_, err = Result(t, startOn(t, queue, elsewhere))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	require.Equal(t, api.ErrPolicyDenied, appErr.Type(), "a namespace without a Role is outside the policy too")
}

// namespacedRules are the namespaced overlay's ClusterRole rules, its Role's in "default" and
// its Role's in the Job namespace.
func namespacedRules(t *testing.T) (cluster, events, jobs []rbacv1.PolicyRule) {
	t.Helper()
	cluster, events, jobs = rulesOf(t, renderKustomization(t, deploy.NamespacedKustomization), deploy.JobNamespace)
	require.NotEmpty(t, cluster)
	require.NotEmpty(t, events)
	require.NotEmpty(t, jobs)
	return cluster, events, jobs
}

// rulesOf are the rules of the ClusterRoles, of the Roles in the Events' namespace and of the
// Roles in jobNamespace, among objs; any other Role fails the test.
func rulesOf(t *testing.T, objs []*unstructured.Unstructured, jobNamespace string) (cluster, events, jobs []rbacv1.PolicyRule) {
	t.Helper()
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r))
			cluster = append(cluster, r.Rules...)
		case "Role":
			var r rbacv1.Role
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &r))
			if r.Namespace == jobNamespace {
				jobs = append(jobs, r.Rules...)
			} else {
				require.Equal(t, activities.EventNamespace, r.Namespace)
				events = append(events, r.Rules...)
			}
		}
	}
	return cluster, events, jobs
}
