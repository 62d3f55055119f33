package workflows

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// fakeClusters stands in for each cluster's Rollout: it runs for an hour, fails on the
// clusters named in fail, and records when it ran and the signals it was sent.
type fakeClusters struct {
	mu      sync.Mutex
	fail    map[string]bool
	started map[string]time.Time
	signals map[string][]string
}

func (f *fakeClusters) rollout(ctx workflow.Context, req RolloutRequest) (RolloutResult, error) {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	cluster, _, _ := strings.Cut(strings.TrimPrefix(id, RolloutIDPrefix), ":")
	f.mu.Lock()
	f.started[cluster] = workflow.Now(ctx)
	f.mu.Unlock()
	for _, name := range []string{SignalPause, SignalResume} {
		ch := workflow.GetSignalChannel(ctx, name)
		workflow.Go(ctx, func(ctx workflow.Context) {
			for ch.Receive(ctx, nil) {
				f.mu.Lock()
				f.signals[cluster] = append(f.signals[cluster], name)
				f.mu.Unlock()
			}
		})
	}
	result := RolloutResult{Name: req.Name, Counts: Counts{Succeeded: 3}}
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return result, temporal.NewCanceledError()
	}
	if f.fail[cluster] {
		result.Counts = Counts{Succeeded: 1, Failed: 2}
		return result, temporal.NewNonRetryableApplicationError("rollout demo stopped: 2 of 3 selected nodes failed", ErrFailureBudgetExceeded, nil, result)
	}
	return result, nil
}

func fleetEnv(t *testing.T, fail ...string) (*testsuite.TestWorkflowEnvironment, *fakeClusters) {
	t.Helper()
	ts := &testsuite.WorkflowTestSuite{}
	env := newTestEnv(ts)
	f := &fakeClusters{fail: map[string]bool{}, started: map[string]time.Time{}, signals: map[string][]string{}}
	for _, c := range fail {
		f.fail[c] = true
	}
	env.RegisterWorkflowWithOptions(f.rollout, workflow.RegisterOptions{Name: RolloutWorkflow})
	env.RegisterWorkflowWithOptions(FleetRollout, workflow.RegisterOptions{Name: FleetRolloutWorkflow})
	env.SetTestTimeout(time.Minute)
	return env, f
}

func fleetRequest(maxFailed int) FleetRequest {
	return FleetRequest{Name: "demo", MaxFailedClusters: maxFailed, Waves: [][]string{{"staging"}, {"a", "b"}, {"c"}},
		Rollout: RolloutRequest{Nodes: []string{"n1"}, JobTemplate: sampleTemplate}}
}

func clusterStates(st FleetStatus) map[string]string {
	out := map[string]string{}
	for _, c := range st.Clusters {
		out[c.Cluster] = c.State
	}
	return out
}

// Waves run one after the other, each wave's clusters at once; a failed cluster over the
// fleet's budget lets its wave finish and starts no further wave.
func TestFleetWavesStopWhenClustersFailOverTheBudget(t *testing.T) {
	env, f := fleetEnv(t, "a")
	env.ExecuteWorkflow(FleetRolloutWorkflow, fleetRequest(0))
	require.True(t, env.IsWorkflowCompleted())
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(env.GetWorkflowError(), &appErr), "%v", env.GetWorkflowError())
	require.Equal(t, ErrFleetFailureBudgetExceeded, appErr.Type())
	require.Contains(t, appErr.Message(), "a (rollout demo stopped")
	var st FleetStatus
	require.NoError(t, appErr.Details(&st))
	require.Equal(t, map[string]string{"staging": ClusterSucceeded, "a": ClusterFailed, "b": ClusterSucceeded, "c": ClusterNotRun}, clusterStates(st))
	require.Equal(t, 2, st.Clusters[1].Counts.Failed, "a failed cluster's counts come from its rollout's error")
	require.Equal(t, "rollout-a:demo", st.Clusters[1].WorkflowID)
	require.Equal(t, "noderollout-a", st.Clusters[1].TaskQueue)
	require.Equal(t, time.Hour, f.started["a"].Sub(f.started["staging"]), "wave 2 starts when wave 1 has ended")
	require.Equal(t, f.started["a"], f.started["b"], "a wave's clusters start together")
	require.NotContains(t, f.started, "c")

	// With one failed cluster allowed, the last wave runs.
	env, f = fleetEnv(t, "a")
	env.ExecuteWorkflow(FleetRolloutWorkflow, fleetRequest(1))
	require.NoError(t, env.GetWorkflowError())
	var result FleetResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, ClusterSucceeded, clusterStates(result)["c"])
	require.Equal(t, 1, result.FailedClusters)
	require.Equal(t, 2*time.Hour, f.started["c"].Sub(f.started["staging"]))
}

// Pause holds the next wave and is passed on to the running clusters; resume undoes both;
// abort cancels the running clusters and runs no later wave.
func TestFleetPauseResumeAndAbort(t *testing.T) {
	env, f := fleetEnv(t)
	var paused FleetStatus
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalPause, nil) }, 30*time.Minute)
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&paused))
	}, 90*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalResume, nil) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 3*time.Hour+10*time.Minute)
	env.ExecuteWorkflow(FleetRolloutWorkflow, fleetRequest(0))
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())

	require.Equal(t, "paused", paused.Phase)
	require.Equal(t, map[string]string{"staging": ClusterSucceeded, "a": ClusterPending, "b": ClusterPending, "c": ClusterPending}, clusterStates(paused),
		"a paused fleet starts no wave")
	require.Equal(t, []string{SignalPause}, f.signals["staging"], "the pause reached the running cluster")
	require.Equal(t, 3*time.Hour, f.started["a"].Sub(f.started["staging"]), "wave 2 started at the resume")

	var canceled *temporal.CanceledError
	require.True(t, errors.As(env.GetWorkflowError(), &canceled))
	var st FleetStatus
	require.NoError(t, canceled.Details(&st))
	require.Equal(t, map[string]string{"staging": ClusterSucceeded, "a": ClusterAborted, "b": ClusterAborted, "c": ClusterNotRun}, clusterStates(st))
}

func TestFleetRequestErrorsNameTheField(t *testing.T) {
	env, _ := fleetEnv(t)
	env.ExecuteWorkflow(FleetRolloutWorkflow, FleetRequest{Name: "demo", Waves: [][]string{{"a"}, {}, {"a", "B"}}, MaxFailedClusters: -1})
	err := env.GetWorkflowError()
	require.Error(t, err)
	for _, want := range []string{"waves[1]: is empty", `waves[2][0]: cluster "a" is listed twice`, `waves[2][1]: "B" is not a cluster name`, "maxFailedClusters: is negative"} {
		require.Contains(t, err.Error(), want)
	}
}
