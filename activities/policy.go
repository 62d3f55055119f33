package activities

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.temporal.io/sdk/temporal"

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
	req := policy.Request{Namespace: in.Namespace, NodeSelector: in.NodeSelector, Parallelism: in.Parallelism}
	if ref := in.TemplateRef; ref != nil {
		req.TemplateNamespace = ref.Namespace
	}
	return policyDenied(a.Policy.CheckRequest(req))
}

// checkTemplatePolicy judges the template as the Jobs will have it, in the request's namespace.
func (a *Activities) checkTemplatePolicy(in PrepareTemplateInput, job *batchv1.Job) error {
	job.Namespace = in.Namespace
	return policyDenied(a.Policy.CheckJob(job))
}

// checkJobPolicy judges one rendered Job before it is created: the template the workflow carries
// was checked at the start, but the policy may have changed since, and a node reached by name
// or a broad selector may be one the policy protects.
func (a *Activities) checkJobPolicy(ctx context.Context, in JobRequest, job *batchv1.Job) error {
	if err := a.Policy.CheckJob(job); err != nil {
		return policyDenied(err)
	}
	if !a.Policy.GuardsNodes() {
		return nil
	}
	node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		return nil // CreateJob's own node check reports the node gone
	}
	if err != nil {
		return kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
	}
	return policyDenied(a.Policy.CheckNode(in.Namespace, in.Node, node.Labels))
}

// policyDenied turns a policy denial into the non-retryable PolicyDenied error, the rule and
// field in its message and details.
func policyDenied(err error) error {
	var d *policy.Denial
	if !errors.As(err, &d) {
		return err
	}
	return temporal.NewNonRetryableApplicationError(d.Error()+" (the worker's policy file decides this, not the request)",
		ErrPolicyDenied, nil, PolicyViolation{Rule: d.Rule, Field: d.Field})
}

// policyParallelism is the policy's parallelism cap, 0 when there is none.
func (a *Activities) policyParallelism() int {
	if a.Policy == nil {
		return 0
	}
	return a.Policy.MaxParallelism
}
