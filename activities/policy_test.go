package activities

import (
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// activitiesPolicy allows kube-system (everything) and apps (nothing special), busybox only.
const activitiesPolicy = `
namespaces:
  kube-system: {privileged: true, hostPID: true, serviceAccounts: [default, node-maint]}
  apps: {}
images: [docker.io/library/busybox]
maxParallelism: 20
`

func withPolicy(t *testing.T, a *Activities) *Activities {
	t.Helper()
	p, err := policy.Parse([]byte(activitiesPolicy))
	require.NoError(t, err)
	a.Policy = p
	return a
}

// templateWith is testTemplate with extra lines added to its Pod spec.
func templateWith(podSpec string, image string) string {
	text := strings.Replace(testTemplate, "image: busybox", "image: "+image, 1)
	return strings.Replace(text, "      restartPolicy: Never\n", "      restartPolicy: Never\n"+podSpec, 1)
}

func TestPrepareTemplateEnforcesThePolicy(t *testing.T) {
	cases := []struct {
		name, rule, field string
		in                PrepareTemplateInput
	}{
		{"allowed", "", "", PrepareTemplateInput{Namespace: "apps", Template: testTemplate, Parallelism: 20, NodeSelector: "pool=a"}},
		{"privileged where granted", "", "", PrepareTemplateInput{Namespace: "kube-system", Template: templateWith(
			"      hostPID: true\n", "busybox:1.36"), Parallelism: 1}},
		{"namespace", policy.RuleNamespaces, "namespace", PrepareTemplateInput{Namespace: "default", Template: testTemplate, Parallelism: 1}},
		{"template namespace", policy.RuleNamespaces, "jobTemplateRef.namespace", PrepareTemplateInput{Namespace: "apps",
			TemplateRef: &api.TemplateRef{Namespace: "secrets", Name: "x"}, Parallelism: 1}},
		{"image", policy.RuleImages, "jobTemplate.spec.template.spec.containers[0].image", PrepareTemplateInput{Namespace: "apps",
			Template: templateWith("", "evil.example.com/miner"), Parallelism: 1}},
		{"privileged", policy.RulePrivileged, "jobTemplate.spec.template.spec.containers[0].securityContext.privileged", PrepareTemplateInput{
			Namespace: "apps", Template: strings.Replace(testTemplate, "        image: busybox\n",
				"        image: busybox\n        securityContext: {privileged: true}\n", 1), Parallelism: 1}},
		{"service account", policy.RuleServiceAccounts, "jobTemplate.spec.template.spec.serviceAccountName", PrepareTemplateInput{
			Namespace: "apps", Template: templateWith("      serviceAccountName: node-maint\n", "busybox"), Parallelism: 1}},
		{"parallelism", policy.RuleMaxParallelism, "parallelism", PrepareTemplateInput{Namespace: "apps", Template: testTemplate, Parallelism: 21}},
		{"control-plane selector", policy.RuleProtectedNodeLabels, "nodeSelector", PrepareTemplateInput{Namespace: "apps",
			Template: testTemplate, Parallelism: 1, NodeSelector: "node-role.kubernetes.io/control-plane"}},
		{"drain", policy.RuleDrain, "maintenance.drain", PrepareTemplateInput{Namespace: "apps", Template: testTemplate, Parallelism: 1,
			Cordon: true, Drain: true}},
		{"cordon", policy.RuleCordon, "maintenance.cordon", PrepareTemplateInput{Namespace: "apps", Template: testTemplate, Parallelism: 1,
			Cordon: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := fake.NewClientset(testNS("apps"), testNS("kube-system"), testNS("default"))
			a := withPolicy(t, newActivities(cs))
			_, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, c.in)
			if c.rule == "" {
				require.NoError(t, err)
				return
			}
			appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
			require.Contains(t, appErr.Message(), `"`+c.rule+`"`)
			require.Contains(t, appErr.Message(), c.field)
			var v PolicyViolation
			require.NoError(t, appErr.Details(&v))
			require.Equal(t, PolicyViolation{Rule: c.rule, Field: c.field}, v)
			require.Zero(t, countActions(cs, "get", "configmaps"), "a denied template namespace is not even read")
		})
	}
	require.Contains(t, NonRetryableErrors, api.ErrPolicyDenied)
}

func TestCreateJobChecksEveryRenderedJob(t *testing.T) {
	cs := fake.NewClientset(testNode("node-a", nil))
	a := withPolicy(t, newActivities(cs))
	in := testRequest("node-a")                                // kube-system, busybox: allowed
	in.Template = templateWith("", "evil.example.com/miner:1") // as if the ConfigMap changed
	in.TemplateHash = jobspec.TemplateHash(in.Template)
	_, err := createJob(t, a, in)
	appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Contains(t, appErr.Message(), `"images"`)
	require.Zero(t, countActions(cs, "create", "jobs"), "no Job is created")

	in.Template, in.TemplateHash = testTemplate, jobspec.TemplateHash(testTemplate)
	_, err = createJob(t, a, in)
	require.NoError(t, err)
	require.Equal(t, 1, countActions(cs, "create", "jobs"))
}

func TestCreateJobKeepsOffProtectedNodes(t *testing.T) {
	cp := testNode("cp-1", nil)
	cp.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	cs := fake.NewClientset(cp, testNode("worker-1", nil), testNS("apps"))
	a := withPolicy(t, newActivities(cs))
	in := testRequest("cp-1")
	in.Namespace = "apps"
	_, err := createJob(t, a, in)
	appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Contains(t, appErr.Message(), `"protectedNodeLabels"`)
	require.Contains(t, appErr.Message(), "cp-1")
	require.Zero(t, countActions(cs, "create", "jobs"))

	in = testRequest("worker-1")
	in.Namespace = "apps"
	_, err = createJob(t, a, in)
	require.NoError(t, err)

	// kube-system may reach the control plane? Not in this policy either: protectedNodes unset.
	in = testRequest("cp-1")
	_, err = createJob(t, a, in)
	requireAppError(t, err, api.ErrPolicyDenied, true)
}

// TestCreateJobReadsTheNodeOnceUnderANodeGuardingPolicy: the policy's read of the Node is the
// create's node check too (one Node GET per Job, the Node's UID taken from it); a Node the
// policy's read did not find is still confirmed gone by the create's own check.
func TestCreateJobReadsTheNodeOnceUnderANodeGuardingPolicy(t *testing.T) {
	cs := fake.NewClientset(testNode("worker-1", nil), testNS("apps"))
	stampCreatedJobs(cs)
	a := withPolicy(t, newActivities(cs))
	require.True(t, a.Policy.GuardsNodes(), "the test's policy guards the control plane")
	in := testRequest("worker-1")
	in.Namespace = "apps"
	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	require.Equal(t, "uid-node-worker-1", ref.NodeUID)
	require.Equal(t, 1, countActions(cs, "get", "nodes"), "one Node read for the policy and the node check")
	require.Equal(t, 1, countActions(cs, "create", "jobs"))

	in = testRequest("gone-1")
	in.Namespace = "apps"
	_, err = createJob(t, a, in)
	requireAppError(t, err, api.ErrNodeGone, true)
	jobs, err := cs.BatchV1().Jobs("apps").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, jobs.Items, 1, "the Job made for the gone node is deleted again: only worker-1's is left")
}

func TestRequesterOnTheJobAndTheNode(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	in := testRequest("node-a")
	in.Requester = "alice@laptop"
	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "alice@laptop", job.Annotations[AnnotationRequester])
	require.Equal(t, "kata", job.Labels[jobspec.LabelRollout])

	fin := finalizeInput(job, api.OutcomeSucceeded, api.KeepAlways)
	fin.Job = &ref
	fin.Requester = "alice@laptop"
	_, err = finalize(t, a, fin)
	require.NoError(t, err)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "alice@laptop", node.Annotations[NodeRequesterKey("kata")])
	require.NotEmpty(t, node.Annotations[jobspec.NodeMarkerKey("kata")])
	events := getEvents(t, cs)
	require.Len(t, events, 1)
	require.Contains(t, events[0].Message, "requested by alice@laptop")
	require.Equal(t, corev1.EventTypeNormal, events[0].Type)
}

// TestTheTemplateCannotNameItsRequester: a template that writes noderollout.io/requester into
// its own metadata names nobody: the Job carries the start request's requester, or none.
func TestTheTemplateCannotNameItsRequester(t *testing.T) {
	forged := strings.Replace(testTemplate, "kind: Job\n", "kind: Job\nmetadata:\n  annotations:\n    noderollout.io/requester: ceo@company\n", 1)
	for _, requester := range []string{"", "alice@laptop"} {
		t.Run("requester="+requester, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil))
			in := testRequest("node-a")
			in.Template, in.TemplateHash, in.Requester = forged, jobspec.TemplateHash(forged), requester
			ref, err := createJob(t, a, in)
			require.NoError(t, err)
			job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), ref.Name, metav1.GetOptions{})
			require.NoError(t, err)
			got, has := job.Annotations[AnnotationRequester]
			require.Equal(t, requester, got)
			require.Equal(t, requester != "", has)
		})
	}
}

// maintenancePolicy: "ops" may drain, evicting only tenant's Pods; "cordononly" may cordon;
// "apps" neither.
const maintenancePolicy = `
namespaces:
  ops: {drain: true, evictNamespaces: [tenant]}
  cordononly: {cordon: true}
  apps: {}
`

func controlPlaneNode(name string) *corev1.Node {
	n := testNode(name, nil)
	n.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	return n
}

// nodeWrites lists the requests that change a Node or evict a Pod.
func nodeWrites(e *evictions) []string {
	var out []string
	for _, act := range actions(e.cs) {
		switch act {
		case "patch nodes", "update nodes", "create pods/eviction", "delete pods":
			out = append(out, act)
		}
	}
	return out
}

// TestEveryDisruptiveActivityAsksThePolicyFirst: the cordon and the drain each ask the policy
// whether this rollout may write to this node (protected labels, cordon and drain granted to its
// namespace, the namespaces of the Pods it would evict) before their first write; a refusal is
// a non-retryable PolicyDenied and nothing is written. A cordon followed by a drain asks about
// the drain too, so a refused drain leaves no cordon behind. Lifting our own cordon is never
// refused.
func TestEveryDisruptiveActivityAsksThePolicyFirst(t *testing.T) {
	system := tenantPod("coredns-1", "n1", func(p *corev1.Pod) { p.Namespace = "kube-system" })
	cases := []struct {
		name     string
		node     *corev1.Node
		pods     []runtime.Object
		activity string // CordonNode or DrainNode
		in       any
		rule     string // "" = allowed
	}{
		{"cordon of the control plane", controlPlaneNode("n1"), nil, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "ops"}, policy.RuleProtectedNodeLabels},
		{"cordon not granted", testNode("n1", nil), nil, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "apps"}, policy.RuleCordon},
		{"cordon before a drain not granted", testNode("n1", nil), nil, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "cordononly", Drain: true}, policy.RuleDrain},
		{"cordon before a drain that would evict kube-system", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil), system}, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "ops", Drain: true}, policy.RuleEvictNamespaces},
		{"cordon from an input without a namespace", testNode("n1", nil), nil, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1"}, policy.RuleNamespaces},
		{"cordon granted", testNode("n1", nil), nil, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "cordononly"}, ""},
		{"cordon before a drain granted", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil)}, "CordonNode",
			NodeInput{Rollout: "kata", Node: "n1", Namespace: "ops", Drain: true}, ""},
		{"drain of the control plane", controlPlaneNode("n1"), []runtime.Object{tenantPod("web-1", "n1", nil)}, "DrainNode",
			DrainInput{Node: "n1", Namespace: "ops"}, policy.RuleProtectedNodeLabels},
		{"drain not granted", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil)}, "DrainNode",
			DrainInput{Node: "n1", Namespace: "cordononly"}, policy.RuleDrain},
		{"drain evicting kube-system", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil), system}, "DrainNode",
			DrainInput{Node: "n1", Namespace: "ops"}, policy.RuleEvictNamespaces},
		{"drain from an input without a namespace", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil)}, "DrainNode",
			DrainInput{Node: "n1"}, policy.RuleNamespaces},
		{"drain granted", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil)}, "DrainNode",
			DrainInput{Node: "n1", Namespace: "ops"}, ""},
		{"drain passing kube-system's DaemonSet", testNode("n1", nil), []runtime.Object{tenantPod("web-1", "n1", nil), daemonPod("proxy-1", "kube-system", "n1")}, "DrainNode",
			DrainInput{Node: "n1", Namespace: "ops"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := &evictions{}
			a := drainEnv(t, e, append([]runtime.Object{c.node}, c.pods...)...)
			p, err := policy.Parse([]byte(maintenancePolicy))
			require.NoError(t, err)
			a.Policy = p
			env := newEnv(a)
			switch in := c.in.(type) {
			case NodeInput:
				_, err = env.ExecuteActivity(a.CordonNode, in)
			case DrainInput:
				_, err = drain(t, a, in)
			}
			if c.rule == "" {
				require.NoError(t, err)
				require.NotEmpty(t, nodeWrites(e))
				return
			}
			appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
			require.Contains(t, appErr.Message(), `"`+c.rule+`"`)
			require.Empty(t, nodeWrites(e), "nothing is written: %v", actions(e.cs))
		})
	}

	// Lifting our own cordon is never refused, the control plane's included: it undoes our write.
	cp := controlPlaneNode("n1")
	cp.Spec.Unschedulable = true
	cp.Annotations = map[string]string{CordonedByKey: "kata"}
	e := &evictions{}
	a := drainEnv(t, e, cp)
	p, err := policy.Parse([]byte(maintenancePolicy))
	require.NoError(t, err)
	a.Policy = p
	val, err := newEnv(a).ExecuteActivity(a.UncordonNode, NodeInput{Rollout: "kata", Node: "n1", Namespace: "apps"})
	require.NoError(t, err)
	var u UncordonResult
	require.NoError(t, val.Get(&u))
	require.True(t, u.Uncordoned)
}

// TestDrainPolicyJudgesOnlyWhatItEvicts: a Pod of a namespace the drain may not evict that is
// already terminating is only waited for, so the policy has nothing to refuse.
func TestDrainPolicyJudgesOnlyWhatItEvicts(t *testing.T) {
	now := metav1.Now()
	leaving := tenantPod("coredns-1", "n1", func(p *corev1.Pod) {
		p.Namespace = "kube-system"
		p.DeletionTimestamp = &now
		p.Finalizers = []string{"x"}
	})
	e := &evictions{}
	a := drainEnv(t, e, testNode("n1", nil), leaving, tenantPod("web-1", "n1", nil))
	p, err := policy.Parse([]byte(maintenancePolicy))
	require.NoError(t, err)
	a.Policy = p
	_, err = drain(t, a, DrainInput{Node: "n1", Namespace: "ops", Deadline: time.Now().Add(time.Second)})
	appErr := requireAppError(t, err, api.ErrDrainTimedOut, true)
	require.Equal(t, []string{"web-1"}, e.asked, "%s %v", appErr.Message(), actions(e.cs))
}

// TestARefusedCordonLeavesAnotherRolloutsKeptCordon: rollout kata failed on n1 and kept it
// cordoned (onFailure keepCordoned: left for someone to look at). Rollout other reaches n1;
// the policy refuses its cordon (its namespace may not cordon), so it writes nothing and never
// takes kata's cordon over. Its node workflow then leaves the node as onFailure uncordon says
// (a cordon that failed may have gone through, so the workflow asks UncordonNode): that must
// not lift kata's cordon, which was there before other came.
func TestARefusedCordonLeavesAnotherRolloutsKeptCordon(t *testing.T) {
	a := fieldManagedEnv(t, "n1")
	require.True(t, cordon(t, a, "kata", "n1").WeCordoned, "kata's cordon, kept after its failure")
	p, err := policy.Parse([]byte(maintenancePolicy))
	require.NoError(t, err)
	a.Policy = p

	_, err = newEnv(a).ExecuteActivity(a.CordonNode, NodeInput{Rollout: "other", Node: "n1", Namespace: "apps"})
	requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Equal(t, "kata", getNode(t, a, "n1").Annotations[CordonedByKey], "the refused cordon took nothing over")

	// other's leave() after the refusal, with onFailure uncordon.
	_, err = newEnv(a).ExecuteActivity(a.UncordonNode, NodeInput{Rollout: "other", Node: "n1", Namespace: "apps"})
	require.NoError(t, err)
	n := getNode(t, a, "n1")
	require.True(t, n.Spec.Unschedulable, "kata's kept cordon was lifted by rollout other, whose cordon the policy refused")
	require.Equal(t, "kata", n.Annotations[CordonedByKey])
}

// TestDrainRoundsJudgeTheNodeAsItIsNow: each round of evictions asks the policy first, and
// a node labelled protected while its drain waits on a budget (an admin marking it so to stop
// it) is one no further eviction may reach.
func TestDrainRoundsJudgeTheNodeAsItIsNow(t *testing.T) {
	e := &evictions{}
	e.refuse = func(pod string, try int) bool {
		if try == 1 {
			// Refused by a budget; meanwhile the node is labelled control-plane.
			// (The tracker, not the clientset: a reactor runs under the fake's lock.)
			gvr := corev1.SchemeGroupVersion.WithResource("nodes")
			obj, err := e.cs.Tracker().Get(gvr, "", "n1")
			require.NoError(t, err)
			n := obj.(*corev1.Node).DeepCopy()
			n.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
			require.NoError(t, e.cs.Tracker().Update(gvr, n, ""))
			return true
		}
		return false
	}
	a := drainEnv(t, e, testNode("n1", nil), tenantPod("web-1", "n1", nil))
	p, err := policy.Parse([]byte(maintenancePolicy))
	require.NoError(t, err)
	a.Policy = p
	_, err = drain(t, a, DrainInput{Node: "n1", Namespace: "ops"})
	requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Equal(t, []string{"web-1"}, e.asked, "no eviction after the node became protected")
}

// TestACordonAsksThePolicyAboutTheJobThatFollows: the policy was tightened after the rollout
// started (its template passed then), and now refuses the node's Job. The cordon asks about the
// Job as CreateJob will, so the node is neither cordoned nor drained for a Job that never runs.
func TestACordonAsksThePolicyAboutTheJobThatFollows(t *testing.T) {
	a := fieldManagedEnv(t, "n1")
	p, err := policy.Parse([]byte(maintenancePolicy))
	require.NoError(t, err)
	a.Policy = p
	privileged := strings.Replace(testTemplate, "        image: busybox\n", "        image: busybox\n        securityContext: {privileged: true}\n", 1)
	job := JobRequest{Rollout: "r", Namespace: "ops", Node: "n1", RunID: "run-1", Template: privileged, TemplateHash: jobspec.TemplateHash(privileged)}
	_, err = newEnv(a).ExecuteActivity(a.CordonNode, NodeInput{Rollout: "r", Node: "n1", Namespace: "ops", Drain: true, Job: &job})
	appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Contains(t, appErr.Message(), `"`+policy.RulePrivileged+`"`)
	require.False(t, getNode(t, a, "n1").Spec.Unschedulable, "the node is not cordoned for a Job the policy refuses")

	job.Template = testTemplate
	job.TemplateHash = jobspec.TemplateHash(testTemplate)
	_, err = newEnv(a).ExecuteActivity(a.CordonNode, NodeInput{Rollout: "r", Node: "n1", Namespace: "ops", Drain: true, Job: &job})
	require.NoError(t, err, "a Job the policy allows: the cordon goes through")
	require.True(t, getNode(t, a, "n1").Spec.Unschedulable)
}
