package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// fakeClusters stands in for each cluster's Rollout: it runs for an hour, fails on the
// clusters named in fail, and records when it ran and the signals it was sent.
type fakeClusters struct {
	mu       sync.Mutex
	fail     map[string]bool
	abort    map[string]bool // aborted on their own after the hour (someone aborted that cluster's rollout)
	empty    map[string]bool // select no node
	started  map[string]time.Time
	signals  map[string][]string
	requests map[string]api.RolloutRequest
}

func (f *fakeClusters) rollout(ctx workflow.Context, req api.RolloutRequest) (api.RolloutResult, error) {
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	cluster, _, _ := strings.Cut(strings.TrimPrefix(id, api.RolloutIDPrefix), ":")
	f.mu.Lock()
	f.started[cluster] = workflow.Now(ctx)
	f.requests[cluster] = req
	f.mu.Unlock()
	for _, name := range []string{api.SignalPause, api.SignalResume} {
		ch := workflow.GetSignalChannel(ctx, name)
		workflow.Go(ctx, func(ctx workflow.Context) {
			for ch.Receive(ctx, nil) {
				f.mu.Lock()
				f.signals[cluster] = append(f.signals[cluster], name)
				f.mu.Unlock()
			}
		})
	}
	result := api.RolloutResult{Name: req.Name, Counts: api.Counts{Succeeded: 3}}
	if err := workflow.Sleep(ctx, time.Hour); err != nil {
		return result, temporal.NewCanceledError()
	}
	if f.abort[cluster] {
		return result, temporal.NewCanceledError(result)
	}
	if f.empty[cluster] {
		return api.RolloutResult{Name: req.Name}, nil
	}
	if f.fail[cluster] {
		result.Counts = api.Counts{Succeeded: 1, Failed: 2}
		return result, temporal.NewNonRetryableApplicationError("rollout demo stopped: 2 of 3 selected nodes failed", api.ErrFailureBudgetExceeded, nil, result)
	}
	return result, nil
}

func fleetEnv(t *testing.T, fail ...string) (*testsuite.TestWorkflowEnvironment, *fakeClusters) {
	t.Helper()
	env, _ := newTestEnv(nil)
	f := &fakeClusters{fail: map[string]bool{}, abort: map[string]bool{}, empty: map[string]bool{}, started: map[string]time.Time{}, signals: map[string][]string{}, requests: map[string]api.RolloutRequest{}}
	for _, c := range fail {
		f.fail[c] = true
	}
	// The clusters' rollouts are the fake's, in place of the real Rollout.
	env.RegisterWorkflowWithOptions(f.rollout, workflow.RegisterOptions{Name: api.RolloutWorkflow, DisableAlreadyRegisteredCheck: true})
	env.SetTestTimeout(time.Minute)
	return env, f
}

func fleetRequest(maxFailed int) api.FleetRequest {
	return api.FleetRequest{Name: "demo", MaxFailedClusters: maxFailed, Waves: [][]string{{"staging"}, {"a", "b"}, {"c"}},
		Rollout: api.RolloutRequest{Nodes: []string{"n1"}, JobTemplate: sampleTemplate}}
}

func clusterStates(st api.FleetStatus) map[string]string {
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
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
	require.True(t, env.IsWorkflowCompleted())
	appErr := requireAppError(t, env.GetWorkflowError(), api.ErrFleetFailureBudgetExceeded)
	require.Contains(t, appErr.Message(), "a (rollout demo stopped")
	var st api.FleetStatus
	require.NoError(t, appErr.Details(&st))
	require.Equal(t, map[string]string{"staging": api.ClusterSucceeded, "a": api.ClusterFailed, "b": api.ClusterSucceeded, "c": api.ClusterNotRun}, clusterStates(st))
	require.Equal(t, 2, st.Clusters[1].Counts.Failed, "a failed cluster's counts come from its rollout's error")
	require.Equal(t, "rollout-a:demo", st.Clusters[1].WorkflowID)
	require.Equal(t, "noderollout-a", st.Clusters[1].TaskQueue)
	require.Equal(t, time.Hour, f.started["a"].Sub(f.started["staging"]), "wave 2 starts when wave 1 has ended")
	require.Equal(t, f.started["a"], f.started["b"], "a wave's clusters start together")
	require.NotContains(t, f.started, "c")

	// With one failed cluster allowed, the last wave runs.
	env, f = fleetEnv(t, "a")
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(1))
	require.NoError(t, env.GetWorkflowError())
	var result api.FleetResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, api.ClusterSucceeded, clusterStates(result)["c"])
	require.Equal(t, 1, result.FailedClusters)
	require.Equal(t, 2*time.Hour, f.started["c"].Sub(f.started["staging"]))
}

// Pause holds the next wave and is passed on to the running clusters; resume undoes both;
// abort cancels the running clusters and runs no later wave.
func TestFleetPauseResumeAndAbort(t *testing.T) {
	env, f := fleetEnv(t)
	var paused api.FleetStatus
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalPause, nil) }, 30*time.Minute)
	env.RegisterDelayedCallback(func() {
		queryStatus(t, env, &paused)
	}, 90*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalResume, nil) }, 3*time.Hour)
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 3*time.Hour+10*time.Minute)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())

	require.Equal(t, "paused", paused.Phase)
	require.Equal(t, map[string]string{"staging": api.ClusterSucceeded, "a": api.ClusterPending, "b": api.ClusterPending, "c": api.ClusterPending}, clusterStates(paused),
		"a paused fleet starts no wave")
	require.Equal(t, []string{api.SignalPause}, f.signals["staging"], "the pause reached the running cluster")
	require.Equal(t, 3*time.Hour, f.started["a"].Sub(f.started["staging"]), "wave 2 started at the resume")

	var canceled *temporal.CanceledError
	require.True(t, errors.As(env.GetWorkflowError(), &canceled))
	var st api.FleetStatus
	require.NoError(t, canceled.Details(&st))
	require.Equal(t, map[string]string{"staging": api.ClusterSucceeded, "a": api.ClusterAborted, "b": api.ClusterAborted, "c": api.ClusterNotRun}, clusterStates(st))
}

func TestFleetRequestErrorsNameTheField(t *testing.T) {
	env, _ := fleetEnv(t)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, api.FleetRequest{Name: "demo", Waves: [][]string{{"a"}, {}, {"a", "B"}}, MaxFailedClusters: -1})
	err := env.GetWorkflowError()
	require.Error(t, err)
	for _, want := range []string{"waves[1]: is empty", `waves[2][0]: cluster "a" is listed twice`, `waves[2][1]: "B" is not a cluster name`, "maxFailedClusters: is negative"} {
		require.Contains(t, err.Error(), want)
	}
}

// A fleet started with JSON (the Temporal UI, `temporal workflow start`) is refused when a
// field is misspelt, at any depth: maxFailedCluster would leave the failure budget at 0. Each
// unknown field is named once, by its full path; the fleet asks for its version only then.
func TestFleetUnknownFieldsAreRefusedByPath(t *testing.T) {
	const misspelt = `{"name":"demo","waves":[["a"],["b"]],"maxFailedCluster":1,
		"rollout":{"nodes":["n1"],"jobTemplate":"t","batch":{"inital":1},"parallelism":"five"}}`
	env, f := fleetEnv(t)
	asked := false
	env.OnGetVersion(versionFleetUnknownFields, workflow.DefaultVersion, 1).
		Run(func(mock.Arguments) { asked = true }).Return(workflow.Version(1))
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(misspelt))
	err := env.GetWorkflowError()
	for _, field := range []string{"maxFailedCluster: unknown field", "rollout.batch.inital: unknown field", "rollout.parallelism: must be a JSON integer"} {
		requireInvalid(t, err, field)
	}
	require.Contains(t, err.Error(), `rollout.batch.inital: unknown field; did you mean "rollout.batch.initial"?`, "the error says how to fix it")
	require.Equal(t, 1, strings.Count(err.Error(), "inital"), "a nested field is reported once: %v", err)
	require.True(t, asked)
	require.Empty(t, f.started, "no cluster starts")

	// A fleet field of the wrong type failed the run at once before the check too, so it
	// needs no version; it is named now instead of the decoder's error.
	env, _ = fleetEnv(t)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"]],"maxFailedClusters":"1","rollout":{}}`))
	requireInvalid(t, env.GetWorkflowError(), "maxFailedClusters: must be a JSON integer")

	// Spelt right, the same request runs with its budget, and asks for no version.
	env, f = fleetEnv(t, "a")
	asked = false
	env.OnGetVersion(versionFleetUnknownFields, workflow.DefaultVersion, 1).
		Run(func(mock.Arguments) { asked = true }).Return(workflow.Version(1)).Maybe()
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"],["b"]],"maxFailedClusters":1,
		"rollout":{"nodes":["n1"],"jobTemplate":"t","batch":{"initial":1},"parallelism":5}}`))
	require.NoError(t, env.GetWorkflowError())
	var result api.FleetResult
	require.NoError(t, env.GetWorkflowResult(&result))
	require.Equal(t, 1, result.MaxFailedClusters)
	require.Equal(t, map[string]string{"a": api.ClusterFailed, "b": api.ClusterSucceeded}, clusterStates(result))
	require.Equal(t, 5, f.requests["b"].Parallelism, "the cluster runs the rollout as given")
	require.False(t, asked, "a request without unknown fields records no version marker")
}

// Histories from before the check (DefaultVersion) replay as they ran: the misspelt fields
// were dropped, and the fleet stopped at its first failed cluster. Such a history is from before
// the nested rollout's check as well (its batch without initial is invalid).
func TestFleetUnknownFieldsAreDroppedOnTheOldVersion(t *testing.T) {
	env, f := fleetEnv(t, "a")
	env.OnGetVersion(versionFleetUnknownFields, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.OnGetVersion(versionFleetChecksRollout, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"],["b"]],"maxFailedCluster":1,
		"rollout":{"nodes":["n1"],"jobTemplate":"t","batch":{"inital":1}}}`))
	appErr := requireAppError(t, env.GetWorkflowError(), api.ErrFleetFailureBudgetExceeded)
	var st api.FleetStatus
	require.NoError(t, appErr.Details(&st))
	require.Equal(t, 0, st.MaxFailedClusters)
	require.Equal(t, map[string]string{"a": api.ClusterFailed, "b": api.ClusterNotRun}, clusterStates(st))
	require.Equal(t, &api.Batch{}, f.requests["a"].Batch, "the cluster got the rollout without batch.inital")

	// A fleet field of the wrong type failed those runs at once, and still does.
	env, _ = fleetEnv(t)
	env.OnGetVersion(versionFleetUnknownFields, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion).Maybe()
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"]],"maxFailedClusters":"1","rollout":{}}`))
	requireInvalid(t, env.GetWorkflowError(), "maxFailedClusters: must be a JSON integer")
}

// fleetVersionAsked makes the fleet's nested-rollout version return v and reports whether the
// run asked for it.
func fleetVersionAsked(env *testsuite.TestWorkflowEnvironment, v workflow.Version) *bool {
	asked := false
	env.OnGetVersion(versionFleetChecksRollout, workflow.DefaultVersion, 1).
		Run(func(mock.Arguments) { asked = true }).Return(v).Maybe()
	return &asked
}

// fieldsOf are the fields an InvalidRequest names in its details.
func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want an InvalidRequest, got %v", err)
	var ps []*api.FieldError
	require.NoError(t, appErr.Details(&ps))
	fields := make([]string, len(ps))
	for i, p := range ps {
		fields[i] = p.Field
	}
	return fields
}

// An explicit parallelism 0 in the fleet's rollout (typed in the Temporal UI) is refused at the
// fleet's start, as a Rollout refuses it: passed on to the clusters it became the default of 10.
// A valid fleet asks for no version, so its history gets no marker.
func TestFleetRefusesAnExplicitZeroParallelismInItsRollout(t *testing.T) {
	env, f := fleetEnv(t)
	asked := fleetVersionAsked(env, 1)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"],["b"]],
		"rollout":{"nodes":["n1"],"jobTemplate":"t","parallelism":0}}`))
	err := env.GetWorkflowError()
	requireInvalid(t, err, "rollout.parallelism: must be between 1 and 1000, got 0; omit it for the default of 10")
	require.Equal(t, []string{"rollout.parallelism"}, fieldsOf(t, err), "the rollout's name is the fleet's to fill in")
	require.True(t, *asked)
	require.Empty(t, f.started, "no cluster starts")

	env, f = fleetEnv(t)
	asked = fleetVersionAsked(env, 1)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"],["b"]],
		"rollout":{"nodes":["n1"],"jobTemplate":"t","parallelism":5}}`))
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, 5, f.requests["b"].Parallelism)
	require.False(t, *asked, "a valid fleet records no version marker")
}

// Every static problem of the rollout is refused at the fleet's start, named by its path in the
// fleet's request, in one InvalidRequest with the fleet's own problems.
func TestFleetRefusesAnInvalidRolloutByPath(t *testing.T) {
	env, f := fleetEnv(t)
	asked := fleetVersionAsked(env, 1)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, api.FleetRequest{Name: "demo", Waves: [][]string{{"a"}, {}},
		Rollout: api.RolloutRequest{NodeSelector: "pool in (gpu", Batch: &api.Batch{Initial: 20}}})
	err := env.GetWorkflowError()
	for _, want := range []string{"waves[1]: is empty", `rollout.nodeSelector: "pool in (gpu" does not parse`,
		"rollout.jobTemplate: is required", "rollout.batch.initial: must be between 1 and parallelism (10), got 20"} {
		requireInvalid(t, err, want)
	}
	require.Equal(t, []string{"waves[1]", "rollout.nodeSelector", "rollout.jobTemplate", "rollout.batch.initial"}, fieldsOf(t, err))
	require.True(t, *asked)
	require.Empty(t, f.started, "no cluster starts")

	// A rollout named explicitly is checked as given; one left unnamed takes the fleet's name,
	// whose problem is the fleet's own and named once.
	env, _ = fleetEnv(t)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, api.FleetRequest{Name: "Demo", Waves: [][]string{{"a"}},
		Rollout: api.RolloutRequest{Nodes: []string{"n1"}, JobTemplate: sampleTemplate}})
	require.Equal(t, []string{"name"}, fieldsOf(t, env.GetWorkflowError()))
	env, _ = fleetEnv(t)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, api.FleetRequest{Name: "demo", Waves: [][]string{{"a"}},
		Rollout: api.RolloutRequest{Name: "Demo", Nodes: []string{"n1"}, JobTemplate: sampleTemplate}})
	require.Equal(t, []string{"rollout.name"}, fieldsOf(t, env.GetWorkflowError()))
}

// Histories from before the nested check (DefaultVersion) replay as they ran: wave 1's
// clusters started with the rollout, parallelism 0 dropped on the way.
func TestFleetStartsAnInvalidRolloutOnTheOldVersion(t *testing.T) {
	env, f := fleetEnv(t)
	asked := fleetVersionAsked(env, workflow.DefaultVersion)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, json.RawMessage(`{"name":"demo","waves":[["a"],["b"]],
		"rollout":{"nodes":["n1"],"jobTemplate":"t","parallelism":0}}`))
	require.NoError(t, env.GetWorkflowError())
	require.True(t, *asked)
	require.Contains(t, f.started, "a")
	require.Contains(t, f.started, "b")
	require.Equal(t, 0, f.requests["a"].Parallelism, "the cluster got the rollout without parallelism")

	env, f = fleetEnv(t, "a")
	fleetVersionAsked(env, workflow.DefaultVersion)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, api.FleetRequest{Name: "demo", Waves: [][]string{{"a"}, {"b"}},
		Rollout: api.RolloutRequest{Nodes: []string{"n1"}}})
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(env.GetWorkflowError(), &appErr), "%v", env.GetWorkflowError())
	require.Equal(t, api.ErrFleetFailureBudgetExceeded, appErr.Type(), "the fleet counted the failed cluster")
	require.Contains(t, f.started, "a")
	require.NotContains(t, f.started, "b")
}

// A cluster whose rollout was aborted on its own, or selected no node at all, has not been
// rolled out: it counts against maxFailedClusters, and the next wave does not start.
func TestFleetCountsAnAbortedOrEmptyClusterAsFailed(t *testing.T) {
	for _, how := range []string{"aborted", "empty"} {
		t.Run(how, func(t *testing.T) {
			env, f := fleetEnv(t)
			if how == "aborted" {
				f.abort["a"] = true
			} else {
				f.empty["a"] = true
			}
			env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
			require.True(t, env.IsWorkflowCompleted())
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(env.GetWorkflowError(), &appErr), "%v", env.GetWorkflowError())
			require.Equal(t, api.ErrFleetFailureBudgetExceeded, appErr.Type())
			var st api.FleetStatus
			require.NoError(t, appErr.Details(&st))
			want := map[string]string{"aborted": api.ClusterAborted, "empty": api.ClusterFailed}[how]
			require.Equal(t, want, clusterStates(st)["a"])
			require.Equal(t, 1, st.FailedClusters)
			require.Contains(t, appErr.Message(), "failed: a (")
			require.Equal(t, api.ClusterNotRun, clusterStates(st)["c"])
			require.NotContains(t, f.started, "c")
		})
	}
}

// A converging rollout ends only when aborted or replaced, so a fleet of one would never start
// its second wave: the fleet refuses it at its start, naming the field. A fleet that started
// one before the check (no marker) replays as it ran, its first wave started.
func TestFleetRefusesAConvergingRollout(t *testing.T) {
	converging := api.FleetRequest{Name: "demo", Waves: [][]string{{"a"}, {"b"}},
		Rollout: api.RolloutRequest{NodeSelector: "pool=gpu", JobTemplate: sampleTemplate, Mode: api.ModeConverge}}
	env, f := fleetEnv(t)
	asked := fleetVersionAsked(env, 1)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, converging)
	err := env.GetWorkflowError()
	requireInvalid(t, err, "rollout.mode: is converge, which never ends, so the fleet's next wave would never start")
	require.Equal(t, []string{"rollout.mode"}, fieldsOf(t, err))
	require.True(t, *asked)
	require.Empty(t, f.started, "no cluster starts")

	env, f = fleetEnv(t)
	fleetVersionAsked(env, workflow.DefaultVersion)
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, converging)
	require.NoError(t, env.GetWorkflowError())
	require.Contains(t, f.started, "a", "the old version started wave 1 with the converging rollout")
}

// Pauses and resumes that wait together (they came while the fleet passed a word on, or after
// the first word of a workflow task) lost their order: the fleet stays paused and passes the
// pause on. Before versionFleetPauseWinsTogether it read the pause, then the resume, and started
// wave 2 after pause, resume, pause.
func TestFleetPausesAndResumesThatComeTogether(t *testing.T) {
	for _, v := range []workflow.Version{workflow.DefaultVersion, 1} {
		t.Run(fmt.Sprintf("version %d", v), func(t *testing.T) {
			env, f := fleetEnv(t)
			env.OnGetVersion(versionFleetPauseWinsTogether, workflow.DefaultVersion, 1).Return(v)
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflowSkippingWorkflowTask(api.SignalPause, nil)
				env.SignalWorkflowSkippingWorkflowTask(api.SignalResume, nil)
				env.SignalWorkflow(api.SignalPause, nil)
			}, 30*time.Minute)
			var st api.FleetStatus
			env.RegisterDelayedCallback(func() { queryStatus(t, env, &st) }, 90*time.Minute)
			env.RegisterDelayedCallback(func() { env.SignalWorkflow(api.SignalResume, nil) }, 3*time.Hour)
			env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			if v == workflow.DefaultVersion {
				require.Equal(t, "running", st.Phase)
				require.Equal(t, time.Hour, f.started["a"].Sub(f.started["staging"]))
				return
			}
			require.Equal(t, "paused", st.Phase)
			require.Equal(t, []string{api.SignalPause, api.SignalPause}, f.signals["staging"], "the running cluster was left paused")
			require.Equal(t, 3*time.Hour, f.started["a"].Sub(f.started["staging"]), "wave 2 started at the resume")
		})
	}
}
