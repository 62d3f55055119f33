package workflows

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Every loop that can wait long watches the history's size (row 3 of the seams issue): a
// week of waiting must continue as new, not grow one run's history past the server's limits.

// holdNode is another rollout's node workflow: it holds the node for d, then tells the rollouts
// that asked when it frees.
func holdNode(ctx workflow.Context, d time.Duration) error {
	waiters := workflow.GetSignalChannel(ctx, SignalNotifyWhenFree)
	_ = workflow.Sleep(ctx, d)
	tellWaiters(ctx, waiters, "")
	return nil
}

// heldThenRollout starts a holder for each of held, then runs the rollout in this workflow.
func heldThenRollout(ctx workflow.Context, held []string, hold time.Duration, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	for _, n := range held {
		workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.NodeWorkflowID(n)}), "hold", hold)
	}
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return api.RolloutResult{}, err
	}
	return Rollout(ctx, req, carried)
}

// longWaitEnv runs heldThenRollout as "held-then-rollout" with its history metered. Nodes
// are in the domain of their name's first letter; a node's Job takes took(node).
func longWaitEnv(t *testing.T, took func(node string) time.Duration) (*testsuite.TestWorkflowEnvironment, *historyMeter) {
	t.Helper()
	env, a := newTestEnv(nil)
	meter := newHistoryMeter(env, "held-then-rollout")
	intercept(env, meter)
	env.RegisterWorkflowWithOptions(holdNode, workflow.RegisterOptions{Name: "hold"})
	env.RegisterWorkflowWithOptions(heldThenRollout, workflow.RegisterOptions{Name: "held-then-rollout"})
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil).Maybe()
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		res := activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names), Labels: map[string]map[string]string{}}
		for _, n := range in.Names {
			res.Labels[n] = map[string]string{}
			for _, k := range in.Labels {
				res.Labels[n][k] = "zone-" + n[:1]
			}
		}
		return res, nil
	}).Maybe()
	env.OnWorkflow(NodeRolloutV3, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		if err := workflow.Sleep(ctx, took(in.Node)); err != nil {
			return api.NodeResult{}, err
		}
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	}).Maybe()
	env.SetTestTimeout(2 * time.Minute)
	return env, meter
}

// The server warns at this many events; the design keeps every run below it.
const serverHistoryWarning = 10240

// Forty nodes held by another rollout for eight days, while the only queued node's domain is
// full with a week-long Job: the held nodes look again and again. The run continues as new
// (handing them over) instead of growing its history for the week.
func TestAWeekOfWaitingForHeldNodesContinuesAsNew(t *testing.T) {
	held := make([]string, 40)
	for i := range held {
		held[i] = fmt.Sprintf("b-%02d", i)
	}
	env, meter := longWaitEnv(t, func(node string) time.Duration {
		if node == "a-1" {
			return 7 * 24 * time.Hour
		}
		return time.Minute
	})
	req := api.RolloutRequest{Name: "week", Nodes: append([]string{"a-1", "a-2"}, held...), JobTemplate: sampleTemplate,
		Parallelism: 50, Topology: &api.Topology{Key: zoneKey, MaxPerDomain: 1}}
	env.ExecuteWorkflow("held-then-rollout", held, 8*24*time.Hour, req, (*api.Progress)(nil))
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "the run continues as new: %v", env.GetWorkflowError())
	require.Less(t, meter.peak, serverHistoryWarning, "one run's history stays below the server's warning")
	var next api.RolloutRequest
	var carried *api.Progress
	require.NoError(t, converterFromEnv().FromPayloads(can.Input, &next, &carried))
	require.Len(t, carried.WaitingNodes, 40, "the held nodes are handed to the next run")
	require.Equal(t, 1, carried.Counts.Succeeded, "a-1 finished")
	require.Equal(t, []api.PacedNode{{Name: "a-2", Domain: "zone-a"}}, carried.Pacing.Queue)
}

// The canary stage waits the same way for canaries another rollout holds: it continues as new
// in the stage, and the next run goes on with the canaries it was handed.
func TestCanaryStageHeldForAWeekContinuesAsNewAndResumes(t *testing.T) {
	held := make([]string, 40)
	for i := range held {
		held[i] = fmt.Sprintf("b-%02d", i)
	}
	took := func(node string) time.Duration {
		if node == "c-1" {
			return 7 * 24 * time.Hour
		}
		return time.Minute
	}
	env, meter := longWaitEnv(t, took)
	canaries := append([]string{"c-1"}, held...)
	req := api.RolloutRequest{Name: "week", Nodes: append([]string{"z-1"}, canaries...), JobTemplate: sampleTemplate,
		Parallelism: 50, Canary: &api.Canary{Nodes: canaries}}
	env.ExecuteWorkflow("held-then-rollout", held, 8*24*time.Hour, req, (*api.Progress)(nil))
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.True(t, errors.As(env.GetWorkflowError(), &can), "the run continues as new: %v", env.GetWorkflowError())
	require.Less(t, meter.peak, serverHistoryWarning)
	var next api.RolloutRequest
	var carried *api.Progress
	require.NoError(t, converterFromEnv().FromPayloads(can.Input, &next, &carried))
	require.Len(t, carried.WaitingNodes, 40)
	require.Equal(t, canaryStageRunning, carried.Pacing.CanaryStage)
	require.Equal(t, 1, carried.Counts.Succeeded, "c-1 finished")

	// The next run: the holders are done two hours later; the canaries run, then z-1.
	env2, _ := longWaitEnv(t, took)
	env2.SetContinuedExecutionRunID("run-1")
	var listed []activities.ListNodesInput
	env2.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name == "ListNodes" {
			var in activities.ListNodesInput
			require.NoError(t, args.Get(&in))
			listed = append(listed, in)
		}
	})
	env2.ExecuteWorkflow("held-then-rollout", held, 2*time.Hour, next, carried)
	require.True(t, env2.IsWorkflowCompleted())
	require.NoError(t, env2.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env2.GetWorkflowResult(&res))
	require.Equal(t, 42, res.Counts.Succeeded, "every canary once, then z-1")
	require.Len(t, listed, 1, "the canaries are not listed again, only the rest of the rollout")
}
