package activities

import (
	"context"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// CheckNodesInput asks which of some nodes a converging rollout must run: Names, or (Resync)
// every Node of the cluster.
type CheckNodesInput struct {
	Rollout       string   `json:"rollout"`
	Selector      string   `json:"selector"`
	FieldSelector string   `json:"fieldSelector,omitempty"`
	TemplateHash  string   `json:"templateHash"`
	DeselectHash  string   `json:"deselectHash,omitempty"` // "" without onDeselect
	Names         []string `json:"names,omitempty"`
	Resync        bool     `json:"resync,omitempty"`
	// Retry are failed nodes due to run again (retryFailedAfter): run while their marker
	// still says this template failed there.
	Retry  []string `json:"retry,omitempty"`
	Labels []string `json:"labels,omitempty"` // label keys whose values the result reports
	// TaintCheck is the first pass's (nil: taints: ignore): a node whose taint the Job's Pod
	// does not tolerate is not run, as in the listing of the first pass.
	TaintCheck *api.TaintCheck `json:"taintCheck,omitempty"`
}

// CheckNodesResult is what a converging rollout does next.
type CheckNodesResult struct {
	Run      []string `json:"run,omitempty"`      // selected, Ready, and not at the template
	Deselect []string `json:"deselect,omitempty"` // left the selector after running the template: onDeselect's Job
	// Untolerated are the nodes that would run but carry a taint the Job's Pod does not
	// tolerate (by name, the taint): skipped, like the first pass's.
	Untolerated map[string]string `json:"untolerated,omitempty"`
	// Selected and AtTemplate count every selected Node, and those whose marker says the
	// template succeeded there.
	Selected   int                          `json:"selected"`
	AtTemplate int                          `json:"atTemplate"`
	Labels     map[string]map[string]string `json:"labels,omitempty"`
}

// ConvergeNeed is what a converging rollout owes one node.
type ConvergeNeed int

const (
	verdictNone     ConvergeNeed = iota
	verdictRun                   // selected and not at the template
	verdictDeselect              // no longer selected, ran the template, onDeselect not yet run
)

// ConvergeVerdict says what a converging rollout owes a node: to run it (selected, Ready, and
// no marker of this template: a new node, a new machine under a reused name, one whose marker
// names another template, or one aborted), to run onDeselect's Job on it, or nothing. A failed
// node is not run again: its marker stands until someone reruns it. The worker's Node watch
// asks it too, to signal only for nodes that need something.
func ConvergeVerdict(node *corev1.Node, selected bool, rollout, hash, deselectHash string) ConvergeNeed {
	markerHash, outcome, marked := jobspec.ParseNodeMarker(node.Annotations[jobspec.NodeMarkerKey(rollout)])
	ours := marked && jobspec.SameTemplateHash(markerHash, hash)
	if !selected {
		if deselectHash != "" && ours {
			return verdictDeselect
		}
		return verdictNone
	}
	if !nodeReady(node) {
		return verdictNone // its Ready condition brings it back
	}
	if !ours || outcome == string(api.OutcomeAborted) {
		return verdictRun
	}
	return verdictNone
}

// NeedsRun and NeedsDeselect read a verdict.
func (v ConvergeNeed) NeedsRun() bool      { return v == verdictRun }
func (v ConvergeNeed) NeedsDeselect() bool { return v == verdictDeselect }

// nodeReady says the Node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CheckNodes reads the named Nodes (or, on resync, every Node) and says which the converging
// rollout runs and which get onDeselect's Job, and counts the selected Nodes at the template.
func (a *Activities) CheckNodes(ctx context.Context, in CheckNodesInput) (CheckNodesResult, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	labelSel, err := labels.Parse(in.Selector)
	if err != nil {
		return CheckNodesResult{}, invalidRequest("nodeSelector", "%q is not a label selector: %v", in.Selector, err)
	}
	fieldSel, err := fields.ParseSelector(in.FieldSelector)
	if err != nil {
		return CheckNodesResult{}, invalidRequest("fieldSelector", "%q is not a field selector: %v", in.FieldSelector, err)
	}
	selected := func(n *corev1.Node) bool {
		return labelSel.Matches(labels.Set(n.Labels)) && fieldSel.Matches(nodeFields(n))
	}
	var res CheckNodesResult
	retry := map[string]bool{}
	for _, n := range in.Retry {
		retry[n] = true
	}
	judge := func(n *corev1.Node) {
		v := ConvergeVerdict(n, selected(n), in.Rollout, in.TemplateHash, in.DeselectHash)
		if retry[n.Name] && selected(n) && nodeReady(n) && failedHere(n, in.Rollout, in.TemplateHash) {
			v = verdictRun
		}
		switch {
		case v.NeedsRun() && untoleratedTaint(in.TaintCheck, n) != "":
			if res.Untolerated == nil {
				res.Untolerated = map[string]string{}
			}
			res.Untolerated[n.Name] = untoleratedTaint(in.TaintCheck, n)
		case v.NeedsRun():
			res.Run = append(res.Run, n.Name)
			if l := wantedLabels(in.Labels, n.Labels); l != nil {
				if res.Labels == nil {
					res.Labels = map[string]map[string]string{}
				}
				res.Labels[n.Name] = l
			}
		case v.NeedsDeselect():
			res.Deselect = append(res.Deselect, n.Name)
		}
	}
	// Every selected Node is counted; on resync every Node is judged, since one that left
	// the selector while the worker was down is found only among the others.
	opts := metav1.ListOptions{Limit: NodePageSize}
	if !in.Resync {
		opts.LabelSelector, opts.FieldSelector = in.Selector, in.FieldSelector
	}
	for {
		page, err := a.Kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return CheckNodesResult{}, kubeError(err, "list", "nodes")
		}
		for i := range page.Items {
			n := &page.Items[i]
			if selected(n) {
				res.Selected++
				if h, o, ok := jobspec.ParseNodeMarker(n.Annotations[jobspec.NodeMarkerKey(in.Rollout)]); ok &&
					jobspec.SameTemplateHash(h, in.TemplateHash) && o == string(api.OutcomeSucceeded) {
					res.AtTemplate++
				}
			}
			if in.Resync {
				judge(n)
			}
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if in.Resync {
		return res, nil // every Node was judged, the retried ones with them
	}
	nodes, err := a.getNodes(ctx, append(slices.Clone(in.Names), in.Retry...))
	if err != nil {
		return CheckNodesResult{}, err
	}
	for _, n := range nodes {
		judge(n)
	}
	return res, nil
}

// failedHere says the node's marker records that this template failed there (retriedOutcome
// in the workflow says which outcomes).
func failedHere(n *corev1.Node, rollout, hash string) bool {
	h, outcome, ok := jobspec.ParseNodeMarker(n.Annotations[jobspec.NodeMarkerKey(rollout)])
	if !ok || !jobspec.SameTemplateHash(h, hash) {
		return false
	}
	return api.RetriedByConverge(api.Outcome(outcome))
}

// getNodes reads the named Nodes that exist, in name order, a few at a time.
func (a *Activities) getNodes(ctx context.Context, names []string) ([]*corev1.Node, error) {
	names = slices.Compact(slices.Sorted(slices.Values(names)))
	nodes := make([]*corev1.Node, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, nodeGetConcurrency)
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n, err := a.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err): // gone: nothing to run, nothing to uninstall
			case err != nil:
				errs[i] = kubeError(err, "get", fmt.Sprintf("node %q", name))
			default:
				nodes[i] = n
			}
		})
	}
	wg.Wait()
	var out []*corev1.Node
	for i := range names {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if nodes[i] != nil {
			out = append(out, nodes[i])
		}
	}
	return out, nil
}
