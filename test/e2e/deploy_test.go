//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/deploy"
)

// The identities deploy/base creates, and the probe identity whose rules the verb checks vary.
const (
	deployNamespace = "noderollout"
	workerSA        = "noderollout-worker"
	probeSA         = "noderollout-e2e-probe"
	e2eFieldManager = "noderollout-e2e"
)

func serviceAccountUser(sa string) string {
	return "system:serviceaccount:" + deployNamespace + ":" + sa
}

// TestDeployManifests applies deploy/ to the local API server: every kustomization with
// server-side dry-run (admission, validation and the restricted Pod Security Standard
// included), then the worker's Namespace, ServiceAccount and RBAC for real. It then shows that
// a worker holding only those permissions runs a rollout, that the ServiceAccount can do
// exactly what the rules list, and that each listed verb is needed by the activity that uses it.
func TestDeployManifests(t *testing.T) {
	ctx := context.Background()
	a := newApplier(t)
	base := renderKustomization(t, "base")

	waitNamespaceGone(t, deployNamespace) // a previous run's namespace may still be terminating
	applyReal(t, a, objectsOf(base, "Namespace"))
	t.Cleanup(func() { deleteDeployed(t, base) })
	// Namespaced objects can only be dry-run into a namespace that exists, and a Pod needs its
	// ServiceAccount.
	applyReal(t, a, objectsOf(base, "ServiceAccount"))

	t.Run("ServerSideDryRun", func(t *testing.T) {
		for _, k := range deploy.Kustomizations {
			objs := base
			if k != "base" {
				objs = renderKustomization(t, k)
			}
			if k == deploy.NamespacedKustomization {
				// Its Job namespace must exist for the Role in it to be dry-run.
				jobNS := slices.DeleteFunc(objectsOf(objs, "Namespace"), func(o *unstructured.Unstructured) bool { return o.GetName() != deploy.JobNamespace })
				applyReal(t, a, jobNS)
				t.Cleanup(func() { _ = stack.Kube.CoreV1().Namespaces().Delete(ctx, deploy.JobNamespace, metav1.DeleteOptions{}) })
			}
			for _, o := range objs {
				warnings := a.apply(t, o, true)
				require.Empty(t, warnings, "%s: %s %s: the API server warned", k, o.GetKind(), o.GetName())
			}
		}
	})

	t.Run("WorkerPodIsAdmittedUnderRestrictedPodSecurity", func(t *testing.T) {
		pod := workerPod(t, base)
		_, err := stack.Kube.CoreV1().Pods(deployNamespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.NoError(t, err, "the Deployment's Pod passes the namespace's enforce=restricted admission")

		// The control: the same Pod allowed to escalate privileges is refused, so the namespace
		// really enforces the standard that admitted the Pod above.
		bad := pod.DeepCopy()
		escalate := true
		bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = &escalate
		_, err = stack.Kube.CoreV1().Pods(deployNamespace).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		require.True(t, apierrors.IsForbidden(err), "got %v", err)
		require.Contains(t, err.Error(), "PodSecurity")
	})

	applyReal(t, a, objectsOf(base, "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"))
	clusterRules, eventRules := renderedRules(t, base)

	t.Run("ServiceAccountCanDoExactlyWhatTheRulesSay", func(t *testing.T) {
		checkAccessMatrix(t, serviceAccountUser(workerSA), accessUniverse(), clusterRules, eventRules)

		// The impersonating kubeconfig really acts as the ServiceAccount.
		kube := kubeClientAs(t, serviceAccountUser(workerSA))
		_, err := kube.CoreV1().Secrets(activities.EventNamespace).List(ctx, metav1.ListOptions{})
		require.True(t, apierrors.IsForbidden(err), "got %v", err)
		_, err = kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
		require.NoError(t, err)
	})

	t.Run("RolloutAsServiceAccount", func(t *testing.T) {
		rolloutAsServiceAccount(t)
	})

	t.Run("EachVerbIsNeeded", func(t *testing.T) {
		eachVerbIsNeeded(t, a, clusterRules, eventRules)
	})

	// Last: it replaces the worker's ClusterRole with the namespaced overlay's.
	t.Run("NamespacedModeRolloutAsServiceAccount", func(t *testing.T) {
		namespacedRollout(t, a)
	})
	t.Run("NamespacedModeEachVerbIsNeeded", func(t *testing.T) {
		cluster, events, jobs := namespacedRules(t)
		eachVerbIsNeededIn(t, a, cluster, events, jobs)
	})
}

// rolloutAsServiceAccount runs a worker whose kubeconfig impersonates the ServiceAccount, on a
// task queue of its own (so the suite's admin worker cannot step in), and makes every activity
// use its permissions: the first rollout selects nodes by label, reads its template from a
// ConfigMap and keeps no Job (each is deleted); the second names its nodes and its Jobs fail
// (their Pods are listed for the exit code).
func rolloutAsServiceAccount(t *testing.T) {
	ctx := context.Background()
	kubeconfig := writeImpersonatingKubeconfig(t, serviceAccountUser(workerSA))
	queue := "noderollout-rbac-" + rand.String(6)
	w, err := StartWorker("rbac-"+rand.String(4), "--kubeconfig", kubeconfig, "--task-queue", queue)
	require.NoError(t, err, "the worker's Job informer lists and watches Jobs in every namespace")
	t.Cleanup(func() { _ = w.Stop() })

	f := NewFleet(t, 6)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-template", Namespace: f.Namespace},
		Data:       map[string]string{activities.DefaultTemplateKey: JobTemplate(time.Second, nil)},
	}
	_, err = stack.Kube.CoreV1().ConfigMaps(f.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)

	req := f.Request("rbac-"+rand.String(4), time.Second)
	req.JobTemplate = ""
	req.JobTemplateRef = &api.TemplateRef{Name: cm.Name}
	req.KeepJobs = string(api.KeepNever)
	res := Succeeded(t, startOn(t, queue, req))
	require.Equal(t, 6, res.Selected)
	require.Equal(t, 6, res.Counts.Succeeded)
	for node, marker := range f.Markers(t, req.Name) {
		require.Equal(t, jobspec.NodeMarker(res.TemplateHash, string(api.OutcomeSucceeded)), marker, "node %s: FinalizeJob patched it", node)
	}
	waitFor(t, 30*time.Second, "keepJobs=never to delete every Job", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: jobspec.LabelRollout + "=" + req.Name})
		return err == nil && len(list.Items) == 0
	})
	for _, node := range f.Nodes {
		events, err := stack.Kube.CoreV1().Events(activities.EventNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", node).String(),
		})
		require.NoError(t, err)
		require.NotEmpty(t, events.Items, "node %s: FinalizeJob recorded an Event", node)
	}

	// An explicit node list (ListNodes gets each Node) whose Jobs fail.
	failing := f.Request("rbac-fail-"+rand.String(4), time.Second)
	failing.NodeSelector = ""
	failing.Nodes = []string{f.Nodes[0], f.Nodes[1]}
	failing.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/exit-code": "7"})
	failing.MaxFailures = "100%"
	failing.KeepJobs = string(api.KeepFailed)
	res = Succeeded(t, startOn(t, queue, failing))
	require.Equal(t, 2, res.Counts.Failed)
	require.Len(t, res.Failures, 2)
	for _, r := range res.Failures {
		require.NotNil(t, r.ExitCode, "node %s: FinalizeJob listed the failed Job's Pods", r.Node)
		require.EqualValues(t, 7, *r.ExitCode)
	}

	// Maintenance: a dry run plans the drain (PodDisruptionBudgets listed), then the rollout
	// cordons, drains by eviction and uncordons.
	node := f.Nodes[2]
	pods := tenants(t, f.Namespace, "rbac", node, 1)
	maint := f.Request("rbac-maint-"+rand.String(4), time.Second)
	maint.NodeSelector, maint.Nodes = "", []string{node}
	maint.Maintenance = &api.Maintenance{Drain: &api.Drain{Timeout: "20s"}, Soak: "1s"}
	dry := maint
	dry.Name, dry.DryRun = maint.Name+"-dry", true
	res = Succeeded(t, startOn(t, queue, dry))
	require.Len(t, res.Planned, 1)
	require.NotNil(t, res.Planned[0].Drain)
	require.Equal(t, []string{f.Namespace + "/" + pods[0]}, res.Planned[0].Drain.Evict)
	res = Succeeded(t, startOn(t, queue, maint))
	require.Equal(t, 1, res.Counts.Succeeded)
	_, err = stack.Kube.CoreV1().Pods(f.Namespace).Get(ctx, pods[0], metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the tenant was evicted: %v", err)
	require.False(t, nodeNow(t, node).Spec.Unschedulable)
}

// startOn starts a rollout on the given task queue; its children and activities follow it there.
// Unlike StartOn it adds no jobTimeout: the request runs as written.
func startOn(t *testing.T, queue string, req api.RolloutRequest) client.WorkflowRun {
	t.Helper()
	return startRollout(t, req, queue, 10*time.Minute)
}

// writeImpersonatingKubeconfig copies the admin kubeconfig, acting as user (kubeconfig "as").
// Impersonating a ServiceAccount's user name gives its groups too, so RBAC treats the requests
// exactly as the ServiceAccount's own.
func writeImpersonatingKubeconfig(t *testing.T, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(stack.Kubeconfig)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.AuthInfos)
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return path
}

func kubeClientAs(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", stack.Kubeconfig)
	require.NoError(t, err)
	rc.Impersonate = rest.ImpersonationConfig{UserName: user}
	rc.QPS, rc.Burst = 100, 200
	kube, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	return kube
}

// access is one request an identity may or may not make.
type access struct {
	group, resource, subresource, verb, namespace string
}

func (x access) String() string {
	r := x.resource
	if x.subresource != "" {
		r += "/" + x.subresource
	}
	if x.group != "" {
		r += "." + x.group
	}
	ns := x.namespace
	if ns == "" {
		ns = "*"
	}
	return fmt.Sprintf("%s %s in %s", x.verb, r, ns)
}

// allowedBy says whether the ClusterRole rules, or the Role rules in namespace "default",
// grant x. Nothing in them uses wildcards or resource names (deploy_test.go checks that).
func allowedBy(x access, clusterRules, eventRules []rbacv1.PolicyRule) bool {
	resource := x.resource
	if x.subresource != "" {
		resource += "/" + x.subresource
	}
	match := func(rules []rbacv1.PolicyRule) bool {
		for _, r := range rules {
			if slices.Contains(r.APIGroups, x.group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, x.verb) {
				return true
			}
		}
		return false
	}
	return match(clusterRules) || (x.namespace == activities.EventNamespace && match(eventRules))
}

// accessUniverse is every request checkAccessMatrix asks about: each verb on the resources the
// worker touches, their neighbours, and what a worker must never reach.
func accessUniverse(extraNamespaces ...string) []access {
	type res struct {
		group, resource, subresource string
		cluster                      bool
	}
	resources := []res{
		{"batch", "jobs", "", false}, {"batch", "jobs", "status", false}, {"batch", "cronjobs", "", false},
		{"", "nodes", "", true}, {"", "nodes", "status", true}, {"", "nodes", "proxy", true},
		{"", "pods", "", false}, {"", "pods", "log", false}, {"", "pods", "exec", false}, {"", "pods", "eviction", false},
		{"", "namespaces", "", true}, {"", "configmaps", "", false}, {"", "secrets", "", false},
		{"", "events", "", false}, {"events.k8s.io", "events", "", false},
		{"", "serviceaccounts", "", false}, {"", "serviceaccounts", "token", false},
		{"apps", "deployments", "", false}, {"apps", "daemonsets", "", false},
		{"rbac.authorization.k8s.io", "clusterroles", "", true}, {"rbac.authorization.k8s.io", "rolebindings", "", false},
		{"coordination.k8s.io", "leases", "", false},
	}
	verbs := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	var out []access
	for _, r := range resources {
		namespaces := append([]string{"", activities.EventNamespace, "kube-system", deployNamespace}, extraNamespaces...)
		if r.cluster {
			namespaces = []string{""}
		}
		for _, ns := range namespaces {
			for _, v := range verbs {
				out = append(out, access{r.group, r.resource, r.subresource, v, ns})
			}
		}
	}
	for _, v := range []string{"escalate", "bind"} {
		out = append(out, access{"rbac.authorization.k8s.io", "clusterroles", "", v, ""})
	}
	out = append(out, access{"", "users", "", "impersonate", ""}, access{"", "serviceaccounts", "", "impersonate", ""})
	return out
}

// ruleAccesses are the requests the rules grant, asked cluster-wide and in two namespaces.
func ruleAccesses(clusterRules, eventRules []rbacv1.PolicyRule) []access {
	var out []access
	for _, r := range append(slices.Clone(clusterRules), eventRules...) {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, v := range r.Verbs {
				for _, ns := range []string{"", activities.EventNamespace, "kube-system"} {
					out = append(out, access{r.APIGroups[0], resource, sub, v, ns})
				}
			}
		}
	}
	return out
}

// subjectCan asks the API server (SubjectAccessReview) whether user may make request x.
func subjectCan(t *testing.T, user string, x access) bool {
	t.Helper()
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user,
		// What the authenticator gives a ServiceAccount's token.
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: x.namespace, Verb: x.verb, Group: x.group, Resource: x.resource, Subresource: x.subresource,
		},
	}}
	got, err := stack.Kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), review, metav1.CreateOptions{})
	require.NoError(t, err)
	return got.Status.Allowed
}

// checkAccessMatrix requires that user may make exactly the requests of accessUniverse that
// the rules grant. RBAC changes reach the authorizer through its informer, so it first waits
// until the answers settle.
func checkAccessMatrix(t *testing.T, user string, universe []access, clusterRules, eventRules []rbacv1.PolicyRule) {
	t.Helper()
	checkAccess(t, user, universe, func(x access) bool { return allowedBy(x, clusterRules, eventRules) })
}

// checkAccess requires that user may make exactly the requests of universe that allowed grants.
func checkAccess(t *testing.T, user string, universe []access, allowed func(access) bool) {
	t.Helper()
	var wrong []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		wrong = nil
		var mu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for _, x := range universe {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				want := allowed(x)
				if got := subjectCan(t, user, x); got != want {
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: allowed=%v, want %v", x, got, want))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(wrong) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	slices.Sort(wrong)
	require.Empty(t, wrong, "%s", strings.Join(wrong, "\n"))
	var granted int
	for _, x := range universe {
		if allowed(x) {
			granted++
		}
	}
	t.Logf("%s: %d of %d requests allowed, exactly as the rules say", user, granted, len(universe))
}

// verbCheck is one permission of the rules and a call of the worker that needs it: the call
// succeeds with every rule and fails once that one verb is taken away.
type verbCheck struct {
	group, resource, verb string // resource as in a rule, e.g. "pods/log"
	needs                 string // which activity makes the call
	run                   func(ctx context.Context, p *probe) error
}

func (c verbCheck) String() string { return c.verb + " " + c.resource + "." + c.group }

// probe is what the checks run with: a client and Activities acting as the probe identity, and
// a fleet with fixtures made by the admin client.
type probe struct {
	t        *testing.T
	kube     kubernetes.Interface
	acts     *activities.Activities
	fleet    *Fleet
	template string // a Job template
	hash     string
	cm       string // ConfigMap holding template
	// watchNamespace is where the Job informer lists and watches: all namespaces, or in
	// namespaced mode the fleet's.
	watchNamespace string
}

func (p *probe) execute(activity any, in any) error {
	_, err := p.activityEnv().ExecuteActivity(activity, in)
	return err
}

// activityEnv runs the probe's activities (p.acts, acting as the probe's user).
func (p *probe) activityEnv() *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(p.acts)
	return env
}

// probeResult runs one of the probe's activities and decodes its result into a T.
func probeResult[T any](p *probe, activity, in any) (T, error) {
	var out T
	val, err := p.activityEnv().ExecuteActivity(activity, in)
	if err != nil {
		return out, err
	}
	return out, val.Get(&out)
}

func (p *probe) jobRequest(node, runID string) activities.JobRequest {
	return activities.JobRequest{
		Rollout: "probe", Namespace: p.fleet.Namespace, Node: node, RunID: runID,
		Template: p.template, TemplateHash: p.hash, JobTimeoutSeconds: 600,
	}
}

// adminJob creates, as admin, the Job CreateJob would make for the request.
func (p *probe) adminJob(ctx context.Context, req activities.JobRequest) (*batchv1.Job, error) {
	job, err := jobspec.Build(req.Template, jobspec.JobParams{
		Rollout: req.Rollout, Namespace: req.Namespace, Node: req.Node, RunID: req.RunID, TemplateHash: req.TemplateHash,
	})
	if err != nil {
		return nil, err
	}
	return stack.Kube.BatchV1().Jobs(req.Namespace).Create(ctx, job, metav1.CreateOptions{})
}

// probeID makes every run of a check use fresh objects, so one run never sees another's.
func probeID() string { return rand.String(6) }

func verbChecks() []verbCheck {
	return []verbCheck{
		{"batch", "jobs", "list", "Activities.Start: the Job informer's initial (paged) list, when watch-list is unavailable",
			func(ctx context.Context, p *probe) error {
				// The reflector's list, as client-go sends it for the filtered informer. (Against
				// an API server with watch-list, the informer's first request is the watch below.)
				_, err := p.kube.BatchV1().Jobs(p.watchNamespace).List(ctx, metav1.ListOptions{
					LabelSelector: jobspec.LabelRollout, Limit: 500, ResourceVersion: "0",
				})
				return err
			}},
		{"batch", "jobs", "watch", "Activities.Start: the Job informer's watch (WaitJob waits on it)",
			func(ctx context.Context, p *probe) error {
				w, err := p.kube.BatchV1().Jobs(p.watchNamespace).Watch(ctx, metav1.ListOptions{
					LabelSelector: jobspec.LabelRollout, AllowWatchBookmarks: true,
				})
				if err == nil {
					w.Stop()
				}
				return err
			}},
		{"batch", "jobs", "create", "CreateJob",
			func(ctx context.Context, p *probe) error {
				_, err := p.executeCreate(p.jobRequest(p.fleet.Nodes[0], probeID()))
				return err
			}},
		{"batch", "jobs", "get", "CreateJob, adopting the Job its earlier attempt made",
			func(ctx context.Context, p *probe) error {
				req := p.jobRequest(p.fleet.Nodes[0], probeID())
				if _, err := p.adminJob(ctx, req); err != nil {
					return fmt.Errorf("fixture: %w", err)
				}
				ref, err := p.executeCreate(req)
				if err == nil && ref.Name == "" {
					return errors.New("CreateJob adopted no Job")
				}
				return err
			}},
		{"batch", "jobs", "delete", "DeleteJob (and WaitJob, FinalizeJob)",
			func(ctx context.Context, p *probe) error {
				job, err := p.adminJob(ctx, p.jobRequest(p.fleet.Nodes[1], probeID()))
				if err != nil {
					return fmt.Errorf("fixture: %w", err)
				}
				return p.execute(p.acts.DeleteJob, activities.JobRef{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID)})
			}},
		{"batch", "jobs", "patch", "FinalizeJob: removing our outcome finalizer from a kept Job (and DeleteJob, WaitJob)",
			func(ctx context.Context, p *probe) error {
				job, err := p.adminJob(ctx, p.jobRequest(p.fleet.Nodes[1], probeID()))
				if err != nil {
					return fmt.Errorf("fixture: %w", err)
				}
				ref := activities.JobRef{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID), Node: p.fleet.Nodes[1]}
				err = p.execute(p.acts.FinalizeJob, activities.FinalizeInput{
					Rollout: "probe", Node: p.fleet.Nodes[1], TemplateHash: probeID(), Job: &ref,
					End: activities.JobEnd{Outcome: api.OutcomeSucceeded}, KeepJobs: api.KeepAlways,
				})
				if err != nil {
					return err
				}
				kept, err := stack.Kube.BatchV1().Jobs(job.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("the kept Job: %w", err)
				}
				if slices.Contains(kept.Finalizers, jobspec.FinalizerOutcome) {
					return fmt.Errorf("FinalizeJob left finalizer %s on the kept Job", jobspec.FinalizerOutcome)
				}
				return nil
			}},
		{"", "nodes", "watch", "the worker's Node watch (it tells converging rollouts of node changes)",
			func(ctx context.Context, p *probe) error {
				w, err := p.kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true})
				if err == nil {
					w.Stop()
				}
				return err
			}},
		{"", "nodes", "get", "ListNodes with explicit names (and CreateJob, WaitJob)",
			func(ctx context.Context, p *probe) error {
				return p.execute(p.acts.ListNodes, activities.ListNodesInput{Rollout: "probe", Names: p.fleet.Nodes, TemplateHash: p.hash, Limit: 10})
			}},
		{"", "nodes", "list", "ListNodes with a selector",
			func(ctx context.Context, p *probe) error {
				return p.execute(p.acts.ListNodes, activities.ListNodesInput{Rollout: "probe", Selector: p.fleet.Selector(), TemplateHash: p.hash, Limit: 10})
			}},
		{"", "nodes", "patch", "FinalizeJob: the outcome annotation",
			func(ctx context.Context, p *probe) error {
				return p.execute(p.acts.FinalizeJob, activities.FinalizeInput{
					Rollout: "probe", Node: p.fleet.Nodes[0], TemplateHash: probeID(),
					End: activities.JobEnd{Outcome: api.OutcomeSucceeded}, KeepJobs: api.KeepAlways,
				})
			}},
		{"", "pods", "list", "FinalizeJob: the failed Job's Pods",
			func(ctx context.Context, p *probe) error {
				job := activities.JobRef{Namespace: p.fleet.Namespace, Name: "probe-" + probeID(), Node: p.fleet.Nodes[0]}
				return p.execute(p.acts.FinalizeJob, activities.FinalizeInput{
					Rollout: "probe", Node: p.fleet.Nodes[0], TemplateHash: probeID(), Job: &job,
					End: activities.JobEnd{Outcome: api.OutcomeFailed}, KeepJobs: api.KeepAlways,
				})
			}},
		{"", "pods/log", "get", "FinalizeJob: the failed Pod's log tail",
			func(ctx context.Context, p *probe) error {
				// FinalizeJob goes on without a log tail, so the call it makes is checked here.
				// The fleet's kwok nodes serve no logs: with the permission the request passes
				// authorization and then fails for want of a kubelet, which is not Forbidden.
				node, err := stack.Kube.CoreV1().Nodes().Get(ctx, p.fleet.Nodes[0], metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("fixture: %w", err)
				}
				if len(node.Status.Addresses) > 0 {
					// The API server would dial them; this suite sends traffic to loopback only.
					return fmt.Errorf("node %s has addresses %v; the log check expects kwok nodes without any", node.Name, node.Status.Addresses)
				}
				pod := probePod(p, probeID())
				_, err = p.kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: pod.Spec.Containers[0].Name}).DoRaw(ctx)
				if err != nil && !apierrors.IsForbidden(err) {
					p.t.Logf("pods/log with the permission gets past authorization: %v", err)
					return nil
				}
				return err
			}},
		{"", "namespaces", "get", "PrepareTemplate: the rollout's namespace",
			func(ctx context.Context, p *probe) error {
				_, err := p.executePrepare(activities.PrepareTemplateInput{Namespace: p.fleet.Namespace, Template: p.template})
				return err
			}},
		{"", "configmaps", "get", "PrepareTemplate: jobTemplateRef",
			func(ctx context.Context, p *probe) error {
				_, err := p.executePrepare(activities.PrepareTemplateInput{Namespace: p.fleet.Namespace, TemplateRef: &api.TemplateRef{Name: p.cm}})
				return err
			}},
		{"", "configmaps", "create", "PrepareTemplate: the template stored by hash",
			func(ctx context.Context, p *probe) error {
				_, err := p.executePrepare(activities.PrepareTemplateInput{Namespace: p.fleet.Namespace,
					Template: p.template + "# " + probeID() + "\n", Store: true})
				return err
			}},
		{"", "pods/eviction", "create", "DrainNode (maintenance.drain)",
			func(ctx context.Context, p *probe) error {
				node := p.fleet.Nodes[2]
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "tenant-" + probeID(), Namespace: p.fleet.Namespace},
					Spec: corev1.PodSpec{NodeName: node, RestartPolicy: corev1.RestartPolicyAlways,
						Containers: []corev1.Container{{Name: "work", Image: "busybox"}}},
				}
				if _, err := stack.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					return fmt.Errorf("fixture: %w", err)
				}
				zero := int64(0)
				return p.execute(p.acts.DrainNode, activities.DrainInput{Node: node, Force: true, GracePeriodSeconds: &zero, Deadline: time.Now().Add(time.Minute)})
			}},
		{"policy", "poddisruptionbudgets", "list", "PlanDrain (a dry run with maintenance.drain)",
			func(ctx context.Context, p *probe) error {
				return p.execute(p.acts.PlanDrain, activities.DrainPlanInput{Nodes: []string{p.fleet.Nodes[2]}})
			}},
		{"", "events", "create", "FinalizeJob: the Node's Event (namespace default)",
			func(ctx context.Context, p *probe) error {
				return p.execute(p.acts.FinalizeJob, activities.FinalizeInput{
					Rollout: "probe", Node: p.fleet.Nodes[1], TemplateHash: probeID(),
					End: activities.JobEnd{Outcome: api.OutcomeSucceeded}, KeepJobs: api.KeepAlways,
				})
			}},
	}
}

func (p *probe) executeCreate(req activities.JobRequest) (activities.JobRef, error) {
	return probeResult[activities.JobRef](p, p.acts.CreateJob, req)
}

func (p *probe) executePrepare(in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
	return probeResult[activities.PreparedTemplate](p, p.acts.PrepareTemplate, in)
}

// probePod is a Pod of a would-be Job, made as admin on a fleet node.
func probePod(p *probe, id string) *corev1.Pod {
	t := p.t
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "probe-" + id, Namespace: p.fleet.Namespace,
			Labels:      map[string]string{batchv1.JobNameLabel: "probe-" + id},
			Annotations: map[string]string{"noderollout.dev/run-seconds": "600"},
		},
		Spec: corev1.PodSpec{
			NodeName:      p.fleet.Nodes[0],
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: "busybox"}},
		},
	}
	created, err := stack.Kube.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	return created
}

// isForbidden says whether a check failed for want of a permission: the API's 403, or the
// activities' non-retryable Forbidden error.
func isForbidden(err error) bool {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == api.ErrForbidden {
		return true
	}
	return apierrors.IsForbidden(err)
}

// eachVerbIsNeeded gives a probe ServiceAccount the worker's rules minus one verb at a time,
// and shows that the call needing that verb fails then and succeeds with the full rules.
func eachVerbIsNeeded(t *testing.T, a *applier, clusterRules, eventRules []rbacv1.PolicyRule) {
	eachVerbIsNeededIn(t, a, clusterRules, eventRules, nil)
}

// eachVerbIsNeededIn is eachVerbIsNeeded for either mode: with jobRules (namespaced mode) they
// are a Role in the fleet's namespace, and the Job watch is confined to it.
func eachVerbIsNeededIn(t *testing.T, a *applier, clusterRules, eventRules, jobRules []rbacv1.PolicyRule) {
	ctx := context.Background()
	checks := verbChecks()
	if jobRules != nil {
		// A drain reaches every namespace: namespaced mode grants no drain (README).
		checks = slices.DeleteFunc(checks, func(c verbCheck) bool {
			return c.resource == "pods/eviction" || c.resource == "poddisruptionbudgets"
		})
	}

	// Every verb of the rules has a check, and no check is for a verb the rules lack.
	var ruleVerbs, checkVerbs []string
	for _, rules := range [][]rbacv1.PolicyRule{clusterRules, eventRules, jobRules} {
		for _, r := range rules {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					ruleVerbs = append(ruleVerbs, v+" "+res+"."+r.APIGroups[0])
				}
			}
		}
	}
	for _, c := range checks {
		checkVerbs = append(checkVerbs, c.String())
	}
	require.ElementsMatch(t, ruleVerbs, checkVerbs)

	f := NewFleet(t, 3) // the third for the drain
	tpl := JobTemplate(600*time.Second, nil)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "probe-template", Namespace: f.Namespace},
		Data:       map[string]string{activities.DefaultTemplateKey: tpl},
	}
	_, err := stack.Kube.CoreV1().ConfigMaps(f.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	kube := kubeClientAs(t, serviceAccountUser(probeSA))
	p := &probe{t: t, kube: kube, acts: activities.New(kube), fleet: f, template: tpl, hash: jobspec.TemplateHash(tpl), cm: cm.Name,
		watchNamespace: metav1.NamespaceAll}

	setClusterAndEvents := setupProbeIdentity(t, a)
	setJobRules := func([]rbacv1.PolicyRule) {}
	if jobRules != nil {
		p.watchNamespace = f.Namespace
		setJobRules = setupProbeJobRole(t, a, f.Namespace)
	}
	setProbeRules := func(cluster, events, jobs []rbacv1.PolicyRule) {
		setClusterAndEvents(cluster, events)
		setJobRules(jobs)
	}
	match := func(rules []rbacv1.PolicyRule, x access) bool {
		return allowedBy(access{group: x.group, resource: x.resource, subresource: x.subresource, verb: x.verb}, rules, nil)
	}
	allowed := func(cluster, events, jobs []rbacv1.PolicyRule) func(access) bool {
		return func(x access) bool {
			return allowedBy(x, cluster, events) || (jobRules != nil && x.namespace == f.Namespace && match(jobs, x))
		}
	}
	universe, granted := accessUniverse(), ruleAccesses(clusterRules, eventRules)
	if jobRules != nil {
		universe = accessUniverse(f.Namespace)
		for _, x := range ruleAccesses(jobRules, nil) {
			x.namespace = f.Namespace
			granted = append(granted, x)
		}
	}

	setProbeRules(clusterRules, eventRules, jobRules)
	checkAccess(t, serviceAccountUser(probeSA), universe, allowed(clusterRules, eventRules, jobRules))
	for _, c := range checks {
		require.NoError(t, c.run(ctx, p), "%s with every rule (needed by %s)", c, c.needs)
	}

	for _, c := range checks {
		t.Run(strings.ReplaceAll(c.String(), "/", "-"), func(t *testing.T) {
			cluster, events, jobs := without(clusterRules, c), without(eventRules, c), without(jobRules, c)
			setProbeRules(cluster, events, jobs)
			// Wait until the authorizer has the new rules: the removed verb denied, the rest granted.
			checkAccess(t, serviceAccountUser(probeSA), granted, allowed(cluster, events, jobs))
			err := c.run(ctx, p)
			require.Error(t, err, "%s is needed by %s", c, c.needs)
			require.True(t, isForbidden(err), "%s: want Forbidden, got %v", c, err)
			t.Logf("without %s, %s fails: %v", c, c.needs, firstLine(err.Error()))
		})
	}
	setProbeRules(clusterRules, eventRules, jobRules)
}

// setupProbeJobRole binds the probe ServiceAccount to a Role in namespace ns (namespaced mode)
// and returns the function that sets its rules.
func setupProbeJobRole(t *testing.T, a *applier, ns string) func([]rbacv1.PolicyRule) {
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: probeSA, Namespace: deployNamespace}}
	applyReal(t, a, []*unstructured.Unstructured{toUnstructured(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: probeSA, Namespace: ns}, Subjects: subjects,
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: probeSA}})})
	return func(rules []rbacv1.PolicyRule) {
		applyReal(t, a, []*unstructured.Unstructured{
			toUnstructured(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: probeSA, Namespace: ns}, Rules: rules}),
		})
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	if len(line) > 300 {
		line = line[:300] + "..."
	}
	return line
}

// without is rules minus the check's one verb (a rule left with no verb goes).
func without(rules []rbacv1.PolicyRule, c verbCheck) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		r = *r.DeepCopy()
		if slices.Contains(r.APIGroups, c.group) && slices.Contains(r.Resources, c.resource) {
			r.Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { return v == c.verb })
		}
		if len(r.Verbs) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// setupProbeIdentity creates the probe ServiceAccount bound to a ClusterRole and a Role in
// "default" (removed at the end), and returns the function that sets their rules.
func setupProbeIdentity(t *testing.T, a *applier) func(cluster, events []rbacv1.PolicyRule) {
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: probeSA, Namespace: deployNamespace}}
	objs := []runtime.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: probeSA, Namespace: deployNamespace}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: probeSA}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: probeSA}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: probeSA, Namespace: activities.EventNamespace}, Subjects: subjects,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: probeSA}},
	}
	var applied []*unstructured.Unstructured
	for _, o := range objs {
		applied = append(applied, toUnstructured(t, o))
	}
	applyReal(t, a, applied)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = stack.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, probeSA, metav1.DeleteOptions{})
		_ = stack.Kube.RbacV1().ClusterRoles().Delete(ctx, probeSA, metav1.DeleteOptions{})
		_ = stack.Kube.RbacV1().RoleBindings(activities.EventNamespace).Delete(ctx, probeSA, metav1.DeleteOptions{})
		_ = stack.Kube.RbacV1().Roles(activities.EventNamespace).Delete(ctx, probeSA, metav1.DeleteOptions{})
	})
	return func(cluster, events []rbacv1.PolicyRule) {
		applyReal(t, a, []*unstructured.Unstructured{
			toUnstructured(t, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: probeSA}, Rules: cluster}),
			toUnstructured(t, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: probeSA, Namespace: activities.EventNamespace}, Rules: events}),
		})
	}
}

func toUnstructured(t *testing.T, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	require.NoError(t, err)
	obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u
}

// applier server-side applies objects of any kind.
type applier struct {
	dynamic  dynamic.Interface
	mapper   meta.RESTMapper
	mu       sync.Mutex
	warnings []string
}

func newApplier(t *testing.T) *applier {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", stack.Kubeconfig)
	require.NoError(t, err)
	a := &applier{}
	rc.WarningHandler = a
	a.dynamic, err = dynamic.NewForConfig(rc)
	require.NoError(t, err)
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	require.NoError(t, err)
	a.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	return a
}

// HandleWarningHeader collects the API server's warnings (deprecations, Pod Security).
func (a *applier) HandleWarningHeader(code int, _ string, text string) {
	if code != 299 || text == "" {
		return
	}
	a.mu.Lock()
	a.warnings = append(a.warnings, text)
	a.mu.Unlock()
}

// apply server-side applies obj (only as a dry run when dryRun) and returns the warnings the
// API server gave.
func (a *applier) apply(t *testing.T, obj *unstructured.Unstructured, dryRun bool) []string {
	t.Helper()
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	require.NoError(t, err, "%s", gvk)
	var ri dynamic.ResourceInterface = a.dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		require.NotEmpty(t, obj.GetNamespace(), "%s %s names its namespace", gvk.Kind, obj.GetName())
		ri = a.dynamic.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	opts := metav1.ApplyOptions{FieldManager: e2eFieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	a.mu.Lock()
	a.warnings = nil
	a.mu.Unlock()
	_, err = ri.Apply(context.Background(), obj.GetName(), obj, opts)
	require.NoError(t, err, "apply %s %s/%s (dry run: %v)", gvk.Kind, obj.GetNamespace(), obj.GetName(), dryRun)
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.warnings)
}

func applyReal(t *testing.T, a *applier, objs []*unstructured.Unstructured) {
	t.Helper()
	require.NotEmpty(t, objs)
	for _, o := range objs {
		a.apply(t, o, false)
	}
}

func renderKustomization(t *testing.T, k string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := deploy.Render(k)
	require.NoError(t, err)
	return objs
}

func objectsOf(objs []*unstructured.Unstructured, kinds ...string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if slices.Contains(kinds, o.GetKind()) {
			out = append(out, o)
		}
	}
	return out
}

// renderedRules are the worker's ClusterRole rules and its Role's rules in "default".
func renderedRules(t *testing.T, objs []*unstructured.Unstructured) (cluster, events []rbacv1.PolicyRule) {
	t.Helper()
	cluster, events, jobs := rulesOf(t, objs, "")
	require.Empty(t, jobs, "a Role without a namespace")
	require.NotEmpty(t, cluster)
	require.NotEmpty(t, events)
	return cluster, events
}

// workerPod is the Pod the Deployment would create.
func workerPod(t *testing.T, objs []*unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		var d struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d))
		pod := &corev1.Pod{ObjectMeta: d.Spec.Template.ObjectMeta, Spec: d.Spec.Template.Spec}
		pod.Name, pod.Namespace = "noderollout-worker-dry-run", o.GetNamespace()
		return pod
	}
	t.Fatal("no Deployment")
	return nil
}

// waitNamespaceGone waits while the namespace is being deleted.
func waitNamespaceGone(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 120*time.Second, "namespace "+name+" to finish terminating", func() bool {
		ns, err := stack.Kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && ns.DeletionTimestamp == nil)
	})
}

// deleteDeployed removes what the test applied for real.
func deleteDeployed(t *testing.T, base []*unstructured.Unstructured) {
	ctx := context.Background()
	for _, o := range base {
		var err error
		switch o.GetKind() {
		case "ClusterRole":
			err = stack.Kube.RbacV1().ClusterRoles().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		case "ClusterRoleBinding":
			err = stack.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		case "Role":
			err = stack.Kube.RbacV1().Roles(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		case "RoleBinding":
			err = stack.Kube.RbacV1().RoleBindings(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		case "Namespace":
			err = stack.Kube.CoreV1().Namespaces().Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}
