//go:build e2e

package e2e

import (
	"context"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/workflows"
)

// clusterWorker starts a worker for a cluster of its own name, with the cluster-wide budget
// given (0: none), and returns the cluster and its task queue.
func clusterWorker(t *testing.T, prefix string, budget int) (workflows.Cluster, string) {
	t.Helper()
	c := workflows.Cluster{Name: prefix + "-" + rand.String(4), Budget: budget}
	w, err := StartWorker(c.Name, "--cluster", c.Name, "--cluster-budget", strconv.Itoa(budget))
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	return c, workflows.ClusterTaskQueue(workflows.TaskQueue, c.Name)
}

// Two rollouts of parallelism 4 overlap on one cluster whose budget is 3: the Jobs' own
// start and completion times never show more than 3 nodes at work.
func TestClusterBudgetHoldsAcrossOverlappingRollouts(t *testing.T) {
	cluster, queue := clusterWorker(t, "budget", 3)
	f := NewFleet(t, 8)
	first := f.Request("first", 3*time.Second)
	first.NodeSelector, first.Nodes, first.Parallelism = "", f.Nodes[:4], 4
	second := f.Request("second", 3*time.Second)
	second.NodeSelector, second.Nodes, second.Parallelism = "", f.Nodes[4:], 4
	runs := []client.WorkflowRun{StartOn(t, first, queue), StartOn(t, second, queue)}
	for _, run := range runs {
		require.Equal(t, 4, Succeeded(t, run).Counts.Succeeded)
	}

	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, name := range []string{first.Name, second.Name} {
		for node, jobs := range f.Jobs(t, name) {
			require.Len(t, jobs, 1, node)
			j := jobs[0]
			require.NotNil(t, j.Status.StartTime, j.Name)
			require.NotNil(t, j.Status.CompletionTime, j.Name)
			edges = append(edges, edge{j.Status.StartTime.Time, 1}, edge{j.Status.CompletionTime.Time, -1})
		}
	}
	// Times have whole seconds: a start in the second another Job completed counts as
	// overlapping it, so the peak is never under-stated.
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta > edges[j].delta
	})
	live, peak := 0, 0
	for _, e := range edges {
		live += e.delta
		peak = max(peak, live)
	}
	t.Logf("cluster-wide peak of Jobs at work, from their start and completion times: %d (budget 3, two rollouts of parallelism 4, 8 nodes)", peak)
	require.LessOrEqual(t, peak, 3)
	require.Len(t, edges, 16)

	v, err := stack.Temporal.QueryWorkflow(context.Background(), cluster.BudgetWorkflowID(), "", workflows.QueryBudget)
	require.NoError(t, err)
	var st workflows.BudgetStatus
	require.NoError(t, v.Get(&st))
	t.Logf("coordinator %s: %+v", cluster.BudgetWorkflowID(), st)
	require.Equal(t, 3, st.Budget)
	require.Zero(t, st.InUse, "every slot came back")
}

// A fleet rollout over two clusters, one worker each, in two waves: each cluster's Rollout
// runs on its own task queue, with cluster-qualified IDs.
func TestFleetRolloutOverTwoClusters(t *testing.T) {
	staging, _ := clusterWorker(t, "staging", 0)
	prod, _ := clusterWorker(t, "prod", 0)
	f := NewFleet(t, 3)
	req := workflows.FleetRequest{Name: "fleet-" + f.suffix, Waves: [][]string{{staging.Name}, {prod.Name}}, Rollout: f.Request("fleet", time.Second)}
	// One API server plays both clusters here, so the second must not skip the nodes the first marked done.
	req.Rollout.Rerun = true
	run, err := stack.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: workflows.FleetID(req.Name), TaskQueue: workflows.FleetTaskQueue, WorkflowExecutionTimeout: 10 * time.Minute,
	}, workflows.FleetRolloutWorkflow, req)
	require.NoError(t, err)
	var res workflows.FleetResult
	require.NoError(t, run.Get(context.Background(), &res))
	t.Logf("fleet result: %+v", res)
	require.Equal(t, "done", res.Phase)
	require.Len(t, res.Clusters, 2)
	for _, c := range res.Clusters {
		require.Equal(t, workflows.ClusterSucceeded, c.State, c.Cluster)
		require.Equal(t, 3, c.Counts.Succeeded, c.Cluster)
		require.Equal(t, workflows.Cluster{Name: c.Cluster}.RolloutID(req.Rollout.Name), c.WorkflowID)
	}
	// Both clusters' node workflows exist under their own IDs, so they never collide.
	for _, c := range []workflows.Cluster{staging, prod} {
		d, err := stack.Temporal.DescribeWorkflowExecution(context.Background(), c.NodeWorkflowID(f.Nodes[0]), "")
		require.NoError(t, err)
		require.Equal(t, workflows.ClusterTaskQueue(workflows.TaskQueue, c.Name), d.GetExecutionConfig().GetTaskQueue().GetName())
	}
	// Wave 2 ran its Jobs after wave 1's.
	jobs := f.Jobs(t, req.Rollout.Name)
	require.Len(t, jobs, 3)
	for node, js := range jobs {
		require.Len(t, js, 2, "one Job per cluster on %s", node)
	}
}
