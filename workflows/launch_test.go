package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// Every node start passes the one admission point (startRefusal) at the instant it starts,
// whatever it waited for before: these tests make a node wait for a slot of the cluster-wide
// budget while another rule turns against it, then grant the slot.

var slotCluster = api.Cluster{Name: "c1", Budget: 5}

// slotEnv runs a Rollout on slotCluster whose budget coordinator is the test: slot requests
// are recorded, and grants arrive when the test sends them. Nodes named fail-* fail.
type slotEnv struct {
	env     *testsuite.TestWorkflowEnvironment
	mu      sync.Mutex
	started map[string]time.Time
	took    time.Duration
	// released counts the slot releases the rollout sent, by node workflow ID.
	released map[string]int
}

func newSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env, a := newTestEnv(&ts, slotCluster)
	s := &slotEnv{env: env, started: map[string]time.Time{}, took: 10 * time.Minute, released: map[string]int{}}
	listsNamedNodes(env, a)
	s.env.OnSignalExternalWorkflow(mock.Anything, slotCluster.BudgetWorkflowID(), "", mock.Anything, mock.Anything).Return(
		func(_, _, _, _ string, arg any) error {
			if r, ok := arg.(SlotRelease); ok {
				s.mu.Lock()
				s.released[r.Holder.Node]++
				s.mu.Unlock()
			}
			return nil
		}).Maybe()
	s.env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			in.Node = childNode(ctx, in)
			s.mu.Lock()
			s.started[in.Node] = workflow.Now(ctx)
			s.mu.Unlock()
			if err := workflow.Sleep(ctx, s.took); err != nil {
				return api.NodeResult{}, err
			}
			if len(in.Node) > 5 && in.Node[:5] == "fail-" {
				res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
				return res, temporal.NewNonRetryableApplicationError("node failed", api.ErrNodeFailed, nil, res)
			}
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		}).Maybe()
	return s
}

// grant hands node a slot after d.
func (s *slotEnv) grant(node string, d time.Duration) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalSlotGranted, SlotGrant{Node: slotCluster.NodeWorkflowID(node)})
	}, d)
}

func (s *slotEnv) startedAt(node string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.started[node]
	return at, ok
}

// A node that waited for a cluster slot does not start once the failure budget was spent
// while it waited.
func TestNodeWaitingForAClusterSlotDoesNotStartOverTheFailureBudget(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("fail-a", time.Second)
	s.grant("b", 18*time.Minute)
	s.grant("c", 28*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"b", "c", "fail-a"}, JobTemplate: sampleTemplate, Parallelism: 3}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.ErrorContains(t, s.env.GetWorkflowError(), "over the budget")
	_, ok := s.startedAt("b")
	require.False(t, ok, "b started 8 minutes after fail-a spent the failure budget")
	_, ok = s.startedAt("c")
	require.False(t, ok, "c started 18 minutes after fail-a spent the failure budget")
}

// A second canary does not start after the first failed, however long it waited for a slot.
func TestCanaryWaitingForAClusterSlotDoesNotStartAfterACanaryFailed(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("fail-a", time.Second)
	s.grant("b", 20*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"b", "fail-a", "z"}, JobTemplate: sampleTemplate,
		Parallelism: 2, MaxFailures: "100%", Canary: &api.Canary{Nodes: []string{"b", "fail-a"}}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.ErrorContains(t, s.env.GetWorkflowError(), "no other node was started")
	_, ok := s.startedAt("b")
	require.False(t, ok, "canary b started after canary fail-a failed")
}

// A node granted its slot after the maintenance window closed waits for the next opening.
func TestNodeGrantedAClusterSlotOutsideTheWindowWaitsForTheWindow(t *testing.T) {
	s := newSlotEnv(t)
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s.env.SetStartTime(start)
	s.grant("a", time.Minute)
	s.grant("b", time.Hour) // 11:00, the window was 10:00-10:30
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a", "b"}, JobTemplate: sampleTemplate, Parallelism: 2,
		MaintenanceWindow: &api.MaintenanceWindow{Start: "10:00", Duration: "30m"}}
	// The second grant is taken back and asked for again at the next opening: grant it then too.
	s.grant("b", 24*time.Hour+time.Minute)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.NoError(t, s.env.GetWorkflowError())
	at, ok := s.startedAt("b")
	require.True(t, ok)
	open, _ := api.WindowState(*mustSettings(t, req).Pacing.Window, time.UTC, at)
	require.True(t, open, "b started at %s, outside the 10:00-10:30 window", at.Format(time.RFC3339))
}

// A node granted its slot while the rollout is paused waits for resume.
func TestNodeGrantedAClusterSlotWhilePausedWaitsForResume(t *testing.T) {
	s := newSlotEnv(t)
	start := s.env.Now()
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalPause, nil) }, 5*time.Minute)
	s.grant("a", 10*time.Minute)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalResume, nil) }, time.Hour)
	s.grant("a", time.Hour+time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a"}, JobTemplate: sampleTemplate}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.NoError(t, s.env.GetWorkflowError())
	at, ok := s.startedAt("a")
	require.True(t, ok)
	require.GreaterOrEqual(t, at.Sub(start), time.Hour, "a started while the rollout was paused")
}

// Nodes launched a delay apart that wait for their cluster slots and are granted them together
// still start delayBetweenNodes apart: the delay is a rule of the admission point, not only a
// wait between launches (versionAdmission 3).
func TestNodesGrantedClusterSlotsTogetherStartADelayApart(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("a", 10*time.Minute)
	s.grant("b", 10*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a", "b"}, JobTemplate: sampleTemplate,
		Parallelism: 2, DelayBetweenNodes: "3m"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.NoError(t, s.env.GetWorkflowError())
	a, okA := s.startedAt("a")
	b, okB := s.startedAt("b")
	require.True(t, okA && okB, "both nodes run")
	require.GreaterOrEqual(t, b.Sub(a), 3*time.Minute, "a started at %s and b at %s, under delayBetweenNodes 3m", a.Format(time.TimeOnly), b.Format(time.TimeOnly))
}

// A node that holds its cluster slot while it waits out the delay gives the slot back when the
// rollout is aborted in that wait.
func TestANodeAbortedWhileItWaitsOutTheDelayGivesItsSlotBack(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("a", 10*time.Minute)
	s.grant("b", 10*time.Minute)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 11*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a", "b"}, JobTemplate: sampleTemplate,
		Parallelism: 2, DelayBetweenNodes: "3m"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	_, started := s.startedAt("b")
	require.False(t, started, "b started after the abort")
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, 1, s.released[slotCluster.NodeWorkflowID("b")], "b's slot, granted before the abort, is given back")
}

// The spacing holds across continue-as-new: the next run's first node waits out the delay that
// the previous run's last start began.
func TestTheDelayAfterTheLastStartCarriesOverContinueAsNew(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	starts := nodeStarts(env, time.Minute)
	last := env.Now().Add(-time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"b"}, JobTemplate: sampleTemplate, DelayBetweenNodes: "3m"}
	env.SetContinuedExecutionRunID("run-1")
	carried := &api.Progress{TemplateHash: "h", Parallelism: 1, Window: 1, ContinuedAsNew: 1, LastStartAt: &last}
	env.ExecuteWorkflow(api.RolloutWorkflow, req, carried)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	b, ok := starts()["b"]
	require.True(t, ok)
	require.GreaterOrEqual(t, b.Sub(last), 3*time.Minute, "b started %s after the previous run's last start, under delayBetweenNodes 3m", b.Sub(last))
}

// How a rollout stops: once no node may start any more (its failure budget spent, a canary
// failed), it waits for nothing but its nodes in flight.

// A rollout over its failure budget whose next node is held back by a closed maintenance
// window ends once its nodes in flight have, not at the window's next opening (a week later
// for a weekly window): no node may start any more, so there is nothing to wait for.
func (s *RolloutSuite) TestOverBudgetRolloutDoesNotWaitForTheNextWindow() {
	// Monday 2 March 2026, 09:50 UTC; the window is 10:00-10:30 every day.
	s.env.SetStartTime(time.Date(2026, 3, 2, 9, 50, 0, 0, time.UTC))
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) {
		if node == "node-00000" {
			return time.Hour, false // runs past the close, fails at 11:00
		}
		return 10 * time.Minute, true
	})
	req := request(nodeNames(6)...)
	req.Parallelism = 2
	req.MaintenanceWindow = &api.MaintenanceWindow{Start: "10:00", Duration: "30m", TimeZone: "UTC"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	appErr := requireAppError(s.T(), err, api.ErrFailureBudgetExceeded)
	var r api.RolloutResult
	s.Require().NoError(appErr.Details(&r))
	s.Equal(1, r.Counts.Failed)
	s.Equal(3, r.Counts.Succeeded, "node-00001..3 ran before the window closed")
	s.Len(s.runs, 4, "no node starts once the budget is spent")
	s.Equal(time.Date(2026, 3, 2, 11, 0, 0, 0, time.UTC), r.FinishedAt.UTC(),
		"the rollout fails when its last node in flight fails, not when the window reopens")
}

// A rollout over its failure budget does not sit out the delay between nodes it is in: no
// node may start after it, so it ends once its nodes in flight have.
func (s *RolloutSuite) TestOverBudgetRolloutCutsTheDelayBetweenNodes() {
	r := s.overBudgetDuringAnHourlongDelay()
	s.Less(r.FinishedAt.Sub(r.StartedAt), 10*time.Minute, "the rollout ends when node-00000 fails, not an hour later")
}

// An old run (before versionCutDelay) sits the delay out, as its history says it did.
func (s *RolloutSuite) TestOverBudgetRolloutOfAnOldRunSitsTheDelayOut() {
	s.env.OnGetVersion(versionCutDelay, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	r := s.overBudgetDuringAnHourlongDelay()
	s.GreaterOrEqual(r.FinishedAt.Sub(r.StartedAt), time.Hour)
}

// overBudgetDuringAnHourlongDelay runs three nodes an hour apart with no failure allowed; the
// first fails after a minute.
func (s *RolloutSuite) overBudgetDuringAnHourlongDelay() api.RolloutResult {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) { return time.Minute, node != "node-00000" })
	req := request(nodeNames(3)...)
	req.DelayBetweenNodes = "1h"
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	appErr := requireAppError(s.T(), s.env.GetWorkflowError(), api.ErrFailureBudgetExceeded)
	var r api.RolloutResult
	s.Require().NoError(appErr.Details(&r))
	s.Len(s.runs, 1, "no node starts once the budget is spent")
	return r
}

// secondOfBoth runs rollout first over a and shared, then a minute later rollout second (over
// shared and z unless given), and returns second's result and error type (the result from the
// error's details when it failed).
func secondOfBoth(ctx workflow.Context, req *api.RolloutRequest) (secondResult, error) {
	first := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("first")}),
		api.RolloutWorkflow, api.RolloutRequest{Name: "first", Nodes: []string{"a", "shared"}, JobTemplate: sampleTemplate})
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return secondResult{}, err
	}
	if req == nil {
		req = &api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z"}, JobTemplate: sampleTemplate}
	}
	second := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: api.RolloutID("second")}),
		api.RolloutWorkflow, *req)
	var r secondResult
	err := second.Get(ctx, &r.Result)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		r.ErrType = appErr.Type()
		_ = appErr.Details(&r.Result)
	} else if err != nil {
		return r, err
	}
	_ = first.Get(ctx, nil)
	return r, nil
}

type secondResult struct {
	Result  api.RolloutResult `json:"result"`
	ErrType string            `json:"errType,omitempty"`
}

// pairEnv is a test environment for secondOfBoth: shared is held by rollout first for two
// days, z fails after a minute, every other node succeeds after two days. zFailed reports
// when z failed; starts, which rollouts started each node.
func pairEnv(t *testing.T) (env *testsuite.TestWorkflowEnvironment, zFailed func() time.Time, starts func(node string) []string) {
	env, a := newTestEnv(nil)
	env.RegisterWorkflowWithOptions(secondOfBoth, workflow.RegisterOptions{Name: "second-of-both"})
	jobsOutlastTheWatch(env)
	listsNamedNodes(env, a)
	zFailed, starts = zFailsOthersRun(env, 48*time.Hour)
	return env, zFailed, starts
}

// A rollout over its failure budget ends once its nodes in flight have: a node that waits
// for another rollout's long Job will not start, so the rollout does not wait for that Job
// to end or for its next look at the node (10 minutes, doubling up to 2 hours).
func TestOverBudgetRolloutDoesNotWaitForABusyNode(t *testing.T) {
	env, zFailed, starts := pairEnv(t)
	env.ExecuteWorkflow("second-of-both", nil)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var r secondResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.ErrFailureBudgetExceeded, r.ErrType)
	require.Equal(t, 1, r.Result.Counts.Failed)
	require.Equal(t, []string{"first"}, starts("shared"))
	require.False(t, zFailed().IsZero())
	require.Less(t, r.Result.FinishedAt.Sub(zFailed()), time.Minute,
		"the rollout over budget ends when its last node in flight does (z failed at %v, it ended at %v)", zFailed(), r.Result.FinishedAt)
}

// A failed canary stops the rollout: a canary that waits for another rollout to free its
// node does not start afterwards (the budget allows a failure, the canaries none), and the
// rollout does not wait for that node.
func TestFailedCanaryDoesNotWaitForOrStartABusyCanary(t *testing.T) {
	env, zFailed, starts := pairEnv(t)
	env.ExecuteWorkflow("second-of-both", &api.RolloutRequest{Name: "second", Nodes: []string{"shared", "z", "other"}, JobTemplate: sampleTemplate,
		MaxFailures: "1", Canary: &api.Canary{Nodes: []string{"shared", "z"}}})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var r secondResult
	require.NoError(t, env.GetWorkflowResult(&r))
	require.Equal(t, api.ErrCanaryFailed, r.ErrType)
	require.Equal(t, []string{"first"}, starts("shared"), "no node starts after a canary failed")
	require.Empty(t, starts("other"))
	require.Less(t, r.Result.FinishedAt.Sub(zFailed()), time.Minute,
		"the rollout ends when its last canary in flight does (z failed at %v, it ended at %v)", zFailed(), r.Result.FinishedAt)
}

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
	_, carried := continuedAsNew(t, env.GetWorkflowError())
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
	require.Less(t, ended().Sub(start), time.Hour, "the run continued as new at once, not after the other rollout's Job")
	require.Equal(t, []api.PacedNode{{Name: "shared"}}, carried.WaitingNodes)
	require.Equal(t, []string{"y"}, inFlightNames(carried), "y, still running, is handed over in flight")
	require.Equal(t, "y", carried.Cursor, "z is left to the next run's listing")
	require.Equal(t, api.Counts{}, carried.Counts, "y is the next run's to count; shared is neither running nor counted waiting twice")
	require.Equal(t, []string{"first"}, ranOn()["shared"], "no Job of the second rollout on shared in this run")
}

// inFlightNames are the nodes a run handed over in flight.
func inFlightNames(p *api.Progress) []string {
	var names []string
	for _, n := range p.InFlightNodes {
		names = append(names, n.Name)
	}
	return names
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

// Every loop that can wait long watches the history's size (row 3 of the seams issue): a
// week of waiting must continue as new, not grow one run's history past the server's limits.

// holdNode is another rollout's node workflow: it holds the node for d, then tells the rollouts
// that asked when it frees.
func holdNode(ctx workflow.Context, d time.Duration) error {
	waiters := workflow.GetSignalChannel(ctx, SignalNotifyWhenFree)
	_ = workflow.Sleep(ctx, d)
	tellWaiters(ctx, waiters, "", api.NodeFreed{})
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
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		in.Node = childNode(ctx, in)
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
	_, carried := continuedAsNew(t, env.GetWorkflowError())
	require.Less(t, meter.peak, serverHistoryWarning, "one run's history stays below the server's warning")
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
	next, carried := continuedAsNew(t, env.GetWorkflowError())
	require.Less(t, meter.peak, serverHistoryWarning)
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

// collectorRounds is what a childCollector handed back in each round, and what it still held.
type collectorRounds struct {
	EndedBefore bool
	AnyEnded    []bool // anyEnded before each round
	Rounds      [][]string
	Pending     []string
}

// unstartedChild is a child's result future alone, for the collector.
type unstartedChild struct {
	workflow.ChildWorkflowFuture // nil: only Get and IsReady are called
	result                       workflow.Future
}

func (c unstartedChild) Get(ctx workflow.Context, v any) error { return c.result.Get(ctx, v) }
func (c unstartedChild) IsReady() bool                         { return c.result.IsReady() }

// TestCollectorTakesEndedChildrenInStartOrder ends children out of order: each round hands back
// only the ended ones, in the order they started, and keeps the rest.
func TestCollectorTakesEndedChildrenInStartOrder(t *testing.T) {
	env, _ := newTestEnv(&testsuite.WorkflowTestSuite{})
	env.ExecuteWorkflow(func(ctx workflow.Context) (collectorRounds, error) {
		c := &childCollector{}
		nodes := []string{"node-a", "node-b", "node-c", "node-d", "node-e"}
		ends := map[string]workflow.Settable{}
		for _, n := range nodes {
			f, s := workflow.NewFuture(ctx)
			c.add(n, unstartedChild{result: f}, workflow.Now(ctx), false, false)
			ends[n] = s
		}
		var out collectorRounds
		out.EndedBefore = c.anyEnded()
		take := func(ending ...string) {
			for _, n := range ending {
				ends[n].Set(nil, nil)
			}
			out.AnyEnded = append(out.AnyEnded, c.anyEnded())
			var round []string
			for _, p := range c.takeEnded() {
				round = append(round, p.node)
			}
			out.Rounds = append(out.Rounds, round)
		}
		take("node-d", "node-b")
		take()
		take("node-e", "node-a")
		for _, p := range c.pending {
			out.Pending = append(out.Pending, p.node)
		}
		return out, nil
	})
	require.NoError(t, env.GetWorkflowError())
	var got collectorRounds
	require.NoError(t, env.GetWorkflowResult(&got))
	require.Equal(t, collectorRounds{
		EndedBefore: false,
		AnyEnded:    []bool{true, false, true},
		Rounds:      [][]string{{"node-b", "node-d"}, nil, {"node-a", "node-e"}},
		Pending:     []string{"node-c"},
	}, got)
}

// A rollout told the node is free tries it while the holder still waits for that word to be
// delivered, is refused and asks again: the holder reads the late request before it ends and
// tells that rollout too, which would otherwise wait for its busy-node recheck.
func TestAWaiterThatAsksWhileTheWordsAreOutIsTold(t *testing.T) {
	env, _ := newTestEnv(nil)
	env.RegisterWorkflowWithOptions(holdNode, workflow.RegisterOptions{Name: "hold"})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalNotifyWhenFree, NodeWaiter{WorkflowID: "first"}) }, time.Second)
	var told []string
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", api.SignalNodeFree, mock.Anything).Return(
		func(_, workflowID, _, _ string, _ any) error {
			told = append(told, workflowID)
			if workflowID == "first" {
				// "second" asks while the word to "first" is still on its way.
				env.SignalWorkflow(SignalNotifyWhenFree, NodeWaiter{WorkflowID: "second"})
				env.SignalWorkflow(SignalNotifyWhenFree, NodeWaiter{WorkflowID: "first"})
			}
			return nil
		})
	env.ExecuteWorkflow("hold", time.Minute)
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, []string{"first", "second"}, told, "each waiter told once, the late one included")
}
