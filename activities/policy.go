package activities

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// PolicyViolation is the detail of a PolicyDenied error: which rule, which field.
type PolicyViolation struct {
	Rule  string `json:"rule"`
	Field string `json:"field"`
}

// checkRequestPolicy judges the request's own fields before anything is read from the cluster,
// so a denied ConfigMap namespace is not even looked at.
func (a *Activities) checkRequestPolicy(in PrepareTemplateInput) error {
	req := policy.Request{Namespace: in.Namespace, NodeSelector: in.NodeSelector, Parallelism: in.Parallelism,
		Cordon: in.Cordon || in.Drain, Drain: in.Drain}
	if ref := in.TemplateRef; ref != nil {
		req.TemplateNamespace = ref.Namespace
	}
	if err := a.Policy.CheckRequest(req); err != nil {
		return policyDenied(err)
	}
	return policyDenied(a.Policy.CheckNodeMarks(NodeMarksOf(in.Namespace, in.OnSuccess)))
}

// checkTemplatePolicy judges the template as the Jobs will have it, in the request's namespace.
func (a *Activities) checkTemplatePolicy(in PrepareTemplateInput, job *batchv1.Job) error {
	job.Namespace = in.Namespace
	return policyDenied(a.Policy.CheckJob(job))
}

// checkJobPolicy judges one rendered Job before it is created: the template the workflow carries
// was checked at the start, but the policy may have changed since, and a node reached by name
// or a broad selector may be one the policy protects. When the policy guards nodes it returns
// the Node it read (from the watch cache), which then serves as the create's node check: one
// Node read per Job, not two.
func (a *Activities) checkJobPolicy(ctx context.Context, in JobRequest, job *batchv1.Job) (*corev1.Node, error) {
	if err := a.Policy.CheckJob(job); err != nil {
		return nil, policyDenied(err)
	}
	if !a.Policy.GuardsNodes() {
		return nil, nil
	}
	node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil, nil // CreateJob's own node check asks etcd and reports the node gone
	}
	if err != nil {
		return nil, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
	}
	return node, a.mayWriteNode(nodeWrite{namespace: in.Namespace, node: node})
}

// nodeWrite is a write a rollout is about to make to a node: its Job (neither cordon nor
// drain), a cordon, or a drain that would evict evict.
type nodeWrite struct {
	namespace     string // the rollout's, where its Jobs go
	node          *corev1.Node
	cordon, drain bool
	evict         []*corev1.Pod
}

// mayWriteNode is the one answer to "may this rollout write to this node?", so a rule about
// node writes is added here and nowhere else. Every activity that writes to a Node or evicts its
// Pods asks it before its first write: CreateJob for the Job it places there, CordonNode (about
// the drain that follows too, and the Job against CheckJob), DrainNode before each round of
// evictions, on the node as it is then. Two writes do not ask: UncordonNode, which only lifts
// this rollout's own cordon, and the outcome marker FinalizeJob records,
// our own annotations that change nothing that runs on the node. A refusal is the
// non-retryable PolicyDenied, and the caller writes nothing.
func (a *Activities) mayWriteNode(w nodeWrite) error {
	if a.Policy == nil {
		return nil
	}
	check := policy.NodeWrite{Namespace: w.namespace, Node: w.node.Name, NodeLabels: w.node.Labels, Cordon: w.cordon, Drain: w.drain}
	for _, p := range w.evict {
		check.Evict = append(check.Evict, policy.PodRef{Namespace: p.Namespace, Name: p.Name})
	}
	return policyDenied(a.Policy.CheckNodeWrite(check))
}

// policyDenied turns a policy denial into the non-retryable PolicyDenied error, the rule and
// field in its message and details.
func policyDenied(err error) error {
	var d *policy.Denial
	if !errors.As(err, &d) {
		return err
	}
	return temporal.NewNonRetryableApplicationError(d.Error()+" (the worker's policy file decides this, not the request)",
		api.ErrPolicyDenied, nil, PolicyViolation{Rule: d.Rule, Field: d.Field})
}

// policyParallelism is the policy's parallelism cap, 0 when there is none.
func (a *Activities) policyParallelism() int {
	if a.Policy == nil {
		return 0
	}
	return a.Policy.MaxParallelism
}
