package activities

import (
	"context"
	"errors"
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
	// listRestarts bounds how many expired continue tokens one listing meets before the
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
	taint  string            // the first taint its Job's Pod does not tolerate (TaintCheck)
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
	defer keepAlive(ctx, a.HeartbeatInterval)()
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
	walk, err := a.listSelectedNodes(ctx, in, limit)
	if err != nil {
		return ListNodesResult{}, err
	}
	entries := walk.entries
	slices.SortFunc(entries, func(x, y nodeEntry) int { return strings.Compare(x.name, y.name) })
	entries = slices.CompactFunc(entries, func(x, y nodeEntry) bool { return x.name == y.name })
	res := ListNodesResult{Total: walk.count()}
	res.More = !walk.complete || len(entries) > limit
	if len(entries) > limit {
		entries = entries[:limit]
	}
	for _, e := range entries {
		classify(&res, in, e)
	}
	if len(entries) == 0 {
		return res, nil
	}
	last := entries[len(entries)-1].name
	if res.More {
		res.Next, res.Continue = last, walk.resume
	}
	for _, m := range walk.marks {
		if walk.ordered && m.First <= last { // the pages of this slice, not those a count read past it
			res.Marks = append(res.Marks, m)
		}
	}
	// The last slice keeps its marks too: a run that continues as new in the middle of it must
	// resume at its cursor's page, not read the fleet again from the first. A slice that is
	// the first page alone needs none ("" is where a listing without marks starts).
	if !res.More && len(res.Marks) == 1 && res.Marks[0].Continue == "" {
		res.Marks = nil
	}
	return res, nil
}

// nodeWalk is what one listing of the selected Nodes read.
type nodeWalk struct {
	entries   []nodeEntry // the Nodes named after ListNodesInput.After
	read      int         // Nodes read in all
	largest   string
	ordered   bool // every Node read sorted after the one before: pages came in name order
	fromStart bool // the walk began at the first page
	complete  bool // it reached the last page
	// marks are the continue tokens of the requests that returned entries, each with its
	// first entry ("": the first page); resume is the token right after the last entry, when
	// the walk stopped at a full slice on a page end (only then does a token mark the slice's
	// end exactly).
	marks  []api.ListingMark
	resume string
}

// count is the whole selection's size when the walk read it all, else 0 (not counted).
func (w *nodeWalk) count() int {
	if w.fromStart && w.complete {
		return w.read
	}
	return 0
}

// listSelectedNodes reads the selected Nodes page by page. The first slice of a listing (no
// After, no Continue) walks every page, since it counts the whole selection (the rollout's
// denominator, for its progress and its failure budget). A later slice stops once it holds
// limit nodes: it starts at in.Continue, the token where the previous slice stopped (or, in a
// run that continued as new mid-slice, the token of its cursor's page: ListNodesResult.Marks),
// and asks for pages no longer than what the slice still lacks, so that it ends on a page end
// and hands the next slice that page's token. A listing of S slices so reads each page about
// once: linear, where re-reading from the first page to the cursor for every slice was S²
// pages. Without a token (a history from before tokens) a later slice reads from the first
// page and keeps the names after in.After, as before.
//
// Stopping early is sound because a paginated list resumes after the last key it returned, and
// a cluster-scoped object's key ends in its name: every later page sorts after the names held.
// It is taken only while every name read came in order, so a server that answered out of order
// is simply walked to the end, and its slice gets no token.
//
// An expired continue token (410: the listing outlived etcd's compaction, typically 5 minutes,
// e.g. a slice of long Jobs) is replaced by the token the API server sends with that error,
// which continues the same walk at the same key on current data: nodes added or removed since
// show as they are now, as they would to any later slice. When the error carries none, the
// walk starts again from the first page, keeping the names after in.After: the same nodes, at
// the old cost. Never a full unpaginated list, which is what paging avoids.
func (a *Activities) listSelectedNodes(ctx context.Context, in ListNodesInput, limit int) (nodeWalk, error) {
	stopAt := 0 // entries a walk may stop at; 0: never stop, count everything
	if in.After != "" || in.Continue != "" {
		stopAt = limit
	}
	walk, err := a.walkNodes(ctx, in, stopAt)
	switch {
	case err == nil:
		return walk, nil
	case apierrors.IsBadRequest(err) || apierrors.IsInvalid(err):
		// The selectors parsed, so the server refused what they select on (e.g. a field Nodes
		// do not support).
		return nodeWalk{}, invalidRequest("nodeSelector", "the API server rejected selector %q / fieldSelector %q: %v",
			in.Selector, in.FieldSelector, err)
	}
	return nodeWalk{}, kubeError(err, "list", "nodes")
}

// walkNodes reads the selected Nodes from in.Continue (or the first page), keeping those after
// in.After, until the last page or (stopAt > 0, pages in order) until it holds stopAt of them.
func (a *Activities) walkNodes(ctx context.Context, in ListNodesInput, stopAt int) (nodeWalk, error) {
	nodes := a.Kube.CoreV1().Nodes()
	markerKey := jobspec.NodeMarkerKey(in.Rollout)
	opts := metav1.ListOptions{LabelSelector: in.Selector, FieldSelector: in.FieldSelector, Continue: in.Continue}
	w := nodeWalk{ordered: true, fromStart: in.Continue == ""}
	expired := 0
	for {
		opts.Limit = NodePageSize
		if stopAt > 0 && w.ordered {
			opts.Limit = int64(min(NodePageSize, stopAt-len(w.entries)))
		}
		page, err := nodes.List(ctx, opts)
		if err != nil {
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				return nodeWalk{}, err
			}
			if expired++; expired >= listRestarts {
				return nodeWalk{}, err
			}
			if token := continueAfterExpiry(err); token != "" && opts.Continue != "" {
				opts.Continue = token
				continue
			}
			w = nodeWalk{ordered: true, fromStart: true}
			opts.Continue = ""
			continue
		}
		for i := range page.Items {
			node := &page.Items[i]
			w.read++
			if node.Name <= w.largest {
				w.ordered = false
			}
			w.largest = max(w.largest, node.Name)
			if node.Name > in.After {
				if len(w.marks) == 0 || w.marks[len(w.marks)-1].Continue != opts.Continue {
					w.marks = append(w.marks, api.ListingMark{Continue: opts.Continue, First: node.Name})
				}
				w.entries = append(w.entries, newNodeEntry(in, markerKey, node))
			}
		}
		if page.Continue == "" {
			w.complete = true
			return w, nil
		}
		if stopAt > 0 && w.ordered && len(w.entries) >= stopAt {
			if len(w.entries) == stopAt {
				w.resume = page.Continue
			}
			return w, nil
		}
		opts.Continue = page.Continue
	}
}

// continueAfterExpiry is the token a 410 for an expired continue token carries, which
// continues the list at the same key on current data ("" when the server sent none).
func continueAfterExpiry(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().ListMeta.Continue
	}
	return ""
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
				entries[i] = newNodeEntry(in, markerKey, node)
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

// newNodeEntry keeps what the listing needs of a Node.
func newNodeEntry(in ListNodesInput, markerKey string, node *corev1.Node) nodeEntry {
	return nodeEntry{name: node.Name, marker: node.Annotations[markerKey], labels: wantedLabels(in.Labels, node.Labels),
		taint: untoleratedTaint(in.TaintCheck, node)}
}

// classify puts a node in Done when its marker says this template already succeeded on it,
// else in Untolerated when a taint keeps its Pod off it.
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
	if e.taint != "" {
		if res.Untolerated == nil {
			res.Untolerated = map[string]string{}
		}
		res.Untolerated[e.name] = e.taint
		return
	}
	res.Nodes = append(res.Nodes, e.name)
}
