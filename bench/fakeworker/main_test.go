package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/nodepager"
	"github.com/noderollout/noderollout/internal/testjob"
	"github.com/noderollout/noderollout/workflows"
)

var template = testjob.YAML("", "c")

// The fake cluster carries a rollout of every node to its end, through the real workflows and
// the real listing, with each Job run once.
func TestFakeClusterRunsEveryNodeOnce(t *testing.T) {
	const n = 30
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.SetTestTimeout(20 * time.Second)
	pager := nodepager.New(cloudNames(n), map[string]string{"pool": "fake"})
	cluster := &fakeCluster{list: &activities.Activities{Kube: pager.Clientset()}, jobTime: 100 * time.Millisecond}
	workflows.OnCluster{}.Register(env)
	for name, fn := range cluster.activities() {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "fake", Namespace: "jobs", NodeSelector: "pool=fake",
		JobTemplate: template, Parallelism: 5, KeepJobs: "never"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, n, res.Selected)
	require.Equal(t, n, res.Counts.Succeeded)
	require.Equal(t, n, cluster.jobs(), "one Job per node")
	require.LessOrEqual(t, cluster.most(), 5, "never more Jobs at once than the parallelism")
}

func TestCloudNamesAreUniqueAndSorted(t *testing.T) {
	names := cloudNames(70_000)
	require.IsIncreasing(t, names)
	require.Equal(t, "ip-10-0-0-0.eu-west-1.compute.internal", names[0])
}

// A RunJob that runs again for the same node run (its workflow task failed, so its local
// activity's result was lost) adopts that run's Job and waits only for its end, as the real
// one does; another run's Job runs its full time.
func TestRunJobRunAgainWaitsForTheSameJob(t *testing.T) {
	cluster := &fakeCluster{jobTime: time.Minute}
	start := time.Now()
	first := cluster.jobEnd("run-1", start)
	again := cluster.jobEnd("run-1", start.Add(50*time.Second))
	other := cluster.jobEnd("run-2", start.Add(50*time.Second))
	require.Equal(t, start.Add(time.Minute), first)
	require.Equal(t, first, again, "the second call waits for the same Job")
	require.Equal(t, start.Add(110*time.Second), other)
	require.Equal(t, 3, cluster.jobs())
	require.Equal(t, 1, cluster.adoptedJobs())
}
