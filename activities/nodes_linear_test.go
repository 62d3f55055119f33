package activities

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/noderollout/noderollout/api"
)

// inNameOrder makes n labelled nodes in key order, as the API server pages them.
func inNameOrder(n int) []*corev1.Node {
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = testNode(fmt.Sprintf("node-%06d", i), nil)
		nodes[i].Labels = map[string]string{"kata": "true"}
	}
	return nodes
}

// listAll lists the selection slice by slice as the Rollout does (each slice after the
// last one's Next, from its Continue) and returns every name handed out, in order.
func listAll(t *testing.T, a *Activities, in ListNodesInput) []string {
	t.Helper()
	var got []string
	for _, res := range listSlices(t, a, in) {
		got = append(got, res.Nodes...)
	}
	return got
}

// pagedCluster is a cluster of n selected Nodes served in pages in name order, as the API
// server serves them, and the input that lists them in slices of 1,000.
func pagedCluster(n int) (*Activities, *pagedNodes, ListNodesInput) {
	cs, a := newCluster()
	pages := &pagedNodes{nodes: inNameOrder(n)}
	cs.PrependReactor("list", "nodes", pages.react)
	return a, pages, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true", Limit: 1000}
}

// listSlices lists the selection slice by slice, as a rollout does, and returns every slice.
func listSlices(t *testing.T, a *Activities, in ListNodesInput) []ListNodesResult {
	t.Helper()
	var listed []ListNodesResult
	for {
		res, err := listNodes(t, a, in)
		require.NoError(t, err)
		listed = append(listed, res)
		if !res.More {
			return listed
		}
		in.After, in.Continue = res.Next, res.Continue
	}
}

// Issue 36: a listing of 100,000 nodes in slices of 1,000 reads each page about once. Reading
// from the first page to the cursor for every slice took 10,300 LISTs here.
func TestListNodesIsLinearAt100kNodes(t *testing.T) {
	const n = 100_000
	a, pages, in := pagedCluster(n)
	got := listAll(t, a, in)
	require.Len(t, got, n, "every node handed out once")
	require.IsIncreasing(t, got)
	lists := len(pages.requests)
	t.Logf("%d Node LISTs for %d nodes in slices of 1,000: %.4f per node", lists, n, float64(lists)/n)
	require.LessOrEqual(t, float64(lists)/n, 0.005, "Node LISTs per node")
}

// A run that continued as new in the middle of a slice resumes from the token that slice was
// read from, skipping the names up to its cursor: a page or two, not every page before it.
func TestListNodesResumesMidSliceFromTheSlicesToken(t *testing.T) {
	a, pages, in := pagedCluster(5000)
	listed := listSlices(t, a, in)
	first, second, third := listed[0], listed[1], listed[2]
	require.Empty(t, first.Continue, "the first slice reads every page to count: no token")
	require.Equal(t, "node-001999", second.Next)
	require.NotEmpty(t, second.Continue)
	require.Equal(t, "node-002999", third.Next)
	require.Equal(t, []api.ListingMark{{Continue: "1000", First: "node-001000"}, {Continue: "1500", First: "node-001500"}}, second.Marks,
		"the requests that returned the second slice's names")
	require.Equal(t, []api.ListingMark{{Continue: second.Continue, First: "node-002000"}, {Continue: "2500", First: "node-002500"}}, third.Marks)

	// The third slice's run continued as new with its cursor at node-002499: it resumes from
	// the slice's first page, the page before its cursor's.
	pages.requests = nil
	in.After, in.Continue = "node-002499", third.Marks[0].Continue
	resumed, err := listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{second.Continue, "2500", "3000"}, pages.continues())
	require.Len(t, resumed.Nodes, 1000)
	require.Equal(t, "node-002500", resumed.Nodes[0])
	require.Equal(t, "node-003499", resumed.Next)
	require.Zero(t, resumed.Total, "not counted: the walk did not start at the first page")
}

// The last slice carries its marks too: a run that continues as new in the middle of it
// resumes at its cursor's page. Without them it read the fleet again from the first page.
func TestListNodesLastSliceHasItsMarks(t *testing.T) {
	a, pages, in := pagedCluster(2500)
	listed := listSlices(t, a, in)
	require.Len(t, listed, 3)
	second, last := listed[1], listed[2]
	require.Equal(t, []api.ListingMark{{Continue: second.Continue, First: "node-002000"}}, last.Marks)

	pages.requests = nil
	position := api.ListingPosition{Marks: last.Marks, Next: last.Continue, End: last.Next}
	in.After = "node-002199"
	in.Continue = position.ResumeToken(in.After)
	resumed, err := listNodes(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{second.Continue}, pages.continues(), "the slice's own page, not the first")
	require.Len(t, resumed.Nodes, 300)
}

// A continue token outlives etcd's compaction when a slice of long Jobs takes more than a few
// minutes: the API server answers 410 with a token for the same place on current data, and
// the listing goes on from there; without one it starts again at the first page. Either way
// no node is lost or doubled.
func TestListNodesExpiredTokenOfALaterSlice(t *testing.T) {
	for _, tc := range []struct {
		name          string
		offerContinue bool
		want          []string // the continue tokens of the resumed slice's requests
	}{
		{"410 with a token", true, []string{"2000", inconsistentPrefix + "2000", "2500"}},
		{"410 without", false, []string{"2000", "", "500", "1000", "1500", "2000", "2500"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, a := newCluster()
			pages := &pagedNodes{nodes: inNameOrder(4000), expireAt: "2000", expireTimes: 1,
				expireErr: apierrors.NewResourceExpired("too old"), offerContinue: tc.offerContinue}
			cs.PrependReactor("list", "nodes", pages.react)
			res, err := listNodes(t, a, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "kata=true",
				After: "node-001999", Continue: "2000", Limit: 1000})
			require.NoError(t, err)
			require.Equal(t, tc.want, pages.continues())
			require.Len(t, res.Nodes, 1000)
			require.Equal(t, "node-002000", res.Nodes[0])
			require.Equal(t, "node-002999", res.Next)
			require.Equal(t, "3000", res.Continue, "the next slice resumes from a token again")
		})
	}
}
