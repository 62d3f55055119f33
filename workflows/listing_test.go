package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/nodepager"
)

// newNodePager serves n Nodes (node-00000…) labelled pool=a.
func newNodePager(n int) *nodepager.Pager {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
	}
	return nodepager.New(names, map[string]string{"pool": "a"})
}

// realListing has the environment run the real ListNodes activity on the pager's Nodes.
func realListing(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, p *nodepager.Pager) {
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return((&activities.Activities{Kube: p.Clientset()}).ListNodes)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Template: sampleTemplate, Hash: "h"}, nil).Maybe()
}

// Issue 36: the Rollout lists 100,000 nodes with at most 0.005 Node LISTs per node (each
// slice resumes from the last one's continue token; re-reading from the first page to the
// cursor for every slice took about S² + 3S LISTs for S slices). A dry run lists them all.
func TestRolloutListsAHundredThousandNodesLinearly(t *testing.T) {
	const n = 100_000
	env, a := newTestEnv(nil)
	pager := newNodePager(n)
	realListing(env, a, pager)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, DryRun: true})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, n, res.Counts.Pending, "every node listed once")
	require.Equal(t, n, res.Selected)
	lists, firstPages := pager.Lists()
	t.Logf("%d Node LISTs for %d nodes: %.4f per node, %d from the first page", lists, n, float64(lists)/n, firstPages)
	require.LessOrEqual(t, float64(lists)/n, 0.005, "Node LISTs per node")
	require.Equal(t, 1, firstPages, "only the counting first slice starts at the first page")
}

// The listing's position is carried across continue-as-new: a run that continued in the
// middle of a slice resumes from the token that slice was read from, not from the first page.
func TestRolloutListingResumesAcrossContinueAsNew(t *testing.T) {
	const n = 3000
	ts := &testsuite.WorkflowTestSuite{}
	pager := newNodePager(n)
	started := map[string]int{}
	req := api.RolloutRequest{Name: "demo", Namespace: "jobs", NodeSelector: "pool=a", JobTemplate: sampleTemplate,
		Parallelism: 50, ContinueAsNewAfter: 700} // 700: each run stops in the middle of a slice of 1,000
	var carried *api.Progress
	var final api.RolloutResult
	for runs := 1; ; runs++ {
		require.LessOrEqual(t, runs, 10, "the rollout should end within a few runs")
		env, a := newTestEnv(ts)
		jobsOutlastTheWatch(env)
		realListing(env, a, pager)
		childrenDrainAtContinueAsNew(env)
		env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			started[in.Node]++
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, workflow.Sleep(ctx, time.Second)
		})
		if carried != nil {
			env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", runs-1))
		}
		env.ExecuteWorkflow(Rollout, req, carried)
		require.True(t, env.IsWorkflowCompleted())
		if next, handed, ok := continuation(t, env.GetWorkflowError()); ok {
			carried = handed
			require.NotNil(t, carried.Listing, "the listing's position is carried")
			req = next
			continue
		}
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, env.GetWorkflowResult(&final))
		break
	}
	require.Equal(t, n, final.Counts.Succeeded)
	require.Greater(t, final.ContinuedAsNew, 2)
	require.Len(t, started, n)
	for node, count := range started {
		require.Equal(t, 1, count, "node %s", node)
	}
	runs := final.ContinuedAsNew + 1
	lists, firstPages := pager.Lists()
	t.Logf("%d Node LISTs for %d nodes over %d runs, %d from the first page", lists, n, runs, firstPages)
	require.Equal(t, 1, firstPages, "no run after the first slice starts at the first page")
	// The first slice's count (a LIST per 500), two pages for each later slice, and one page
	// read again by each run that started in the middle of a slice.
	require.LessOrEqual(t, lists, n/500+2*(n/1000)+runs, "Node LISTs")
}
