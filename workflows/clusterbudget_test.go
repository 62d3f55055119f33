package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

var budgetCluster = api.Cluster{Name: "c1"}

// budgetRollout is one rollout the harness starts on cluster c1.
type budgetRollout struct {
	ID          string
	StartAfter  time.Duration
	Nodes       []string
	Parallelism int
}

// budgetPlan is what budgetHarness does; Ghost first hands a slot to a rollout that was
// terminated before it could give the slot back.
type budgetPlan struct {
	Budget   int
	Ghost    bool
	Rollouts []budgetRollout
	Limit    time.Duration
}

type budgetOutcome struct {
	ID     string
	Result api.RolloutResult
	Err    string
}

var ghostHolder = api.SlotHolder{Rollout: "terminated-rollout", RolloutRun: "its-run", Node: budgetCluster.NodeWorkflowID("ghost")}

// budgetHarness runs the coordinator and the plan's rollouts side by side, as siblings, and
// fails if they have not all ended within plan.Limit.
func budgetHarness(ctx workflow.Context, plan budgetPlan) ([]budgetOutcome, error) {
	coordCtx, stopCoordinator := workflow.WithCancel(ctx)
	coordinator := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(coordCtx, workflow.ChildWorkflowOptions{
		WorkflowID: budgetCluster.BudgetWorkflowID(), WaitForCancellation: true,
	}), ClusterBudget, BudgetState{Budget: plan.Budget})
	if err := coordinator.GetChildWorkflowExecution().Get(ctx, nil); err != nil {
		return nil, err
	}
	if plan.Ghost {
		err := workflow.SignalExternalWorkflow(ctx, budgetCluster.BudgetWorkflowID(), "", SignalSlotAcquire,
			SlotRequest{Holder: ghostHolder, Budget: plan.Budget}).Get(ctx, nil)
		if err != nil {
			return nil, err
		}
	}
	outcomes := make([]budgetOutcome, len(plan.Rollouts))
	ended := 0
	for i, r := range plan.Rollouts {
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer func() { ended++ }()
			_ = workflow.Sleep(ctx, r.StartAfter)
			req := api.RolloutRequest{Name: r.ID, Namespace: "jobs", Nodes: r.Nodes, JobTemplate: sampleTemplate, Parallelism: r.Parallelism, MaxFailures: "100%"}
			var result api.RolloutResult
			err := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID: r.ID, WaitForCancellation: true,
			}), api.RolloutWorkflow, req).Get(ctx, &result)
			outcomes[i] = budgetOutcome{ID: r.ID, Result: result}
			if err != nil {
				outcomes[i].Err = err.Error()
			}
		})
	}
	ok, err := workflow.AwaitWithTimeout(ctx, plan.Limit, func() bool { return ended == len(plan.Rollouts) })
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("the rollouts did not all end: a budget slot was never returned")
	}
	stopCoordinator()
	_ = coordinator.Get(ctx, nil)
	return outcomes, nil
}

// nodeTracker is the mocked NodeRollout of the budget tests: nodes named fail-* fail after a
// minute, others succeed after their planned time; it keeps the cluster-wide peak.
type nodeTracker struct {
	mu         sync.Mutex
	live, peak int
	started    map[string]time.Time
	took       func(node string) time.Duration
	// looked is every set of holders GoneHolders was asked about; only ghostHolder is gone.
	looked [][]api.SlotHolder
}

func (n *nodeTracker) run(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
	in.Node = childNode(ctx, in)
	n.mu.Lock()
	n.live++
	n.peak = max(n.peak, n.live)
	n.started[in.Node] = workflow.Now(ctx)
	n.mu.Unlock()
	err := workflow.Sleep(ctx, n.took(in.Node))
	n.mu.Lock()
	n.live--
	n.mu.Unlock()
	if err != nil {
		return api.NodeResult{}, err
	}
	if strings.HasPrefix(in.Node, "fail-") {
		// What a child whose activities gave up (its worker's Kubernetes access lost) returns.
		return api.NodeResult{}, temporal.NewApplicationError("activity CreateJob failed: connection refused", "ActivityFailed")
	}
	return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
}

// budgetEnv registers the harness, the cluster's workflows with budget, and the mocks.
func budgetEnv(t *testing.T, budget int, took func(string) time.Duration) (*testsuite.TestWorkflowEnvironment, *nodeTracker) {
	t.Helper()
	ts := &testsuite.WorkflowTestSuite{}
	env, a := newTestEnv(ts, api.Cluster{Name: budgetCluster.Name, Budget: budget})
	var co *activities.Coordination
	env.RegisterWorkflowWithOptions(budgetHarness, workflow.RegisterOptions{Name: "budgetHarness"})
	listsNamedNodes(env, a)
	tracker := &nodeTracker{started: map[string]time.Time{}, took: took}
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(tracker.run)
	env.OnActivity(co.NodeHolders, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
	env.OnActivity(co.GoneHolders, mock.Anything, mock.Anything).Return(func(_ context.Context, held []api.SlotHolder) ([]api.SlotHolder, error) {
		tracker.looked = append(tracker.looked, held)
		var gone []api.SlotHolder
		for _, h := range held {
			if h.Rollout == ghostHolder.Rollout {
				gone = append(gone, h)
			}
		}
		return gone, nil
	}).Maybe()
	env.SetTestTimeout(time.Minute)
	return env, tracker
}

func outcomes(t *testing.T, env *testsuite.TestWorkflowEnvironment) []budgetOutcome {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var out []budgetOutcome
	require.NoError(t, env.GetWorkflowResult(&out))
	return out
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + string(rune('a'+i))
	}
	return out
}

// Two rollouts of parallelism 5 overlap on one cluster with a budget of 3: never more than 3
// nodes of the cluster run, and the 3 are used.
func TestClusterBudgetHoldsAcrossTwoRollouts(t *testing.T) {
	env, nodes := budgetEnv(t, 3, func(node string) time.Duration {
		return time.Duration(1+int(node[len(node)-1]-'a')%4) * time.Minute
	})
	env.ExecuteWorkflow("budgetHarness", budgetPlan{Budget: 3, Limit: 24 * time.Hour, Rollouts: []budgetRollout{
		{ID: "first", Nodes: names("x-", 8), Parallelism: 5},
		{ID: "second", StartAfter: 30 * time.Second, Nodes: names("y-", 8), Parallelism: 5},
	}})
	out := outcomes(t, env)
	for _, o := range out {
		require.Empty(t, o.Err, o.ID)
		require.Equal(t, 8, o.Result.Counts.Succeeded, o.ID)
	}
	require.Equal(t, 3, nodes.peak, "at most the cluster budget in flight, and all of it used")
	require.Len(t, nodes.started, 16)
}

// A node whose child fails (its activities gave up, as after losing the worker's access)
// returns its slot: with a budget of 1 every later node still runs.
func TestClusterSlotReturnedWhenTheChildFails(t *testing.T) {
	env, nodes := budgetEnv(t, 1, func(string) time.Duration { return time.Minute })
	env.ExecuteWorkflow("budgetHarness", budgetPlan{Budget: 1, Limit: 2 * time.Hour, Rollouts: []budgetRollout{
		{ID: "first", Nodes: []string{"fail-a", "fail-b", "ok-c"}, Parallelism: 3},
	}})
	out := outcomes(t, env)
	require.Equal(t, 2, out[0].Result.Counts.Failed)
	require.Equal(t, 1, out[0].Result.Counts.Succeeded)
	require.Equal(t, 1, nodes.peak)
}

// A slot handed to a rollout that was terminated (it never returns it) is reclaimed once
// GoneHolders says its rollout is closed, and the waiting rollout goes on.
func TestClusterSlotOfATerminatedRolloutIsReclaimed(t *testing.T) {
	env, nodes := budgetEnv(t, 1, func(string) time.Duration { return time.Minute })
	// The terminated rollout took its grant (it was still running) and then never returned it.
	env.OnSignalExternalWorkflow(mock.Anything, ghostHolder.Rollout, mock.Anything, SignalSlotGranted, mock.Anything).Return(nil)
	env.ExecuteWorkflow("budgetHarness", budgetPlan{Budget: 1, Ghost: true, Limit: 2 * time.Hour, Rollouts: []budgetRollout{
		{ID: "after", Nodes: []string{"a", "b"}, Parallelism: 2},
	}})
	out := outcomes(t, env)
	require.Equal(t, 2, out[0].Result.Counts.Succeeded)
	require.Equal(t, 1, nodes.peak)
	require.NotEmpty(t, nodes.looked)
	require.Equal(t, []api.SlotHolder{ghostHolder}, nodes.looked[0], "the full budget's holders are looked at")
}

// The coordinator continues as new with its holders and queue, and the next run goes on
// granting from them.
func TestBudgetCoordinatorContinuesAsNewWithItsHolders(t *testing.T) {
	env, _ := newTestEnv(nil)
	var co *activities.Coordination
	env.OnActivity(co.NodeHolders, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
	env.OnActivity(co.GoneHolders, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
	var grants []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, SignalSlotGranted, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error { grants = append(grants, arg.(SlotGrant).Node); return nil })
	holder := func(i int) api.SlotHolder {
		return api.SlotHolder{Rollout: "r", RolloutRun: "run", Node: budgetCluster.NodeWorkflowID(string(rune('a' + i)))}
	}
	for i := range 12 {
		env.RegisterDelayedCallback(func() {
			if i == 11 {
				// The history has grown to the limit when the last request comes in.
				env.SetCurrentHistoryLength(budgetEventsBeforeContinue)
			}
			env.SignalWorkflow(SignalSlotAcquire, SlotRequest{Holder: holder(i), Budget: 3})
			if i%3 == 2 {
				env.SignalWorkflow(SignalSlotRelease, SlotRelease{Holder: holder(i - 2)})
			}
		}, time.Duration(i+1)*time.Second)
	}
	env.ExecuteWorkflow(api.ClusterBudgetWorkflow, BudgetState{Budget: 3})
	require.True(t, env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var carried BudgetState
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &carried))
	require.Equal(t, 3, carried.Budget)
	require.Len(t, carried.Holders, 3, "a full budget is handed over")
	require.NotEmpty(t, carried.Queue, "and so are the requests waiting")
	granted := map[string]bool{}
	for _, g := range grants {
		granted[g] = true
	}
	for _, h := range carried.Holders {
		require.True(t, granted[h.Node], "a carried holder was granted its slot: %s", h.Node)
	}
	for _, q := range carried.Queue {
		require.False(t, granted[q.Holder.Node], "a carried request was not granted yet: %s", q.Holder.Node)
	}

	// The next run: one holder returns its slot, and the oldest waiting request gets it.
	next, _ := newTestEnv(nil)
	next.SetContinuedExecutionRunID("run-1")
	next.OnActivity(co.GoneHolders, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
	var nextGrants []string
	next.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, SignalSlotGranted, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			nextGrants = append(nextGrants, arg.(SlotGrant).Node)
			return nil
		})
	next.RegisterDelayedCallback(func() {
		next.SignalWorkflow(SignalSlotRelease, SlotRelease{Holder: carried.Holders[0]})
	}, time.Minute)
	next.RegisterDelayedCallback(func() {
		v, err := next.QueryWorkflow(api.QueryBudget)
		require.NoError(t, err)
		var st api.BudgetStatus
		require.NoError(t, v.Get(&st))
		require.Equal(t, 3, st.InUse)
		require.Len(t, st.Queued, len(carried.Queue)-1)
		next.CancelWorkflow()
	}, 2*time.Minute)
	next.ExecuteWorkflow(api.ClusterBudgetWorkflow, carried)
	require.Equal(t, []string{carried.Queue[0].Holder.Node}, nextGrants)
}

// Without a cluster name every ID and the task queue are today's, so running histories and
// deployments are untouched; with one they are qualified and cannot collide with them.
func TestClusterNamesQualifyOnlyWhenSet(t *testing.T) {
	none := api.Cluster{}
	require.Equal(t, api.NodeWorkflowID("n1"), none.NodeWorkflowID("n1"))
	require.Equal(t, "noderollout-node-n1", none.NodeWorkflowID("n1"))
	require.Equal(t, api.RolloutID("r"), none.RolloutID("r"))
	require.Equal(t, api.TaskQueue, api.ClusterTaskQueue(api.TaskQueue, ""))
	eu := api.Cluster{Name: "eu"}
	require.Equal(t, "noderollout-node-eu:n1", eu.NodeWorkflowID("n1"))
	require.Equal(t, "rollout-eu:r", eu.RolloutID("r"))
	require.Equal(t, "noderollout-budget-eu", eu.BudgetWorkflowID())
	require.Equal(t, "noderollout-eu", api.ClusterTaskQueue(api.TaskQueue, "eu"))
	// A node named like a qualified one in a cluster-less install gets another ID.
	require.NotEqual(t, none.NodeWorkflowID("eu-n1"), eu.NodeWorkflowID("n1"))
}

// An aborted rollout returns the slots of its cancelled nodes and withdraws the requests of
// the nodes still waiting for one: every node it asked a slot for is given back.
func TestAbortedRolloutReturnsEverySlotItAskedFor(t *testing.T) {
	ts := &testsuite.WorkflowTestSuite{}
	env, a := newTestEnv(ts, api.Cluster{Name: budgetCluster.Name, Budget: 2})
	listsNamedNodes(env, a)
	tracker := &nodeTracker{started: map[string]time.Time{}, took: func(string) time.Duration { return 10 * time.Hour }}
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(tracker.run)
	// The coordinator is played here: it records requests and returns, and grants the first two.
	var mu sync.Mutex
	var asked, returned []string
	coordinator := budgetCluster.BudgetWorkflowID()
	env.OnSignalExternalWorkflow(mock.Anything, coordinator, "", SignalSlotAcquire, mock.Anything).Return(func(_, _, _, _ string, arg any) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, arg.(SlotRequest).Holder.Node)
		return nil
	})
	env.OnSignalExternalWorkflow(mock.Anything, coordinator, "", SignalSlotRelease, mock.Anything).Return(func(_, _, _, _ string, arg any) error {
		mu.Lock()
		defer mu.Unlock()
		returned = append(returned, arg.(SlotRelease).Holder.Node)
		return nil
	})
	env.RegisterDelayedCallback(func() {
		mu.Lock()
		first := append([]string(nil), asked[:2]...)
		mu.Unlock()
		for _, n := range first {
			env.SignalWorkflow(SignalSlotGranted, SlotGrant{Node: n})
		}
	}, time.Minute)
	var waiting api.RolloutStatus
	env.RegisterDelayedCallback(func() {
		queryStatus(t, env, &waiting)
		env.CancelWorkflow()
	}, time.Hour)
	env.SetTestTimeout(time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "aborted", Namespace: "jobs", Nodes: names("n-", 4), JobTemplate: sampleTemplate, Parallelism: 4})
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.Len(t, tracker.started, 2, "only granted nodes started")
	require.Len(t, waiting.WaitingForClusterSlot, 2, "status shows the nodes waiting for a cluster slot")
	require.Len(t, asked, 4)
	require.ElementsMatch(t, asked, returned, "every slot asked for is returned or withdrawn")
}

// A coordinator started afresh (the previous one was terminated, with its state) first takes
// the node workflows still running on the cluster as holders: they hold slots whatever the
// lost state said, so a budget of 2 with 2 nodes running grants nothing more until one ends.
func TestRestartedCoordinatorCountsTheNodesStillRunning(t *testing.T) {
	env, _ := newTestEnv(nil)
	var co *activities.Coordination
	running := []api.SlotHolder{
		{Rollout: "rollout-c1:old", RolloutRun: "run-a", Node: budgetCluster.NodeWorkflowID("x")},
		{Rollout: "rollout-c1:old", RolloutRun: "run-a", Node: budgetCluster.NodeWorkflowID("y")},
	}
	env.OnActivity(co.NodeHolders, mock.Anything, mock.Anything).Return(running, nil).Maybe()
	env.OnActivity(co.GoneHolders, mock.Anything, mock.Anything).Return(nil, nil).Maybe()
	var granted []string
	var mu sync.Mutex
	env.OnSignalExternalWorkflow(mock.Anything, "rollout-c1:new", mock.Anything, SignalSlotGranted, mock.Anything).Return(func(_, _, _, _ string, arg any) error {
		mu.Lock()
		defer mu.Unlock()
		granted = append(granted, arg.(SlotGrant).Node)
		return nil
	}).Maybe()
	newcomer := api.SlotHolder{Rollout: "rollout-c1:new", RolloutRun: "run-b", Node: budgetCluster.NodeWorkflowID("z")}
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalSlotAcquire, SlotRequest{Holder: newcomer, Budget: 2})
	}, time.Second)
	var before []string
	env.RegisterDelayedCallback(func() {
		mu.Lock()
		before = append(before, granted...)
		mu.Unlock()
		env.SignalWorkflow(SignalSlotRelease, SlotRelease{Holder: running[0]})
	}, time.Hour)
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Hour)
	env.ExecuteWorkflow(api.ClusterBudgetWorkflow, BudgetState{Budget: 2})
	require.Empty(t, before, "nothing is granted while the nodes that survived the restart hold the budget")
	require.Equal(t, []string{newcomer.Node}, granted, "granted once one of them ended")
}
