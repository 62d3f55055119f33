package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Words that share a workflow task with the timer the run wakes from. On a server, what comes
// while the worker is away (a deploy, an outage, a partition) reaches the run in one task with
// whatever else came meanwhile. The run's root coroutine runs first in every task, before the
// coroutines that apply signals, children's ends and slot grants; each test below delivers its
// word in its own task and in the timer's (SignalWorkflowSkippingWorkflowTask), and the second
// case was red before versionAdmission 2 (the root picked a node on the state before the word).

// sameTaskCases runs test once with the word in a task of its own, once with the next task.
func sameTaskCases(t *testing.T, test func(t *testing.T, send func(env *testsuite.TestWorkflowEnvironment, signal string, arg any))) {
	for _, sameTask := range []bool{false, true} {
		name := "in a task of its own"
		if sameTask {
			name = "in the task of the timer"
		}
		t.Run(name, func(t *testing.T) {
			test(t, func(env *testsuite.TestWorkflowEnvironment, signal string, arg any) {
				if sameTask {
					env.SignalWorkflowSkippingWorkflowTask(signal, arg)
				} else {
					env.SignalWorkflow(signal, arg)
				}
			})
		})
	}
}

// nodeStarts mocks the node workflow (every node runs for d and succeeds) and records when
// each node's child began.
func nodeStarts(env *testsuite.TestWorkflowEnvironment, d time.Duration) func() map[string]time.Time {
	var mu sync.Mutex
	starts := map[string]time.Time{}
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		node := childNode(ctx, in)
		mu.Lock()
		starts[node] = workflow.Now(ctx)
		mu.Unlock()
		if err := workflow.Sleep(ctx, d); err != nil {
			return api.NodeResult{}, err
		}
		return api.NodeResult{Node: node, Outcome: api.OutcomeSucceeded}, nil
	}).Maybe()
	return func() map[string]time.Time {
		mu.Lock()
		defer mu.Unlock()
		return starts
	}
}

// A pause that comes during delayBetweenNodes and reaches the run with the delay's timer holds
// the next node.
func TestAPauseInTheTaskOfTheDelayTimerHoldsTheNextNode(t *testing.T) {
	sameTaskCases(t, func(t *testing.T, send func(*testsuite.TestWorkflowEnvironment, string, any)) {
		env, a := newTestEnv(nil)
		jobsOutlastTheWatch(env)
		listsNamedNodes(env, a)
		starts := nodeStarts(env, time.Hour)
		env.RegisterDelayedCallback(func() { send(env, api.SignalPause, nil) }, 30*time.Second)
		env.RegisterDelayedCallback(env.CancelWorkflow, 3*time.Hour)
		req := request("a", "b", "c")
		req.Parallelism = 3
		req.DelayBetweenNodes = "1m"
		env.ExecuteWorkflow(api.RolloutWorkflow, req)
		require.Contains(t, starts(), "a")
		require.NotContains(t, starts(), "b", "b started after the pause, which nothing resumed")
	})
}

// A pause that comes before the maintenance window opens and reaches the run with the opening's
// timer holds every node.
func TestAPauseInTheTaskOfTheWindowOpeningHoldsTheNodes(t *testing.T) {
	sameTaskCases(t, func(t *testing.T, send func(*testsuite.TestWorkflowEnvironment, string, any)) {
		env, a := newTestEnv(nil)
		jobsOutlastTheWatch(env)
		listsNamedNodes(env, a)
		env.SetStartTime(time.Date(2026, 3, 2, 9, 50, 0, 0, time.UTC))
		starts := nodeStarts(env, 10*time.Minute)
		env.RegisterDelayedCallback(func() { send(env, api.SignalPause, nil) }, 5*time.Minute)
		env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Hour)
		req := request("a", "b")
		req.Parallelism = 2
		req.MaintenanceWindow = &api.MaintenanceWindow{Start: "10:00", Duration: "30m", TimeZone: "UTC"}
		env.ExecuteWorkflow(api.RolloutWorkflow, req)
		require.Empty(t, starts(), "nodes started at the window's opening after the pause, which nothing resumed")
	})
}

// A node handed over in flight that fails (its word comes by signal) and whose word reaches the
// run with the delay's timer spends maxFailures 0 before the next node starts.
func TestAHandedInFailureInTheTaskOfTheDelayTimerStopsTheRollout(t *testing.T) {
	sameTaskCases(t, func(t *testing.T, send func(*testsuite.TestWorkflowEnvironment, string, any)) {
		env, a := newTestEnv(nil)
		jobsOutlastTheWatch(env)
		env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil).Maybe()
		env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(
			func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
				var after []string
				for _, n := range in.Names {
					if n > in.After {
						after = append(after, n)
					}
				}
				return activities.ListNodesResult{Nodes: after, Total: len(in.Names)}, nil
			}).Maybe()
		starts := nodeStarts(env, time.Hour)
		env.SetContinuedExecutionRunID("run-1")
		failed := api.NodeResult{Node: "x", Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
		env.RegisterDelayedCallback(func() {
			send(env, api.SignalNodeFree, api.NodeFreed{Node: "x", RunID: "x-run", Result: &failed})
		}, 30*time.Second)
		req := api.RolloutRequest{Name: "demo", Namespace: "jobs", Nodes: []string{"x", "y", "z"}, JobTemplate: sampleTemplate,
			Parallelism: 3, DelayBetweenNodes: "1m", MaxFailures: "0"}
		carried := &api.Progress{TemplateHash: "h", Cursor: "x", Selected: 3, Parallelism: 3, Window: 3, ContinuedAsNew: 1,
			InFlightNodes: []api.InFlightNode{{Name: "x", RunID: "x-run"}}}
		env.ExecuteWorkflow(api.RolloutWorkflow, req, carried)
		require.Contains(t, starts(), "y")
		require.NotContains(t, starts(), "z", "z started after x's failure had spent maxFailures 0")
		requireAppError(t, env.GetWorkflowError(), api.ErrFailureBudgetExceeded)
	})
}

// A cluster-wide budget slot granted in the abort's task is given back: acquire sees the grant
// before the abort, and the node that now holds the slot never starts.
func TestASlotGrantedInTheTaskOfTheAbortIsGivenBack(t *testing.T) {
	cluster := api.Cluster{Name: "c1", Budget: 1}
	var mu sync.Mutex
	sent := map[string]int{}
	countSlotSignals := outbound(func(next interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor {
		return &signalCounter{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: next}, seen: func(name string) {
			mu.Lock()
			defer mu.Unlock()
			sent[name]++
		}}
	}, api.RolloutWorkflow)
	env, a := newTestEnv(nil, cluster)
	intercept(env, countSlotSignals)
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	// No coordinator runs here: its signals are taken as delivered, and counted above.
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(nil).Maybe()
	starts := nodeStarts(env, time.Minute)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflowSkippingWorkflowTask(SignalSlotGranted, SlotGrant{Node: cluster.NodeWorkflowID("a")})
		env.CancelWorkflow()
	}, time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, request("a"))
	require.True(t, env.IsWorkflowCompleted())
	require.Empty(t, starts())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, sent[SignalSlotAcquire])
	require.Equal(t, 1, sent[SignalSlotRelease], "the slot granted in the abort's task is given back")
}

// signalCounter shows the name of each signal a workflow sends to another.
type signalCounter struct {
	interceptor.WorkflowOutboundInterceptorBase
	seen func(name string)
}

func (s *signalCounter) SignalExternalWorkflow(ctx workflow.Context, workflowID, runID, signalName string, arg any) workflow.Future {
	s.seen(signalName)
	return s.Next.SignalExternalWorkflow(ctx, workflowID, runID, signalName, arg)
}

// Pauses and resumes that reach the run in one task (the worker was away while operators
// steered, or two operators steered at once). The first reaches the loop alone, in order; the
// rest wait in one channel per signal name, and which was sent last is lost when both wait:
// then the run stays paused. Before versionPauseWinsTogether it took the waiting pause and then
// the waiting resume, and ran on after pause, resume, pause.
func TestPausesAndResumesThatComeTogether(t *testing.T) {
	pause, resume := api.SignalPause, api.SignalResume
	for _, c := range []struct {
		name   string
		words  []string
		paused bool
	}{
		{"resume, pause", []string{resume, pause}, true},
		{"pause, resume", []string{pause, resume}, false},
		{"pause, resume, pause", []string{pause, resume, pause}, true},
		{"resume, resume, pause", []string{resume, resume, pause}, true},
		// The order of the last two is lost: paused, though the operator's last word was resume.
		{"resume, pause, resume", []string{resume, pause, resume}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			starts, st := wordsTogether(t, c.words, nil)
			require.Contains(t, starts, "a")
			require.Equal(t, c.paused, st.Paused, "the status")
			if c.paused {
				require.NotContains(t, starts, "b", "b started while the run was paused")
			} else {
				require.Contains(t, starts, "b")
			}
		})
	}
}

// On DefaultVersion the run keeps to what its history recorded: the waiting pause, then the
// waiting resume.
func TestPausesAndResumesThatComeTogetherOnTheOldVersion(t *testing.T) {
	starts, st := wordsTogether(t, []string{api.SignalPause, api.SignalResume, api.SignalPause}, func(env *testsuite.TestWorkflowEnvironment) {
		env.OnGetVersion(versionPauseWinsTogether, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	})
	require.False(t, st.Paused)
	require.Contains(t, starts, "b")
}

// wordsTogether sends words in one task 30 minutes into a rollout of a, b and c, one at a time
// and an hour each, and returns when each node started and the status at 2h.
func wordsTogether(t *testing.T, words []string, setUp func(*testsuite.TestWorkflowEnvironment)) (map[string]time.Time, api.RolloutStatus) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	if setUp != nil {
		setUp(env)
	}
	starts := nodeStarts(env, time.Hour)
	env.RegisterDelayedCallback(func() {
		for _, w := range words[:len(words)-1] {
			env.SignalWorkflowSkippingWorkflowTask(w, nil)
		}
		env.SignalWorkflow(words[len(words)-1], nil)
	}, 30*time.Minute)
	var st api.RolloutStatus
	env.RegisterDelayedCallback(func() { queryStatus(t, env, &st) }, 2*time.Hour)
	env.RegisterDelayedCallback(env.CancelWorkflow, 3*time.Hour)
	req := request("a", "b", "c")
	req.Parallelism = 1
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	return starts(), st
}
