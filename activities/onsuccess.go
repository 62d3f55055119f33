package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// MarkNodeInput marks a node done: maintenance.onSuccess for one node.
type MarkNodeInput struct {
	Rollout   string         `json:"rollout"`
	Namespace string         `json:"namespace"`
	Node      string         `json:"node"`
	OnSuccess *api.OnSuccess `json:"onSuccess"`
}

// MarkNodeDone sets the labels, lifts the taints and adds the taints onSuccess names, and
// touches no other key. The policy judges the node and the keys before the write (the same
// judgement the rollout's start made, made again: the policy may have changed). The taints are
// a list, so the patch carries the resourceVersion read and is retried on a conflict;
// a node already as asked is not written at all, so a retried attempt changes nothing.
func (a *Activities) MarkNodeDone(ctx context.Context, in MarkNodeInput) error {
	if err := a.Lineage.check(ctx, ""); err != nil {
		return err
	}
	o := in.OnSuccess
	if o == nil {
		return nil
	}
	if err := policyDenied(a.Policy.CheckNodeMarks(NodeMarksOf(in.Namespace, o))); err != nil {
		return err
	}
	nodes := a.Kube.CoreV1().Nodes()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := nodes.Get(ctx, in.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return errNodeGone(in.Node)
		}
		if err != nil {
			return kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
		}
		if err := a.mayWriteNode(nodeWrite{namespace: in.Namespace, node: node}); err != nil {
			return err
		}
		if !applyOnSuccess(node, o) {
			return nil
		}
		// A merge patch (RBAC's nodes patch covers it) carrying the resourceVersion read: the
		// taints are a list, replaced whole, so a change made since the read is a conflict,
		// not lost.
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": node.ResourceVersion, "labels": node.Labels},
			"spec":     map[string]any{"taints": node.Spec.Taints},
		})
		if err != nil {
			return err
		}
		_, err = nodes.Patch(ctx, in.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			return err
		}
		return kubeError(err, "patch", fmt.Sprintf("node %q", in.Node))
	})
}

// NodeMarksOf is what the policy judges of an onSuccess section: its label and taint keys.
func NodeMarksOf(namespace string, o *api.OnSuccess) policy.NodeMarks {
	m := policy.NodeMarks{Namespace: namespace}
	if o == nil {
		return m
	}
	m.Labels = slices.Sorted(maps.Keys(o.Labels))
	m.Taints = slices.Clone(o.RemoveTaints)
	for _, t := range o.AddTaints {
		m.Taints = append(m.Taints, t.Key)
	}
	return m
}

// applyOnSuccess changes the node as onSuccess asks and says whether anything changed.
func applyOnSuccess(node *corev1.Node, o *api.OnSuccess) bool {
	changed := false
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		if v, ok := node.Labels[k]; !ok || v != o.Labels[k] {
			if node.Labels == nil {
				node.Labels = map[string]string{}
			}
			node.Labels[k] = o.Labels[k]
			changed = true
		}
	}
	kept := node.Spec.Taints[:0:0]
	for _, t := range node.Spec.Taints {
		if slices.Contains(o.RemoveTaints, t.Key) {
			changed = true
			continue
		}
		kept = append(kept, t)
	}
	for _, add := range o.AddTaints {
		want := corev1.Taint{Key: add.Key, Value: add.Value, Effect: corev1.TaintEffect(add.Effect)}
		i := slices.IndexFunc(kept, func(t corev1.Taint) bool { return t.Key == want.Key && t.Effect == want.Effect })
		switch {
		case i < 0:
			kept = append(kept, want)
			changed = true
		case kept[i].Value != want.Value:
			kept[i].Value = want.Value
			changed = true
		}
	}
	node.Spec.Taints = kept
	return changed
}
