package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

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
