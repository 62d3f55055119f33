package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// Nodes that another rollout holds are handed to the next run rather than waited for by a run
// that continues as new or whose history is full (versionHandOverWaiting).

// holdThenRollout starts rollout "first" over node "shared" as a child, then a minute later
// runs the given rollout in this workflow itself, so that a test sees its continue-as-new.
func holdThenRollout(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("first")}),
		api.RolloutWorkflow, api.RolloutRequest{Name: "first", Nodes: []string{"shared"}, JobTemplate: sampleTemplate})
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return api.RolloutResult{}, err
	}
	return Rollout(ctx, req, carried)
}

// handOverEnv runs holdThenRollout (as "hold-then-rollout") with the first rollout's Job on
// "shared" lasting two days and every other Job a minute; ranOn records which rollouts
// finished a Job on each node, in order, and ended says when holdThenRollout returned (the
// environment runs on after it, to the end of the first rollout).
func handOverEnv(t *testing.T) (env *testsuite.TestWorkflowEnvironment, ranOn func() map[string][]string, ended func() time.Time) {
	t.Helper()
	var endedAt time.Time
	env = rolloutPairEnv(t, func(env *testsuite.TestWorkflowEnvironment) {
		env.RegisterWorkflowWithOptions(func(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
			res, err := holdThenRollout(ctx, req, carried)
			endedAt = workflow.Now(ctx)
			return res, err
		}, workflow.RegisterOptions{Name: "hold-then-rollout"})
	})
	ends := firstHoldsSharedTwoDays(env)
	env.SetTestTimeout(time.Minute)
	return env, func() map[string][]string {
		ran := map[string][]string{}
		for node, es := range ends() {
			for _, e := range es {
				ran[node] = append(ran[node], e.rollout)
			}
		}
		return ran
	}, func() time.Time { return endedAt }
}

// handedOver reads the progress a run carried into its next one.
func handedOver(t *testing.T, env *testsuite.TestWorkflowEnvironment) *api.Progress {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "the run continues as new: %v", env.GetWorkflowError())
	var next api.RolloutRequest
	var carried *api.Progress
	require.NoError(t, converterFromEnv().FromPayloads(can.Input, &next, &carried))
	return carried
}

// A run that continues as new hands a node held by another rollout's two-day Job to the next
// run as soon as its other nodes are done, instead of waiting the two days first.
func TestContinuingRunHandsOverANodeAnotherRolloutHolds(t *testing.T) {
	env, ranOn, ended := handOverEnv(t)
	start := env.Now()
	req := api.RolloutRequest{Name: "second", Nodes: []string{"shared", "y", "z"}, JobTemplate: sampleTemplate, Parallelism: 2, ContinueAsNewAfter: 2}
	env.ExecuteWorkflow("hold-then-rollout", req, (*api.Progress)(nil))
	carried := handedOver(t, env)
	require.Less(t, ended().Sub(start), time.Hour, "the run continued as new once y was done, not after the other rollout's Job")
	require.Equal(t, []api.PacedNode{{Name: "shared"}}, carried.WaitingNodes)
	require.Equal(t, "y", carried.Cursor, "z is left to the next run's listing")
	require.Equal(t, api.Counts{Succeeded: 1}, carried.Counts, "y succeeded; shared is neither running nor counted waiting twice")
	require.Equal(t, []string{"first"}, ranOn()["shared"], "no Job of the second rollout on shared in this run")
}

// A paced run hands a waiting node over with its domain, which the next run counts it in.
func TestPacedRunHandsOverANodeWithItsDomain(t *testing.T) {
	env, _, _ := handOverEnv(t)
	req := api.RolloutRequest{Name: "second", Nodes: []string{"shared", "y", "z"}, JobTemplate: sampleTemplate, Parallelism: 2,
		ContinueAsNewAfter: 2, Topology: &api.Topology{Key: zoneKey, MaxPerDomain: 1}}
	env.ExecuteWorkflow("hold-then-rollout", req, (*api.Progress)(nil))
	carried := handedOver(t, env)
	require.Equal(t, []api.PacedNode{{Name: "shared", Domain: "zone-s"}}, carried.WaitingNodes)
}

// A run whose history nears the limits while it waits only for a held node hands it over too.
func TestRunNearItsHistoryLimitsHandsOverTheNodesItWaitsFor(t *testing.T) {
	env, _, ended := handOverEnv(t)
	start := env.Now()
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(historyEventsBeforeContinue) }, 3*time.Hour)
	req := api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z"}, JobTemplate: sampleTemplate, Parallelism: 2}
	env.ExecuteWorkflow("hold-then-rollout", req, (*api.Progress)(nil))
	carried := handedOver(t, env)
	elapsed := ended().Sub(start)
	require.GreaterOrEqual(t, elapsed, 3*time.Hour, "a run with room left waits for the node")
	require.Less(t, elapsed, 6*time.Hour, "handed over at the first look after the history filled, not after the two days")
	require.Equal(t, []api.PacedNode{{Name: "shared"}}, carried.WaitingNodes)
	require.True(t, carried.ListingDone)
	require.Equal(t, api.Counts{Succeeded: 1}, carried.Counts)
}

// The next run waits for the handed-over node first and runs it once the holder is done.
func TestHandedOverNodeRunsOnceItsHolderIsDone(t *testing.T) {
	env, ranOn, _ := handOverEnv(t)
	env.SetContinuedExecutionRunID("run-1")
	req := api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z"}, JobTemplate: sampleTemplate, Parallelism: 2, ContinueAsNewAfter: 2}
	carried := &api.Progress{TemplateHash: "h", Cursor: "z", ListingDone: true, Selected: 2, Counts: api.Counts{Succeeded: 1},
		Parallelism: 2, Window: 2, ContinuedAsNew: 1, WaitingNodes: []api.PacedNode{{Name: "shared"}}}
	env.ExecuteWorkflow("hold-then-rollout", req, carried)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Equal(t, api.Counts{Succeeded: 2}, res.Counts)
	require.Equal(t, []string{"first", "second"}, ranOn()["shared"], "the handed-over node ran once, after the rollout that held it")
}
