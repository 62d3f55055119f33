package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// A run that continues as new hands over the children it told the rollout at their start at
// once, whatever their Jobs' length (version 2). Before, it waited for children of short Jobs,
// which end within their first task's watch, and handed over children of long Jobs once the
// youngest was past that watch (version 1, still replayed).
func TestShortJobsDrainAndLongJobsAreHandedOver(t *testing.T) {
	for name, tc := range map[string]struct {
		version        workflow.Version
		job            time.Duration
		handedOver     []string
		succeeded      int
		continuedAfter time.Duration // at most
	}{
		"told: 10 s Jobs go on":    {version: 2, job: 10 * time.Second, handedOver: []string{"node-00000", "node-00001"}},
		"told: 10 min Jobs go on":  {version: 2, job: 10 * time.Minute, handedOver: []string{"node-00000", "node-00001"}},
		"asked: 10 s Jobs drain":   {version: 1, job: 10 * time.Second, succeeded: 2, continuedAfter: 15 * time.Second},
		"asked: 10 min Jobs go on": {version: 1, job: 10 * time.Minute, handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
		"asked: a Job past the margin": {version: 1, job: nodeWatchSeconds*time.Second + handOverMargin + time.Second,
			handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			env, a := rolloutEnv(t)         // real node workflows, whose Jobs outlast the watch
			env.SetDetachedChildWait(false) // the run's end is the continue-as-new, as on a server
			env.OnGetVersion(versionHandOverInFlight, workflow.DefaultVersion, 2).Return(tc.version)
			// Children started in one task start in any order in the test environment.
			var told []string
			env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
				var in NodeRolloutInput
				require.NoError(t, args.Get(&in))
				if in.TellWhenFree != "" {
					told = append(told, in.Node)
				}
			})
			env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
				return activities.JobRef{Namespace: "jobs", Name: "demo-" + in.Node, UID: "u-" + in.Node, Node: in.Node}, nil
			})
			env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).After(tc.job).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil)
			env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil)
			req := request(nodeNames(4)...)
			req.Parallelism = 2
			req.ContinueAsNewAfter = 2
			start := env.Now()
			env.ExecuteWorkflow(api.RolloutWorkflow, req)
			carried := handedOver(t, env)
			require.Equal(t, tc.handedOver, inFlightNames(carried))
			require.Equal(t, tc.succeeded, carried.Counts.Succeeded)
			require.Zero(t, carried.Counts.Running, "the next run counts the handed-over nodes itself")
			require.LessOrEqual(t, env.Now().Sub(start), tc.continuedAfter)
			if tc.version == 2 {
				require.ElementsMatch(t, tc.handedOver, told, "every child handed over was told the rollout at its start")
			} else {
				require.Empty(t, told, "a run of version 1 asks its children")
			}
		})
	}
}

// A child told the rollout at its start may say it ended while its run still runs, a moment
// before its end reaches the run. The run then waits for that end and settles the node itself:
// handed over, the node would wait in the next run for a word already spent.
func TestAWordBeforeItsChildsEndKeepsTheNodeInItsRun(t *testing.T) {
	env, _ := rolloutEnv(t)
	env.SetDetachedChildWait(false)
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		result := api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}
		if in.TellWhenFree != "" {
			freed := NodeFreed{Node: in.Node, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID, Result: &result}
			if err := workflow.SignalExternalWorkflow(ctx, in.TellWhenFree, "", SignalNodeFree, freed).Get(ctx, nil); err != nil {
				return api.NodeResult{}, err
			}
		}
		return result, workflow.Sleep(ctx, time.Second) // the end comes after the word
	})
	req := request(nodeNames(2)...)
	req.Parallelism = 1
	req.ContinueAsNewAfter = 1
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	carried := handedOver(t, env)
	require.Empty(t, inFlightNames(carried), "the node whose word came to this run is not handed over")
	require.Equal(t, 1, carried.Counts.Succeeded)
}
