package workflows

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
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
		"told, count reachable":    {version: 3, job: 10 * time.Second, handedOver: []string{"node-00000", "node-00001"}},
		"asked: 10 s Jobs drain":   {version: 1, job: 10 * time.Second, succeeded: 2, continuedAfter: 15 * time.Second},
		"asked: 10 min Jobs go on": {version: 1, job: 10 * time.Minute, handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
		"asked: a Job past the margin": {version: 1, job: nodeWatchSeconds*time.Second + handOverMargin + time.Second,
			handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			env, told := inFlightHandOverEnv(t, tc.version, tc.job, nil)
			carried, took := runFourNodesToTheHandOver(t, env, 2)
			require.Equal(t, tc.handedOver, inFlightNames(carried))
			require.Equal(t, tc.succeeded, carried.Counts.Succeeded)
			require.Zero(t, carried.Counts.Running, "the next run counts the handed-over nodes itself")
			require.LessOrEqual(t, took, tc.continuedAfter)
			if tc.version >= 2 {
				require.ElementsMatch(t, tc.handedOver, *told, "every child handed over was told the rollout at its start")
			} else {
				require.Empty(t, *told, "a run of version 1 asks its children")
			}
		})
	}
}

// runFourNodesToTheHandOver runs a rollout of four nodes, two at a time, until its first
// continue-as-new after continueAfter nodes, and returns what it handed over and when.
func runFourNodesToTheHandOver(t *testing.T, env *testsuite.TestWorkflowEnvironment, continueAfter int) (*api.Progress, time.Duration) {
	t.Helper()
	req := request(nodeNames(4)...)
	req.Parallelism = 2
	req.ContinueAsNewAfter = continueAfter
	start := env.Now()
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	return handedOver(t, env), env.Now().Sub(start)
}

// inFlightHandOverEnv is a rollout of real node workflows (their Jobs outlast the watch and take job to
// succeed, or what jobOf says for a node it names) at the given version of
// versionHandOverInFlight, whose end is its continue-as-new as on a server. told collects the
// children started with the rollout to tell (TellWhenFree), in the order they started, which the
// test environment does not fix within one task.
func inFlightHandOverEnv(t *testing.T, version workflow.Version, job time.Duration, jobOf map[string]time.Duration) (env *testsuite.TestWorkflowEnvironment, told *[]string) {
	t.Helper()
	env, a := rolloutEnv(t)
	env.SetDetachedChildWait(false)
	env.OnGetVersion(versionHandOverInFlight, workflow.DefaultVersion, 3).Return(version)
	told = &[]string{}
	env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var in NodeRolloutInput
		require.NoError(t, args.Get(&in))
		if in.TellWhenFree != "" {
			*told = append(*told, in.Node)
		}
	})
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		return activities.JobRef{Namespace: "jobs", Name: "demo-" + in.Node, UID: "u-" + in.Node, Node: in.Node}, nil
	})
	for _, node := range slices.Sorted(maps.Keys(jobOf)) {
		env.OnActivity(a.WaitJob, mock.Anything, mock.MatchedBy(func(in activities.WaitJobInput) bool { return in.Job.Node == node })).
			After(jobOf[node]).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil)
	}
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).After(job).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil)
	return env, told
}

// A run whose queue runs out before its count ends instead of continuing as new: from version 3
// on, the children of its last window neither outlive it nor are told the rollout, so none of
// them signals a run that waits for its end anyway. A run that can still reach its count tells
// them as before, and hands them over.
func TestTheLastWindowIsToldOnlyWhileTheRunMayContinue(t *testing.T) {
	for name, tc := range map[string]struct {
		version    workflow.Version
		nodes      int
		told       []string
		handedOver []string
	}{
		"version 2: the last window is told":               {version: 2, nodes: 4, told: []string{"node-00002", "node-00003"}},
		"version 3: the last window is not told":           {version: 3, nodes: 4},
		"version 3: a run that continues tells, as before": {version: 3, nodes: 5, told: []string{"node-00002", "node-00003"}, handedOver: []string{"node-00002", "node-00003"}},
	} {
		t.Run(name, func(t *testing.T) {
			env, told := inFlightHandOverEnv(t, tc.version, time.Minute, nil)
			req := request(nodeNames(tc.nodes)...)
			req.Parallelism = 2
			req.ContinueAsNewAfter = 4
			env.ExecuteWorkflow(api.RolloutWorkflow, req)
			require.ElementsMatch(t, tc.told, *told)
			if tc.handedOver != nil {
				require.Equal(t, tc.handedOver, inFlightNames(handedOver(t, env)))
				return
			}
			require.True(t, env.IsWorkflowCompleted())
			require.NoError(t, env.GetWorkflowError())
			var res api.RolloutResult
			require.NoError(t, env.GetWorkflowResult(&res))
			require.Equal(t, tc.nodes, res.Counts.Succeeded)
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
			freed := api.NodeFreed{Node: in.Node, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID, Result: &result}
			if err := workflow.SignalExternalWorkflow(ctx, in.TellWhenFree, "", api.SignalNodeFree, freed).Get(ctx, nil); err != nil {
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

// A worker's bare word for an earlier run of a node, terminated by hand, names that run
// (activities.TerminatedNodeNotifier). A rollout whose own child now holds the node takes it as
// another run's from version 1 on, and hands the node over as it would without the word. Before,
// it took the word as its child's and waited for that child's whole Job before it continued as
// new.
func TestAWordForAnEarlierRunDoesNotHoldTheHandOver(t *testing.T) {
	for name, tc := range map[string]struct {
		version    workflow.Version
		handedOver []string
		succeeded  int
		continued  time.Duration // after the run's start
	}{
		"version 1: handed over at once": {version: 1, handedOver: []string{"node-00001", "node-00002"}, succeeded: 1, continued: time.Minute},
		"default: held for its Job":      {version: workflow.DefaultVersion, handedOver: []string{"node-00002"}, succeeded: 2, continued: 10 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			env, _ := inFlightHandOverEnv(t, 3, 10*time.Minute, map[string]time.Duration{"node-00000": time.Minute})
			env.OnGetVersion(versionWordOfAnotherRun, workflow.DefaultVersion, 1).Return(tc.version)
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(api.SignalNodeFree, api.NodeFreed{Node: "node-00001", RunID: "a-run-terminated-by-hand"})
			}, 30*time.Second)
			carried, took := runFourNodesToTheHandOver(t, env, 3)
			require.Equal(t, tc.handedOver, inFlightNames(carried))
			require.Equal(t, tc.succeeded, carried.Counts.Succeeded)
			require.Equal(t, tc.continued, took.Truncate(time.Minute))
		})
	}
}
