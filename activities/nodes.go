package activities

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

const (
	// NodePageSize is how many Nodes one List request asks for.
	NodePageSize = 500
	// DefaultListLimit applies when ListNodesInput.Limit is not positive.
	DefaultListLimit = 1000
	// listRestarts bounds how often an expired continue token restarts a listing before the
	// activity gives up and lets Temporal retry it.
	listRestarts = 3
	// nodeGetConcurrency bounds the GETs for an explicit node list.
	nodeGetConcurrency = 8
)

// nodeEntry is what a listing keeps of a Node: enough to sort and to read its marker.
type nodeEntry struct {
	name   string
	marker string
	labels map[string]string // the values of ListNodesInput.Labels it carries
}

// wantedLabels picks the requested label values of a node (nil when it has none of them).
func wantedLabels(keys []string, nodeLabels map[string]string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := nodeLabels[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// ListNodes returns, in name order, the next slice of selected nodes after in.After: those to
// run, those already done for this template (unless Rerun), and explicit names with no Node.
func (a *Activities) ListNodes(ctx context.Context, in ListNodesInput) (ListNodesResult, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = DefaultListLimit
	}
	labelSel, err := labels.Parse(in.Selector)
	if err != nil {
		return ListNodesResult{}, invalidRequest("nodeSelector", "%q is not a label selector: %v", in.Selector, err)
	}
	fieldSel, err := fields.ParseSelector(in.FieldSelector)
	if err != nil {
		return ListNodesResult{}, invalidRequest("fieldSelector", "%q is not a field selector: %v", in.FieldSelector, err)
	}
	if len(in.Names) > 0 {
		return a.listNamedNodes(ctx, in, limit, func(n *corev1.Node) bool {
			return labelSel.Matches(labels.Set(n.Labels)) && fieldSel.Matches(nodeFields(n))
		})
	}
	if in.Selector == "" && in.FieldSelector == "" {
		return ListNodesResult{}, invalidRequest("nodeSelector", "set nodes (a list of names) or nodeSelector (a label selector)")
	}
	entries, total, err := a.listSelectedNodes(ctx, in, limit)
	if err != nil {
		return ListNodesResult{}, err
	}
	slices.SortFunc(entries, func(x, y nodeEntry) int { return strings.Compare(x.name, y.name) })
	entries = slices.CompactFunc(entries, func(x, y nodeEntry) bool { return x.name == y.name })
	res := ListNodesResult{Total: total}
	if len(entries) > limit {
		entries, res.More = entries[:limit], true
	}
	for _, e := range entries {
		classify(&res, in, e)
	}
	if res.More {
		res.Next = entries[len(entries)-1].name
	}
	return res, nil
}

// listSelectedNodes pages through the selected Nodes, keeping those after in.After. The first
// slice of a listing (no After) walks every page, since it counts the whole selection (the
// rollout's denominator, for its progress and its failure budget). A later slice stops as soon
// as it holds more than limit nodes: on a fleet of 10,000 that is a page or two past the cursor
// instead of every Node each time. The count of a slice that stopped early is 0 (not counted).
//
// Stopping early is sound because a paginated list resumes after the last key it returned, and
// a cluster-scoped object's key ends in its name: every later page sorts after the names held.
// It is taken only when the page's last item is also the largest name seen so far, so a server
// that answered out of order is simply walked to the end.
//
// An expired continue token (the listing outlived etcd compaction) restarts the listing from
// the first page: a full unpaginated list, as client-go's pager falls back to, is what paging is
// for avoiding.
func (a *Activities) listSelectedNodes(ctx context.Context, in ListNodesInput, limit int) ([]nodeEntry, int, error) {
	stopAfter := 0 // entries held before a walk may stop; 0: never stop, count everything
	if in.After != "" {
		stopAfter = limit
	}
	var err error
	for range listRestarts {
		var entries []nodeEntry
		var total int
		entries, total, err = a.walkNodes(ctx, in, stopAfter)
		if err == nil {
			return entries, total, nil
		}
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			break
		}
	}
	if apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) {
		// The selectors parsed, so the server refused what they select on (e.g. a field Nodes
		// do not support).
		return nil, 0, invalidRequest("nodeSelector", "the API server rejected selector %q / fieldSelector %q: %v",
			in.Selector, in.FieldSelector, err)
	}
	return nil, 0, kubeError(err, "list", "nodes")
}

// walkNodes reads the selected Nodes page by page from the first, keeping those after in.After,
// until the last page or (stopAfter > 0) until more than stopAfter are held at a page's end.
// total counts every Node read when the walk reached the last page, and is 0 when it stopped.
func (a *Activities) walkNodes(ctx context.Context, in ListNodesInput, stopAfter int) ([]nodeEntry, int, error) {
	nodes := a.Kube.CoreV1().Nodes()
	markerKey := jobspec.NodeMarkerKey(in.Rollout)
	opts := metav1.ListOptions{LabelSelector: in.Selector, FieldSelector: in.FieldSelector, Limit: NodePageSize}
	var entries []nodeEntry
	var total int
	var largest string
	for {
		page, err := nodes.List(ctx, opts)
		if err != nil {
			return nil, 0, err
		}
		for i := range page.Items {
			node := &page.Items[i]
			total++
			largest = max(largest, node.Name)
			if node.Name > in.After {
				entries = append(entries, nodeEntry{name: node.Name, marker: node.Annotations[markerKey], labels: wantedLabels(in.Labels, node.Labels)})
			}
		}
		if page.Continue == "" {
			return entries, total, nil
		}
		if stopAfter > 0 && len(entries) > stopAfter && len(page.Items) > 0 && page.Items[len(page.Items)-1].Name == largest {
			return entries, 0, nil
		}
		opts.Continue = page.Continue
	}
}

// nodeFields are the fields a field selector on Nodes can name.
func nodeFields(n *corev1.Node) fields.Set {
	return fields.Set{"metadata.name": n.Name, "spec.unschedulable": strconv.FormatBool(n.Spec.Unschedulable)}
}

// listNamedNodes resolves the slice of an explicit node list after in.After; a Node that
// selected does not match (the input's selectors, when it has any) is Unselected.
func (a *Activities) listNamedNodes(ctx context.Context, in ListNodesInput, limit int, selected func(*corev1.Node) bool) (ListNodesResult, error) {
	if slices.Contains(in.Names, "") {
		return ListNodesResult{}, invalidRequest("nodes", "contains an empty node name")
	}
	names := slices.Clone(in.Names)
	slices.Sort(names)
	names = slices.Compact(names)
	res := ListNodesResult{Total: len(names)}
	start, _ := slices.BinarySearch(names, in.After)
	if start < len(names) && names[start] == in.After {
		start++
	}
	names = names[start:]
	if len(names) > limit {
		names, res.More = names[:limit], true
		res.Next = names[len(names)-1]
	}

	markerKey := jobspec.NodeMarkerKey(in.Rollout)
	entries := make([]nodeEntry, len(names))
	missing := make([]bool, len(names))
	unselected := make([]bool, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, nodeGetConcurrency)
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			node, err := a.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				missing[i] = true
			case err != nil:
				errs[i] = kubeError(err, "get", fmt.Sprintf("node %q", name))
			case !selected(node):
				unselected[i] = true
			default:
				entries[i] = nodeEntry{name: name, marker: node.Annotations[markerKey], labels: wantedLabels(in.Labels, node.Labels)}
			}
		}()
	}
	wg.Wait()
	for i, name := range names {
		if errs[i] != nil {
			return ListNodesResult{}, errs[i]
		}
		if missing[i] {
			res.Missing = append(res.Missing, name)
			continue
		}
		if unselected[i] {
			res.Unselected = append(res.Unselected, name)
			continue
		}
		classify(&res, in, entries[i])
	}
	return res, nil
}

// classify puts a node in Done when its marker says this template already succeeded on it.
func classify(res *ListNodesResult, in ListNodesInput, e nodeEntry) {
	if e.labels != nil {
		if res.Labels == nil {
			res.Labels = map[string]map[string]string{}
		}
		res.Labels[e.name] = e.labels
	}
	if !in.Rerun {
		if hash, outcome, ok := jobspec.ParseNodeMarker(e.marker); ok &&
			jobspec.SameTemplateHash(hash, in.TemplateHash) && outcome == string(api.OutcomeSucceeded) {
			res.Done = append(res.Done, e.name)
			return
		}
	}
	res.Nodes = append(res.Nodes, e.name)
}
