//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// clusterWorker starts a worker for a cluster of its own name, with the cluster-wide budget
// given (0: none) and any more flags (a --kubeconfig of another cluster), and returns the
// cluster and its task queue.
func clusterWorker(t *testing.T, prefix string, budget int, extraArgs ...string) (api.Cluster, string) {
	t.Helper()
	c := api.Cluster{Name: prefix + "-" + rand.String(4), Budget: budget}
	w, err := StartWorker(c.Name, append([]string{"--cluster", c.Name, "--cluster-budget", strconv.Itoa(budget)}, extraArgs...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	return c, api.ClusterTaskQueue(api.TaskQueue, c.Name)
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

	// The Jobs' times have whole seconds, and a node's next Job often starts in the second
	// another completed: counted both ways, the truth lies between. The node workflows' own
	// start and close times (exact) bound their Jobs: a Job is created after its workflow
	// starts, and the workflow closes only once the Job and its Pods are gone.
	var jobsTiesOverlap, jobsTiesApart, nodeRuns []interval
	for _, name := range []string{first.Name, second.Name} {
		for node, jobs := range f.Jobs(t, name) {
			require.Len(t, jobs, 1, node)
			j := jobs[0]
			require.NotNil(t, j.Status.StartTime, j.Name)
			require.NotNil(t, j.Status.CompletionTime, j.Name)
			start, end := j.Status.StartTime.Time, j.Status.CompletionTime.Time
			jobsTiesOverlap = append(jobsTiesOverlap, interval{start, end.Add(time.Second - time.Nanosecond)})
			jobsTiesApart = append(jobsTiesApart, interval{start, end})
			d, err := stack.Temporal.DescribeWorkflow(context.Background(), cluster.NodeWorkflowID(node), "")
			require.NoError(t, err)
			info := d.RawResponse.GetWorkflowExecutionInfo()
			nodeRuns = append(nodeRuns, interval{info.GetStartTime().AsTime(), info.GetCloseTime().AsTime()})
		}
	}
	require.Len(t, nodeRuns, 8)
	t.Logf("cluster-wide peak (budget 3; two rollouts of parallelism 4 over 8 nodes, 3 s Jobs): node workflows %d (exact times); Jobs %d (start/completion, a completion's whole second counted as still running: over-states) and %d (counted as ended: may under-state)",
		peakOf(nodeRuns), peakOf(jobsTiesOverlap), peakOf(jobsTiesApart))
	require.LessOrEqual(t, peakOf(nodeRuns), 3)
	require.Equal(t, 3, peakOf(nodeRuns), "the budget is used, not just respected")
	require.LessOrEqual(t, peakOf(jobsTiesApart), 3)

	v, err := stack.Temporal.QueryWorkflow(context.Background(), cluster.BudgetWorkflowID(), "", api.QueryBudget)
	require.NoError(t, err)
	var st api.BudgetStatus
	require.NoError(t, v.Get(&st))
	t.Logf("coordinator %s: %+v", cluster.BudgetWorkflowID(), st)
	require.Equal(t, 3, st.Budget)
	require.Zero(t, st.InUse, "every slot came back")
}

// A fleet rollout over two clusters, each its own API server (dev/cluster2.sh starts the
// second) with its own worker, in two waves: each cluster's Rollout runs on its own task
// queue, with cluster-qualified IDs, and makes its Jobs in its own cluster only.
func TestFleetRolloutOverTwoClusters(t *testing.T) {
	devScript(t, "cluster2.sh", "up")
	t.Cleanup(func() { devScript(t, "cluster2.sh", "down") })
	kubeconfig2 := filepath.Join(os.Getenv("NODEROLLOUT_STATE"), "cluster2", "kubeconfig")
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig2)
	require.NoError(t, err)
	kube2, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)

	staging, _ := clusterWorker(t, "staging", 0)
	prod, _ := clusterWorker(t, "prod", 0, "--kubeconfig", kubeconfig2)
	f := NewFleet(t, 3)
	f2 := f.Twin(t, kube2)
	req := api.FleetRequest{Name: "fleet-" + f.suffix, Waves: [][]string{{staging.Name}, {prod.Name}}, Rollout: f.Request("fleet", time.Second)}
	run, err := stack.Temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
		ID: api.FleetID(req.Name), TaskQueue: api.FleetTaskQueue, WorkflowExecutionTimeout: 10 * time.Minute,
		Memo: map[string]any{api.MemoRequester: "fleet-owner@e2e"},
	}, api.FleetRolloutWorkflow, req)
	require.NoError(t, err)
	var res api.FleetResult
	require.NoError(t, run.Get(context.Background(), &res))
	t.Logf("fleet result: %+v", res)
	require.Equal(t, "done", res.Phase)
	require.Len(t, res.Clusters, 2)
	for _, c := range res.Clusters {
		require.Equal(t, api.ClusterSucceeded, c.State, c.Cluster)
		require.Equal(t, 3, c.Counts.Succeeded, c.Cluster)
		require.Equal(t, api.Cluster{Name: c.Cluster}.RolloutID(req.Rollout.Name), c.WorkflowID)
	}
	// Both clusters' node workflows exist under their own IDs, so they never collide.
	for _, c := range []api.Cluster{staging, prod} {
		d, err := stack.Temporal.DescribeWorkflow(context.Background(), c.NodeWorkflowID(f.Nodes[0]), "")
		require.NoError(t, err)
		require.Equal(t, api.ClusterTaskQueue(api.TaskQueue, c.Name), d.RawResponse.GetExecutionConfig().GetTaskQueue().GetName())
	}
	// Each cluster ran exactly one Job on each of its own nodes, and the staging wave ended
	// before the prod wave's first Job was made.
	var stagingDone, prodFirst time.Time
	for _, fl := range []*Fleet{f, f2} {
		jobs := fl.Jobs(t, req.Rollout.Name)
		require.Len(t, jobs, 3)
		for node, js := range jobs {
			require.Len(t, js, 1, "one Job on %s", node)
			require.Equal(t, "fleet-owner@e2e", js[0].Annotations[activities.AnnotationRequester], "the fleet's requester on the Job on %s", node)
			created := js[0].CreationTimestamp.Time
			if fl == f && js[0].Status.CompletionTime != nil && js[0].Status.CompletionTime.After(stagingDone) {
				stagingDone = js[0].Status.CompletionTime.Time
			}
			if fl == f2 && (prodFirst.IsZero() || created.Before(prodFirst)) {
				prodFirst = created
			}
		}
	}
	require.False(t, prodFirst.Before(stagingDone), "prod's first Job (%s) was made before staging's last ended (%s)", prodFirst, stagingDone)
}

type interval struct{ start, end time.Time }

// peakOf is the most intervals open at once; an interval ending when another starts does
// not overlap it.
func peakOf(spans []interval) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, s := range spans {
		edges = append(edges, edge{s.start, 1}, edge{s.end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].at.Equal(edges[j].at) {
			return edges[i].at.Before(edges[j].at)
		}
		return edges[i].delta < edges[j].delta
	})
	live, peak := 0, 0
	for _, e := range edges {
		live += e.delta
		peak = max(peak, live)
	}
	return peak
}

// TestClusterBudgetReclaimsTheSlotOfATerminatedRollout: a rollout holding the cluster's only
// budget slot is terminated, so it can never give the slot back. Its node workflow is
// cancelled with it and deletes its Job; the coordinator then finds the holder gone (the
// rollout run closed, no node workflow of it still running) and grants the slot to the
// rollout waiting for it: that rollout finishes, and its Job is made only after the
// terminated rollout's node workflow closed.
func TestClusterBudgetReclaimsTheSlotOfATerminatedRollout(t *testing.T) {
	ctx := context.Background()
	cluster, queue := clusterWorker(t, "reclaim", 1)
	f := NewFleet(t, 2)
	held, heldNode := f.Request("held", 10*time.Minute), f.Nodes[0]
	held.NodeSelector, held.Nodes = "", []string{heldNode}
	waiting, waitingNode := f.Request("waiting", time.Second), f.Nodes[1]
	waiting.NodeSelector, waiting.Nodes = "", []string{waitingNode}

	first := StartOn(t, held, queue)
	waitFor(t, time.Minute, "the first rollout's Job, made under the only slot", func() bool {
		return len(f.Jobs(t, held.Name)[heldNode]) == 1
	})
	require.NoError(t, stack.Temporal.TerminateWorkflow(ctx, first.GetID(), first.GetRunID(), "e2e: terminated while holding a budget slot"))
	second := StartOn(t, waiting, queue)
	res := Succeeded(t, second)
	require.Equal(t, 1, res.Counts.Succeeded)

	d, err := stack.Temporal.DescribeWorkflow(ctx, cluster.NodeWorkflowID(heldNode), "")
	require.NoError(t, err)
	info := d.RawResponse.GetWorkflowExecutionInfo()
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, info.GetStatus(), "the terminated rollout's node workflow was cancelled with it")
	require.Empty(t, f.Jobs(t, held.Name), "and deleted its Job")
	jobs := f.Jobs(t, waiting.Name)[waitingNode]
	require.Len(t, jobs, 1)
	// Creation times have whole seconds: compare at that resolution.
	closed := info.GetCloseTime().AsTime().Truncate(time.Second)
	require.False(t, jobs[0].CreationTimestamp.Time.Before(closed),
		"the waiting rollout's Job (%s) was made before the slot's holder closed (%s)", jobs[0].CreationTimestamp.Time, info.GetCloseTime().AsTime())

	v, err := stack.Temporal.QueryWorkflow(ctx, cluster.BudgetWorkflowID(), "", api.QueryBudget)
	require.NoError(t, err)
	var st api.BudgetStatus
	require.NoError(t, v.Get(&st))
	t.Logf("coordinator %s: %+v", cluster.BudgetWorkflowID(), st)
	require.Equal(t, 1, st.Reclaimed, "the terminated rollout's slot was reclaimed")
	require.Zero(t, st.InUse)
}
