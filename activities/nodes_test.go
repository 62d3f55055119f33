package activities

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

const testHash = "0123456789"

func listNodes(t *testing.T, a *Activities, in ListNodesInput) (ListNodesResult, error) {
	t.Helper()
	return execute[ListNodesResult](t, a, a.ListNodes, in)
}

func doneMarker(hash string) map[string]string {
	return map[string]string{jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(hash, string(api.OutcomeSucceeded))}
}

func TestListNodesExplicitNames(t *testing.T) {
	cs, a := newCluster(
		testNode("a", nil),
		testNode("b", doneMarker(testHash)),
		testNode("c", doneMarker("another")), // done for another template: runs again
		testNode("e", map[string]string{jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(testHash, string(api.OutcomeFailed))}),
		testNode("f", nil),
	)
	in := ListNodesInput{Rollout: "kata", TemplateHash: testHash, Names: []string{"f", "d", "a", "c", "b", "a", "e"}, Limit: 4}

	res, err := listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, ListNodesResult{Nodes: []string{"a", "c"}, Done: []string{"b"}, Missing: []string{"d"}, Next: "d", More: true, Total: 6}, res)

	in.After = res.Next
	res, err = listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, ListNodesResult{Nodes: []string{"e", "f"}, Total: 6}, res)
	require.Equal(t, 6, countActions(cs, "get", "nodes"), "one GET per distinct name")
	require.Zero(t, countActions(cs, "list", "nodes"))
}

func TestListNodesRerunIgnoresMarker(t *testing.T) {
	_, a := newCluster(testNode("a", doneMarker(testHash)), testNode("b", nil))
	res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Names: []string{"a", "b"}, Rerun: true, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, ListNodesResult{Nodes: []string{"a", "b"}, Total: 2}, res)
}

func TestListNodesSelectorSinglePage(t *testing.T) {
	labelled := func(name string, ann map[string]string) *corev1.Node {
		node := testNode(name, ann)
		node.Labels = map[string]string{"kata": "true"}
		return node
	}
	cs, a := newCluster(labelled("c", nil), labelled("a", doneMarker(testHash)), labelled("b", nil), testNode("unlabelled", nil))
	res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, ListNodesResult{Nodes: []string{"b", "c"}, Done: []string{"a"}, Total: 3}, res)
	require.Equal(t, []string{"list nodes"}, actions(cs))
	require.EqualValues(t, NodePageSize, cs.Actions()[0].(k8stesting.ListActionImpl).GetListOptions().Limit)
}

// pagedNodes serves the fake's Nodes in pages the way the API server does (the fake ignores
// Limit and Continue) and records every request.
type pagedNodes struct {
	mu       sync.Mutex
	nodes    []*corev1.Node
	requests []metav1.ListOptions
	// expireAt makes the request carrying this continue token fail with err, expireTimes times.
	expireAt    string
	expireErr   error
	expireTimes int
	// offerContinue makes an expiry carry a token that continues at the same place, as the
	// API server's 410 for an expired continue token does.
	offerContinue bool
}

func (p *pagedNodes) react(action k8stesting.Action) (bool, runtime.Object, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := action.(k8stesting.ListActionImpl).GetListOptions()
	p.requests = append(p.requests, opts)
	if opts.Continue != "" && opts.Continue == p.expireAt && p.expireTimes > 0 {
		p.expireTimes--
		if p.offerContinue {
			status := apierrors.NewResourceExpired("the provided continue parameter is too old; use the continue token in this response")
			status.ErrStatus.ListMeta.Continue = inconsistentPrefix + opts.Continue
			return true, nil, status
		}
		return true, nil, p.expireErr
	}
	start := 0
	if opts.Continue != "" {
		start, _ = strconv.Atoi(strings.TrimPrefix(opts.Continue, inconsistentPrefix))
	}
	end := len(p.nodes)
	if opts.Limit > 0 && start+int(opts.Limit) < end {
		end = start + int(opts.Limit)
	}
	list := &corev1.NodeList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
	if end < len(p.nodes) {
		list.Continue = strconv.Itoa(end)
	}
	for _, n := range p.nodes[start:end] {
		list.Items = append(list.Items, *n)
	}
	return true, list, nil
}

// inconsistentPrefix marks the token a 410 carries: the same place, read on current data.
const inconsistentPrefix = "now:"

// continues lists the continue token of each page asked for, in order.
func (p *pagedNodes) continues() []string {
	return asked(p, func(o metav1.ListOptions) string { return o.Continue })
}

// asked lists one field of each list request made, in order.
func asked[T any](p *pagedNodes, field func(metav1.ListOptions) T) []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []T
	for _, r := range p.requests {
		out = append(out, field(r))
	}
	return out
}

// fleet makes n nodes, out of name order (as a watch-cache list may be), every third one done.
func fleet(n int) []*corev1.Node {
	var nodes []*corev1.Node
	for i := n - 1; i >= 0; i-- {
		var ann map[string]string
		if i%3 == 0 {
			ann = doneMarker(testHash)
		}
		node := testNode(fmt.Sprintf("node-%04d", i), ann)
		node.Labels = map[string]string{"kata": "true"}
		nodes = append(nodes, node)
	}
	return nodes
}

func TestListNodesPaginatesWithSelector(t *testing.T) {
	cs, a := newCluster()
	pages := &pagedNodes{nodes: fleet(1100)}
	cs.PrependReactor("list", "nodes", pages.react)
	in := ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", FieldSelector: "spec.unschedulable=false", Limit: 700}

	res, err := listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{"", "500", "1000"}, pages.continues(), "every page read, in order")
	for _, r := range pages.requests {
		require.EqualValues(t, 500, r.Limit)
		require.Equal(t, "kata=true", r.LabelSelector)
		require.Equal(t, "spec.unschedulable=false", r.FieldSelector)
	}
	require.True(t, res.More)
	require.Equal(t, "node-0699", res.Next)
	require.Equal(t, 1100, res.Total, "the whole selection is counted, not just this slice")
	require.Len(t, res.Nodes, 700-234) // node-0000..node-0699: every third done
	require.Len(t, res.Done, 234)
	require.Equal(t, "node-0000", res.Done[0])
	require.Equal(t, "node-0001", res.Nodes[0])
	require.IsIncreasing(t, res.Nodes)
	require.IsIncreasing(t, res.Done)

	in.After = res.Next
	res, err = listNodes(t, a, in)
	require.NoError(t, err)
	require.False(t, res.More)
	require.Empty(t, res.Next)
	require.Equal(t, 1100, res.Total)
	require.Equal(t, 400, len(res.Nodes)+len(res.Done))
	require.Equal(t, "node-0700", res.Nodes[0])
	require.Equal(t, "node-1099", res.Nodes[len(res.Nodes)-1])
	require.Equal(t, []string{"", "500", "1000", "", "500", "1000"}, pages.continues(),
		"pages out of name order give no ground to stop early: the later slice reads every page")
}

// The API server pages in key order, and a Node's key ends in its name: a slice after the
// first stops reading once it holds a full slice, and only the first counts the selection.
func TestListNodesLaterSlicesStopOnceFull(t *testing.T) {
	cs, a := newCluster()
	inKeyOrder := fleet(2600)
	slices.Reverse(inKeyOrder)
	pages := &pagedNodes{nodes: inKeyOrder}
	cs.PrependReactor("list", "nodes", pages.react)
	in := ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", Limit: 700}

	res, err := listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{"", "500", "1000", "1500", "2000", "2500"}, pages.continues(), "the first slice counts every node")
	require.Equal(t, 2600, res.Total)
	require.Equal(t, "node-0699", res.Next)

	pages.requests = nil
	in.After = res.Next
	res, err = listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{"", "500", "1000"}, pages.continues(), "stops at the first page end past a full slice")
	require.Zero(t, res.Total, "a slice that stopped early has not counted the selection")
	require.True(t, res.More)
	require.Equal(t, "node-1399", res.Next)
	require.Equal(t, 700, len(res.Nodes)+len(res.Done))
	require.Equal(t, "node-0700", min(res.Nodes[0], res.Done[0]))

	pages.requests = nil
	in.After = "node-2199"
	res, err = listNodes(t, a, in)
	require.NoError(t, err)
	require.Len(t, pages.continues(), 6, "the last slice reads to the end")
	require.Equal(t, 2600, res.Total)
	require.False(t, res.More)
	require.Equal(t, 400, len(res.Nodes)+len(res.Done))
}

// A server that pages out of name order gives no ground to stop early: stopping after the
// first page here would hand out node-0600.. and lose node-0001..node-0599.
func TestListNodesOutOfOrderPagesAreReadToTheEnd(t *testing.T) {
	cs, a := newCluster()
	pages := &pagedNodes{nodes: fleet(1100)}
	cs.PrependReactor("list", "nodes", pages.react)
	res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", After: "node-0000", Limit: 300})
	require.NoError(t, err)
	// The first page asks for no more than the slice lacks; once the names come out of order,
	// whole pages to the end.
	require.Equal(t, []string{"", "300", "800"}, pages.continues())
	require.Equal(t, []int64{300, 500, 500}, pageLimits(pages))
	require.Equal(t, 1100, res.Total)
	require.Equal(t, "node-0300", res.Next)
	require.Equal(t, "node-0001", res.Nodes[0])
	require.Empty(t, res.Continue, "no token where the order gives no position")
}

func pageLimits(p *pagedNodes) []int64 {
	return asked(p, func(o metav1.ListOptions) int64 { return o.Limit })
}

func TestListNodesRestartsOnExpiredContinue(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"expired", apierrors.NewResourceExpired("the provided continue parameter is too old")},
		//lint:ignore SA1019 older API servers still answer 410 Gone with this reason; the code must handle it
		{"gone", apierrors.NewGone("too old resource version")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, a := newCluster()
			pages := &pagedNodes{nodes: fleet(1100), expireAt: "1000", expireErr: tc.err, expireTimes: 1}
			cs.PrependReactor("list", "nodes", pages.react)

			res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", Limit: 5000})
			require.NoError(t, err)
			// The listing starts again from the first page, still paged: never one unbounded list.
			require.Equal(t, []string{"", "500", "1000", "", "500", "1000"}, pages.continues())
			for _, r := range pages.requests {
				require.EqualValues(t, 500, r.Limit)
			}
			all := append(append([]string{}, res.Nodes...), res.Done...)
			require.Len(t, all, 1100, "no node lost or doubled by the restart")
			require.False(t, res.More)
		})
	}
}

func TestListNodesGivesUpAfterRepeatedExpiry(t *testing.T) {
	cs, a := newCluster()
	pages := &pagedNodes{nodes: fleet(600), expireAt: "500", expireErr: apierrors.NewResourceExpired("too old"), expireTimes: 100}
	cs.PrependReactor("list", "nodes", pages.react)
	_, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", Limit: 10})
	requireAppError(t, err, "", false) // Temporal retries the whole activity later
	require.Len(t, pages.requests, 2*listRestarts)
}

func TestListNodesInvalidSelectors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    ListNodesInput
		field string
	}{
		{"label selector", ListNodesInput{Selector: "kata in (", Limit: 1}, "nodeSelector"},
		{"field selector", ListNodesInput{Selector: "kata=true", FieldSelector: "nonsense", Limit: 1}, "fieldSelector"},
		{"nothing selected", ListNodesInput{Limit: 1}, "nodeSelector"},
		{"empty name", ListNodesInput{Names: []string{"a", ""}, Limit: 1}, "nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, a := newCluster()
			_, err := listNodes(t, a, tc.in)
			appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
			require.Contains(t, appErr.Error(), tc.field)
			require.Empty(t, cs.Actions())
		})
	}
}

func TestListNodesSelectorRejectedByServer(t *testing.T) {
	cs, a := newCluster()
	failOn(cs, "list", "nodes", apierrors.NewBadRequest(`field label not supported: spec.foo`))
	_, err := listNodes(t, a, ListNodesInput{Selector: "kata=true", FieldSelector: "spec.foo=x", Limit: 1})
	appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Contains(t, appErr.Error(), "fieldSelector")
}

func TestListNodesForbiddenIsNotRetried(t *testing.T) {
	cs, a := newCluster()
	failOn(cs, "list", "nodes", forbidden("nodes"))
	_, err := listNodes(t, a, ListNodesInput{Selector: "kata=true", Limit: 1})
	appErr := requireAppError(t, err, api.ErrForbidden, true)
	require.Contains(t, appErr.Error(), "list nodes")
	require.Equal(t, 1, countActions(cs, "list", "nodes"))
}

func TestListNodesExplicitGetErrors(t *testing.T) {
	cs, a := newCluster(testNode("a", nil))
	failOn(cs, "get", "nodes", apierrors.NewTooManyRequests("slow down", 1))
	_, err := listNodes(t, a, ListNodesInput{Names: []string{"a", "b"}, Limit: 10})
	requireAppError(t, err, "", false)
}

func TestListNodesReportsRequestedLabelValues(t *testing.T) {
	labelled := func(name string, labels map[string]string) *corev1.Node {
		n := testNode(name, nil)
		n.Labels = labels
		return n
	}
	const zone = "topology.kubernetes.io/zone"
	_, a := newCluster(
		labelled("a", map[string]string{zone: "z1", "pool": "x", "prio": "2"}),
		labelled("b", map[string]string{zone: "z2", "pool": "x"}),
		labelled("c", map[string]string{"pool": "x"}), // no zone: its own domain ""
	)
	for _, in := range []ListNodesInput{
		{Rollout: "kata", TemplateHash: testHash, Selector: "pool=x", Limit: 10, Labels: []string{zone, "prio"}},
		{Rollout: "kata", TemplateHash: testHash, Names: []string{"a", "b", "c"}, Limit: 10, Labels: []string{zone, "prio"}},
	} {
		res, err := listNodes(t, a, in)
		require.NoError(t, err)
		require.Equal(t, []string{"a", "b", "c"}, res.Nodes)
		require.Equal(t, map[string]map[string]string{
			"a": {zone: "z1", "prio": "2"},
			"b": {zone: "z2"},
		}, res.Labels, "only the asked keys, only nodes carrying one")
	}
	res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "pool=x", Limit: 10})
	require.NoError(t, err)
	require.Nil(t, res.Labels, "no keys asked: no labels in the result (and the history)")
}

// Named nodes listed together with the rollout's selectors: the ones the selectors do not
// select come back as Unselected (a canary named in a rollout that selects by label must be
// one of its nodes).
func TestListNodesNamesWithinSelectors(t *testing.T) {
	gpu := testNode("gpu-1", nil)
	gpu.Labels = map[string]string{"pool": "gpu"}
	cordoned := testNode("gpu-2", nil)
	cordoned.Labels = map[string]string{"pool": "gpu"}
	cordoned.Spec.Unschedulable = true
	web := testNode("web-1", nil)
	web.Labels = map[string]string{"pool": "web"}
	a := newActivities(fake.NewClientset(gpu, cordoned, web))
	res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Names: []string{"gpu-1", "gpu-2", "web-1", "gone"},
		Selector: "pool=gpu", FieldSelector: "spec.unschedulable=false", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{"gpu-1"}, res.Nodes)
	require.Equal(t, []string{"gpu-2", "web-1"}, res.Unselected)
	require.Equal(t, []string{"gone"}, res.Missing)
}

// TestListNodesReadsMarkersAcrossTheHashLength: a node done for the template before the hash
// was the whole SHA-256 (its marker holds 10 characters) is done for a rollout of the same
// template after, and the other way round; other templates' markers are not.
func TestListNodesReadsMarkersAcrossTheHashLength(t *testing.T) {
	full := jobspec.TemplateHash(testTemplate)
	other := jobspec.TemplateHash(testTemplate + "#")
	_, a := newCluster(
		testNode("legacy", doneMarker(full[:10])),
		testNode("full", doneMarker(full)),
		testNode("other-legacy", doneMarker(other[:10])),
		testNode("prefix", doneMarker(full[:20])),
	)
	for _, hash := range []string{full, full[:10]} {
		res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: hash, Names: []string{"legacy", "full", "other-legacy", "prefix"}, Limit: 10})
		require.NoError(t, err)
		require.Equal(t, []string{"full", "legacy"}, res.Done, "hash %s", hash)
		require.Equal(t, []string{"other-legacy", "prefix"}, res.Nodes, "hash %s", hash)
	}
}
