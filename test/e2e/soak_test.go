//go:build e2e

package e2e

// Minutes-long fault tests: `make soak` runs them, `make test` skips every TestSoak*.

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// TestSoakTemporalDownFourMinutesWhileLongJobsEnd stops the Temporal server for four minutes
// while every node awaits its long Job's end (AwaitJobEnd) and the Jobs end early in the
// outage. The one worker stays up and sees each end at once, but cannot tell the node until the
// server is back: its notices must outlast an outage of minutes, or each node would wait for
// its Job's deadline (8 minutes here; hours for a long driver build).
func TestSoakTemporalDownFourMinutesWhileLongJobsEnd(t *testing.T) {
	f, req, run, _, _ := awaitingLongJobs(t, 4, "temporal-down-long", 8*time.Minute)
	stopFor(t, "temporal", 4*time.Minute)
	requireSucceededSoonAfter(t, f, run, req.Name, time.Now(), 90*time.Second, "Temporal came back")
}

// TestSoakNodeJoiningDuringATemporalOutageIsConverged stops the Temporal server for two
// minutes while a converging rollout idles, and a node joins meanwhile. The worker's Node watch
// sees the join at once but cannot reach the rollout; once the server is back it tells the
// rollout to look at all its nodes, so the joined node gets its Job soon after the outage
// rather than at the worker's next restart.
func TestSoakNodeJoiningDuringATemporalOutageIsConverged(t *testing.T) {
	queue, _ := ownWorkers(t, 1)
	f := NewFleet(t, 2)
	req := f.Request("converge-outage", time.Second)
	req.Mode = api.ModeConverge
	run := StartOn(t, req, queue)
	defer func() { _ = stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), "") }()
	waitFor(t, 90*time.Second, "the first pass over 2 nodes", func() bool {
		jobs := f.Jobs(t, req.Name)
		return len(jobs[f.Nodes[0]]) == 1 && len(jobs[f.Nodes[1]]) == 1
	})
	t.Cleanup(func() { devScript(t, "start-component.sh", "temporal") })
	devScript(t, "stop-component.sh", "temporal")
	joined := f.AddNodes(t, 1, nil)[0]
	time.Sleep(2 * time.Minute) // the outage itself, not a synchronisation
	devScript(t, "start-component.sh", "temporal")
	back := time.Now()
	waitFor(t, 2*time.Minute, "a Job on "+joined, func() bool { return len(f.Jobs(t, req.Name)[joined]) == 1 })
	t.Logf("%s, which joined during the outage, got its Job %s after Temporal came back", joined, time.Since(back).Round(time.Second))
	require.Less(t, time.Since(back), 90*time.Second, "the join reaches the rollout soon after the outage")
	for _, n := range f.Nodes[:2] {
		require.Len(t, f.Jobs(t, req.Name)[n], 1, "%s ran once", n)
	}
}

// TestSoakWorkerWritesRefusedTwoMinutes: for 130 s the API server refuses every write of the
// worker (an admission webhook that is down, failurePolicy Fail) while its reads and the rest
// of the control plane work. The fault starts with Jobs in flight and nodes still to create,
// so creates, node markers, events and Job deletes all meet it. The outage only delays the
// rollout: every node succeeds, each got exactly one Job ever, no Job is left and every Node
// carries its marker.
func TestSoakWorkerWritesRefusedTwoMinutes(t *testing.T) {
	const refusedFor = 130 * time.Second
	identity, kubeconfig := workerIdentity(t)
	queue, _ := ownWorkers(t, 1, "--kubeconfig", kubeconfig)
	f := NewFleet(t, 12)
	jobs := watchJobs(t, f.Namespace)
	req := f.Request("writes-refused", 15*time.Second)
	req.Parallelism = 4
	req.KeepJobs = "never"
	req.JobTimeout = "10m"
	run := StartOn(t, req, queue)
	midRollout(t, f, req.Name, 4)

	refuseWrites(t, identity)
	requireRefused(t, identity)
	refusedAt := time.Now()
	// The outage itself. No rollout can finish while its writes are refused: one that ends now
	// has given up on them.
	for time.Since(refusedAt) < refusedFor {
		d, err := stack.Temporal.DescribeWorkflow(context.Background(), run.GetID(), "")
		if err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING {
			res, err := Result(t, run)
			t.Fatalf("the rollout ended %v into the refusal, with its writes undone: %v; counts %+v, failures %+v",
				time.Since(refusedAt).Round(time.Second), err, res.Counts, res.Failures)
		}
		time.Sleep(time.Second)
	}
	allowWrites(t)
	t.Logf("worker writes refused for %v", time.Since(refusedAt).Round(time.Second))

	res := Succeeded(t, run)
	requireEveryNodeOnce(t, f, res)
	require.Equal(t, len(f.Nodes), res.Counts.Succeeded)
	for _, n := range f.Nodes {
		require.Len(t, jobs.uids(n), 1, "node %s: exactly one Job ever created", n)
	}
	waitFor(t, 60*time.Second, "no Job left behind", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})
	for n, m := range f.Markers(t, req.Name) {
		require.True(t, strings.HasSuffix(m, ":succeeded"), "node %s marker %q", n, m)
	}
}

// TestSoakLongTerminationGraceNeverOverlapsOnANode: rollout A's Job on a shared node times out
// while its Pod takes a 40 s termination grace (kwok honours it, dev/kwok/pod-delete.yaml);
// rollout B waits for the node. From a Pod watch, the Pods' running intervals on the node
// never overlap: B's Pod starts only after A's has finished terminating.
func TestSoakLongTerminationGraceNeverOverlapsOnANode(t *testing.T) {
	const grace = 40 * time.Second
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	pods := watchPods(t, f.Namespace)
	a := f.Request("grace-a", 10*time.Minute)
	a.NodeSelector, a.Nodes = "", []string{node}
	a.JobTemplate = JobTemplateWithGrace(10*time.Minute, grace, nil)
	a.JobTimeout = "15s"
	b := f.Request("grace-b", 2*time.Second)
	b.NodeSelector, b.Nodes = "", []string{node}
	runA := Start(t, a)
	waitFor(t, 60*time.Second, "A's Pod running", func() bool { return len(pods.intervals()) == 1 })
	runB := Start(t, b)

	resB := Succeeded(t, runB)
	require.Equal(t, 1, resB.Counts.Succeeded)
	resA, _ := Result(t, runA)
	require.Equal(t, 1, resA.Counts.TimedOut, "A's Job ran into its jobTimeout")

	waitFor(t, grace+time.Minute, "every Pod on the node stopped", pods.allStopped)
	ivs := pods.intervals()
	require.Len(t, ivs, 2, "one Pod of each rollout ran on the node")
	first, second := ivs[0], ivs[1]
	require.False(t, first.deleted.IsZero(), "A's Pod was deleted at the timeout")
	require.False(t, second.start.Before(first.end),
		"Pod %s started at %s while Pod %s still ran until %s", second.name,
		second.start.Format(time.RFC3339Nano), first.name, first.end.Format(time.RFC3339Nano))
	require.GreaterOrEqual(t, first.end.Sub(first.deleted), grace-5*time.Second,
		"A's Pod kept running through its termination grace (kwok honours it)")
}

// workerIdentity makes a ServiceAccount for the test's worker, with cluster-admin so RBAC plays
// no part, and a kubeconfig that authenticates as it. It returns the username the API server
// sees and the kubeconfig's path.
func workerIdentity(t *testing.T) (string, string) {
	t.Helper()
	ctx := context.Background()
	ns, name := "default", "e2e-worker-"+rand.String(4)
	sa, err := stack.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}
	_, err = stack.Kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stack.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = stack.Kube.CoreV1().ServiceAccounts(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	hour := int64(3600)
	tok, err := stack.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &hour}}, metav1.CreateOptions{})
	require.NoError(t, err)

	admin, err := clientcmd.LoadFromFile(stack.Kubeconfig)
	require.NoError(t, err)
	cluster := admin.Clusters[admin.Contexts[admin.CurrentContext].Cluster]
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["stack"] = cluster
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	cfg.Contexts["worker"] = &clientcmdapi.Context{Cluster: "stack", AuthInfo: name}
	cfg.CurrentContext = "worker"
	path := filepath.Join(t.TempDir(), "worker.kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*cfg, path))
	return "system:serviceaccount:" + ns + ":" + name, path
}

const refuseWebhook = "refuse-writes.e2e.noderollout.dev"

// refuseWrites installs a validating webhook that cannot be reached (nothing listens on port
// 1) with failurePolicy Fail, matching only requests of the given user: every create, update
// (patch) and delete of that user is refused, everything else goes through.
func refuseWrites(t *testing.T, username string) {
	t.Helper()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	url := "https://127.0.0.1:1/refuse"
	timeout := int32(2)
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: refuseWebhook},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    refuseWebhook,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
			}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name:       "only-the-worker",
				Expression: fmt.Sprintf("request.userInfo.username == %q", username),
			}},
		}},
	}
	_, err := stack.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), cfg, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { allowWrites(t) })
}

// requireRefused waits until a write as the user is refused by the webhook, and checks that a
// read is not. The API server honours a new webhook configuration only once its own informer
// has it ("a few seconds", the admission webhook docs say): a write at once can still pass.
func requireRefused(t *testing.T, username string) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", stack.Kubeconfig)
	require.NoError(t, err)
	rc.Impersonate = rest.ImpersonationConfig{UserName: username}
	as, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = as.CoreV1().Nodes().List(ctx, metav1.ListOptions{Limit: 1})
	require.NoError(t, err, "reads of the worker go through")
	var created []string
	defer func() {
		for _, name := range created {
			_ = stack.Kube.CoreV1().ConfigMaps("default").Delete(ctx, name, metav1.DeleteOptions{})
		}
	}()
	waitFor(t, 30*time.Second, "the webhook to refuse writes of the worker", func() bool {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "refused-"}}
		got, err := as.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
		if err == nil {
			created = append(created, got.Name)
		}
		return err != nil && strings.Contains(err.Error(), refuseWebhook)
	})
}

func allowWrites(t *testing.T) {
	err := stack.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), refuseWebhook, metav1.DeleteOptions{})
	if err != nil && !strings.Contains(err.Error(), "not found") {
		t.Errorf("removing the webhook: %v", err)
	}
}

// jobWatch records the UID of every Job ever seen in a namespace, by node.
type jobWatch struct {
	mu     sync.Mutex
	byNode map[string]map[types.UID]bool
}

func watchJobs(t *testing.T, namespace string) *jobWatch {
	t.Helper()
	w := &jobWatch{byNode: map[string]map[types.UID]bool{}}
	see := func(obj any) {
		j, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		node := j.Annotations[jobspec.AnnotationNode]
		w.mu.Lock()
		if w.byNode[node] == nil {
			w.byNode[node] = map[types.UID]bool{}
		}
		w.byNode[node][j.UID] = true
		w.mu.Unlock()
	}
	runInformer(t, namespace, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Batch().V1().Jobs().Informer()
	}, cache.ResourceEventHandlerFuncs{AddFunc: see, UpdateFunc: func(_, o any) { see(o) }})
	return w
}

// total is how many Jobs the watch has seen, over all nodes.
func (w *jobWatch) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, uids := range w.byNode {
		n += len(uids)
	}
	return n
}

func (w *jobWatch) uids(node string) []types.UID {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []types.UID
	for uid := range w.byNode[node] {
		out = append(out, uid)
	}
	return out
}

// podInterval is what a Pod watch saw of one Pod: when it was first Running, when it was
// deleted (deletionTimestamp first seen) and when it stopped running (finished or removed).
type podInterval struct {
	name                string
	start, deleted, end time.Time
}

type podWatch struct {
	mu   sync.Mutex
	pods map[types.UID]*podInterval
}

func watchPods(t *testing.T, namespace string) *podWatch {
	t.Helper()
	w := &podWatch{pods: map[types.UID]*podInterval{}}
	see := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		iv := w.pods[p.UID]
		if iv == nil {
			if p.Status.Phase != corev1.PodRunning {
				return // never seen running: nothing of it ran
			}
			iv = &podInterval{name: p.Name, start: now}
			w.pods[p.UID] = iv
		}
		if iv.deleted.IsZero() && p.DeletionTimestamp != nil {
			iv.deleted = now
		}
		if iv.end.IsZero() && (gone || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
			iv.end = now
		}
	}
	runInformer(t, namespace, func(f informers.SharedInformerFactory) cache.SharedIndexInformer {
		return f.Core().V1().Pods().Informer()
	}, cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { see(o, false) },
		UpdateFunc: func(_, o any) { see(o, false) },
		DeleteFunc: func(o any) { see(o, true) },
	})
	return w
}

// allStopped says whether every Pod seen running has stopped.
func (w *podWatch) allStopped() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, iv := range w.pods {
		if iv.end.IsZero() {
			return false
		}
	}
	return true
}

// intervals returns the Pods seen running, in the order they started.
func (w *podWatch) intervals() []podInterval {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []podInterval
	for _, iv := range w.pods {
		out = append(out, *iv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// runInformer runs the informer that pick takes from a factory of the namespace, with handler
// on it, until the test ends; it returns once the informer has synced.
func runInformer(t *testing.T, namespace string, pick func(informers.SharedInformerFactory) cache.SharedIndexInformer, handler cache.ResourceEventHandler) {
	t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(stack.Kube, 0, informers.WithNamespace(namespace))
	inf := pick(factory)
	_, err := inf.AddEventHandler(handler)
	require.NoError(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	require.True(t, cache.WaitForCacheSync(stop, inf.HasSynced))
}
