package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/testjob"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"github.com/stretchr/testify/suite"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

var sampleTemplate = testjob.YAML("", "c")

type RolloutSuite struct {
	suite.Suite
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
	a   *activities.Activities
	// fleet is what the mocked ListNodes selects from; done are nodes marked done.
	fleet []string
	done  map[string]bool
	// nodes records every child run, in start order, with virtual start/finish times.
	mu    sync.Mutex
	runs  []nodeRun
	live  int
	peak  int
	jobFn func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error)
	// prepareErr and listFn replace the template and node listing behaviour in one test.
	prepareErr error
	listFn     func(context.Context, activities.ListNodesInput) (activities.ListNodesResult, error)
}

type nodeRun struct {
	node          string
	start, finish time.Time
	concurrent    int // nodes running when this one started, itself included
}

func TestRolloutSuite(t *testing.T) { suite.Run(t, new(RolloutSuite)) }

func (s *RolloutSuite) SetupTest() {
	s.env, s.a = newTestEnv(&s.WorkflowTestSuite)
	jobsOutlastTheWatch(s.env)
	s.fleet, s.done, s.runs, s.live, s.peak = nil, map[string]bool{}, nil, 0, 0
	s.jobFn = s.succeedAfter(time.Minute)
	s.prepareErr = nil
	s.listFn = s.listNodes
	s.env.OnActivity(s.a.PrepareTemplate, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
			return activities.PreparedTemplate{Template: in.Template, Hash: "hash1"}, s.prepareErr
		}).Maybe()
	s.env.OnActivity(s.a.ListNodes, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
			return s.listFn(ctx, in)
		}).Maybe()
	s.env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) { return s.jobFn(ctx, in) }).Maybe()
}

func (s *RolloutSuite) AfterTest(_, _ string) { s.env.AssertExpectations(s.T()) }

func nodeNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
	}
	return names
}

// listNodes pages through s.fleet the way the real activity does.
func (s *RolloutSuite) listNodes(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
	src := s.fleet
	if len(in.Names) > 0 {
		src = in.Names
	}
	sorted := append([]string(nil), src...)
	sort.Strings(sorted)
	var out activities.ListNodesResult
	out.Total = len(sorted)
	taken := 0
	for _, n := range sorted {
		if n <= in.After {
			continue
		}
		if taken == in.Limit {
			out.More = true
			break
		}
		taken++
		out.Next = n
		switch {
		case s.done[n] && !in.Rerun:
			out.Done = append(out.Done, n)
		default:
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out, nil
}

// succeedAfter is a child that runs for d of virtual time and succeeds, recording concurrency.
func (s *RolloutSuite) succeedAfter(d time.Duration) func(workflow.Context, NodeRolloutInput) (api.NodeResult, error) {
	return s.runFor(func(string) (time.Duration, bool) { return d, true })
}

// runFor is a child whose duration and success depend on the node.
func (s *RolloutSuite) runFor(plan func(node string) (time.Duration, bool)) func(workflow.Context, NodeRolloutInput) (api.NodeResult, error) {
	return func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		s.mu.Lock()
		s.live++
		s.peak = max(s.peak, s.live)
		i := len(s.runs)
		s.runs = append(s.runs, nodeRun{node: in.Node, start: workflow.Now(ctx), concurrent: s.live})
		s.mu.Unlock()
		d, ok := plan(in.Node)
		err := workflow.Sleep(ctx, d)
		s.mu.Lock()
		s.live--
		s.runs[i].finish = workflow.Now(ctx)
		s.mu.Unlock()
		if err != nil {
			return api.NodeResult{}, err
		}
		if !ok {
			res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
			return res, temporal.NewNonRetryableApplicationError("node failed", api.ErrNodeFailed, nil, res)
		}
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	}
}

func request(nodes ...string) api.RolloutRequest {
	return api.RolloutRequest{Name: "demo", Namespace: "jobs", Nodes: nodes, JobTemplate: sampleTemplate}
}

// runToEnd runs req to its end and returns its result: most tests check only what the
// rollout reports, and result requires that it ended without a workflow error.
func (s *RolloutSuite) runToEnd(req api.RolloutRequest) api.RolloutResult {
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	return s.result()
}

func (s *RolloutSuite) result() api.RolloutResult {
	s.True(s.env.IsWorkflowCompleted())
	var r api.RolloutResult
	s.Require().NoError(s.env.GetWorkflowError())
	s.Require().NoError(s.env.GetWorkflowResult(&r))
	return r
}

func (s *RolloutSuite) TestHappyPathRunsEveryNodeOnceWithinParallelism() {
	req := request(nodeNames(23)...)
	req.Parallelism = 5
	r := s.runToEnd(req)
	s.Equal(23, r.Counts.Succeeded)
	s.Equal(23, r.Selected)
	s.Len(s.runs, 23)
	s.Equal(5, s.peak, "the window should be used fully but never exceeded")
	seen := map[string]int{}
	for _, run := range s.runs {
		seen[run.node]++
	}
	s.Len(seen, 23)
	// 23 one-minute nodes, 5 at a time: five waves.
	s.Equal(5*time.Minute, r.FinishedAt.Sub(r.StartedAt))
}

func (s *RolloutSuite) TestParallelismNeverExceededWithUnevenJobs() {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) {
		var i int
		fmt.Sscanf(node, "node-%d", &i)
		return time.Duration(1+(i*7)%11) * time.Minute, true
	})
	req := request(nodeNames(40)...)
	req.Parallelism = 7
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(40, s.result().Counts.Succeeded)
	s.Equal(7, s.peak)
	for _, run := range s.runs {
		s.LessOrEqual(run.concurrent, 7)
	}
}

func (s *RolloutSuite) TestWindowGrowsExponentiallyWhileNodesSucceed() {
	req := request(nodeNames(15)...)
	req.Parallelism = 8
	req.Batch = &api.Batch{Initial: 1, Growth: api.GrowthExponential}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(15, s.result().Counts.Succeeded)
	// Window 1, then 2, 4, 8: the waves start at minutes 0, 1, 2, 3 (and 4 for the rest).
	starts := map[time.Duration]int{}
	t0 := s.runs[0].start
	for _, run := range s.runs {
		starts[run.start.Sub(t0)]++
	}
	s.Equal(map[time.Duration]int{0: 1, time.Minute: 2, 2 * time.Minute: 4, 3 * time.Minute: 8}, starts)
}

func (s *RolloutSuite) TestFailureBudgetStopsLaunchesAndFailsWithSummary() {
	failing := map[string]bool{"node-00002": true, "node-00004": true, "node-00006": true}
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) { return time.Minute, !failing[node] })
	req := request(nodeNames(20)...)
	req.Parallelism = 1
	req.MaxFailures = "1"
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	appErr := requireAppError(s.T(), err, api.ErrFailureBudgetExceeded)
	s.Contains(appErr.Message(), "node-00002")
	s.Contains(appErr.Message(), "node-00004")
	s.Len(s.runs, 5, "no node may start after the second failure")
	var r api.RolloutResult
	s.Require().NoError(appErr.Details(&r))
	s.Equal(3, r.Counts.Succeeded)
	s.Equal(2, r.Counts.Failed)
}

func (s *RolloutSuite) TestPercentBudgetAllowsFailuresWithinShare() {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) { return time.Minute, node != "node-00003" })
	req := request(nodeNames(10)...)
	req.MaxFailures = "10%"
	r := s.runToEnd(req)
	s.Equal(9, r.Counts.Succeeded)
	s.Equal(1, r.Counts.Failed)
	s.Require().Len(r.Failures, 1)
	s.Equal("BackoffLimitExceeded", r.Failures[0].Reason)
}

func (s *RolloutSuite) TestOneSlowFailingNodeDoesNotDelayOthers() {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) {
		if node == "node-00000" {
			return 3 * time.Hour, false
		}
		return time.Minute, true
	})
	req := request(nodeNames(10)...)
	req.Parallelism = 2
	req.MaxFailures = "1"
	r := s.runToEnd(req)
	s.Equal(9, r.Counts.Succeeded)
	var slowEnd, lastFast time.Time
	for _, run := range s.runs {
		if run.node == "node-00000" {
			slowEnd = run.finish
		} else if run.finish.After(lastFast) {
			lastFast = run.finish
		}
	}
	s.Equal(9*time.Minute, lastFast.Sub(s.runs[0].start), "the other nine run one after another in the free slot")
	s.True(lastFast.Before(slowEnd))
}

func (s *RolloutSuite) TestPauseStopsLaunchesAndResumeRestarts() {
	req := request(nodeNames(6)...)
	req.Parallelism = 1
	var atPause, atResume api.RolloutStatus
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalPause, nil) }, 90*time.Second)
	s.env.RegisterDelayedCallback(func() {
		atPause = s.query()
		s.env.SignalWorkflow(api.SignalResume, nil)
	}, time.Hour)
	s.env.RegisterDelayedCallback(func() {
		atResume = s.query()
	}, time.Hour+time.Second)
	r := s.runToEnd(req)
	s.Equal(6, r.Counts.Succeeded)
	s.True(atPause.Paused)
	s.Equal("paused", atPause.Phase)
	s.Equal(2, atPause.Counts.Succeeded, "the node in flight at the pause finishes; no new one starts")
	s.Equal(0, atPause.Counts.Running)
	s.Equal(4, atPause.Counts.Pending)
	s.False(atResume.Paused)
	s.Equal(1, atResume.Counts.Running)
	// The third node starts only when resumed.
	s.Equal(time.Hour, s.runs[2].start.Sub(s.runs[0].start))
}

func (s *RolloutSuite) TestSetParallelismUpdateResizesTheWindow() {
	req := request(nodeNames(30)...)
	req.Parallelism = 2
	var rejected, accepted error
	var res api.SetParallelismResult
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSetParallelism, "bad", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { rejected = err },
			OnAccept: func() { s.Fail("parallelism 0 must be rejected") },
		}, api.SetParallelismRequest{Parallelism: 0})
		s.env.UpdateWorkflow(api.UpdateSetParallelism, "good", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { accepted = err },
			OnAccept:   func() {},
			OnComplete: func(v interface{}, err error) { res = v.(api.SetParallelismResult); accepted = err },
		}, api.SetParallelismRequest{Parallelism: 6})
	}, 150*time.Second)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(30, s.result().Counts.Succeeded)
	s.Require().Error(rejected)
	s.Contains(rejected.Error(), "parallelism")
	s.NoError(accepted)
	s.Equal(api.SetParallelismResult{Previous: 2, Parallelism: 6}, res)
	for _, run := range s.runs {
		limit := 2
		if run.start.Sub(s.runs[0].start) >= 150*time.Second {
			limit = 6
		}
		s.LessOrEqual(run.concurrent, limit, "node %s", run.node)
	}
	s.Equal(6, s.peak)
}

func (s *RolloutSuite) TestRerunSkipsDoneNodesUnlessAsked() {
	s.fleet = nodeNames(8)
	s.done["node-00001"], s.done["node-00005"] = true, true
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate}
	r := s.runToEnd(req)
	s.Equal(6, r.Counts.Succeeded)
	s.Equal(2, r.Counts.Skipped)
	for _, run := range s.runs {
		s.NotContains([]string{"node-00001", "node-00005"}, run.node)
	}
}

func (s *RolloutSuite) TestRerunTrueRunsDoneNodesToo() {
	s.fleet = nodeNames(8)
	s.done["node-00001"] = true
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Rerun: true}
	r := s.runToEnd(req)
	s.Equal(8, r.Counts.Succeeded)
	s.Equal(0, r.Counts.Skipped)
}

func (s *RolloutSuite) TestDryRunStartsNoChild() {
	s.fleet = nodeNames(5)
	s.done["node-00002"] = true
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, DryRun: true}
	r := s.runToEnd(req)
	s.Empty(s.runs)
	s.Require().Len(r.Planned, 5)
	s.Equal("done", r.Planned[2].Skip)
	s.True(strings.HasPrefix(r.Planned[0].JobPrefix, "demo-node-00000"), r.Planned[0].JobPrefix)
	s.Equal(4, r.Counts.Pending)
	s.Equal(1, r.Counts.Skipped)
}

func (s *RolloutSuite) TestInvalidRequestFailsAtOnceNamingTheField() {
	req := request("node-a")
	req.Parallelism = -3
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	appErr := requireAppError(s.T(), err, api.ErrInvalidRequest)
	s.True(appErr.NonRetryable())
	s.Contains(appErr.Message(), "parallelism")
}

func (s *RolloutSuite) TestTemplateProblemFromActivityIsInvalidRequest() {
	s.prepareErr = temporal.NewNonRetryableApplicationError("jobTemplateRef: ConfigMap jobs/missing not found", api.ErrInvalidRequest, nil)
	req := request("node-a")
	req.JobTemplate, req.JobTemplateRef = "", &api.TemplateRef{Name: "missing"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	appErr := requireAppError(s.T(), s.env.GetWorkflowError(), api.ErrInvalidRequest)
	s.Contains(appErr.Message(), "jobTemplateRef")
}

func (s *RolloutSuite) TestMissingExplicitNodesBecomeNodeGone() {
	s.listFn = func(context.Context, activities.ListNodesInput) (activities.ListNodesResult, error) {
		return activities.ListNodesResult{Nodes: []string{"a", "c"}, Missing: []string{"b"}, Next: "c", Total: 3}, nil
	}
	r := s.runToEnd(request("a", "b", "c"))
	s.Equal(2, r.Counts.Succeeded)
	s.Equal(1, r.Counts.NodeGone)
	s.Len(s.runs, 2)
}

func TestContinueAsNewCarriesCursorCountersAndFailures(t *testing.T) {
	const n = 3000
	failing := map[string]bool{"node-00010": true, "node-01500": true, "node-02999": true}
	ts := &testsuite.WorkflowTestSuite{}
	started := map[string]int{}
	req := request()
	req.Nodes = nil
	req.NodeSelector = "pool=a"
	req.Parallelism = 50
	req.MaxFailures = "5"
	req.ContinueAsNewAfter = 1000
	runs := 0
	var final api.RolloutResult
	var carried *api.Progress
	for {
		runs++
		require.LessOrEqual(t, runs, 10, "the rollout should end within a few runs")
		env, a := newTestEnv(ts)
		jobsOutlastTheWatch(env)
		childrenDrainAtContinueAsNew(env)
		fleet := &RolloutSuite{fleet: nodeNames(n), done: map[string]bool{}}
		env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(fleet.listNodes)
		env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Template: sampleTemplate, Hash: "h"}, nil).Maybe()
		env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			started[in.Node]++
			if err := workflow.Sleep(ctx, time.Second); err != nil {
				return api.NodeResult{}, err
			}
			if failing[in.Node] {
				res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
				return res, temporal.NewNonRetryableApplicationError("failed", api.ErrNodeFailed, nil, res)
			}
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		})
		if carried != nil {
			env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", runs-1))
		}
		env.ExecuteWorkflow(Rollout, req, carried)
		require.True(t, env.IsWorkflowCompleted())
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			require.Equal(t, api.RolloutWorkflow, can.WorkflowType.Name)
			var next api.RolloutRequest
			next, carried, _ = continuation(t, err)
			require.NotNil(t, carried)
			require.Equal(t, runs, carried.ContinuedAsNew)
			require.Equal(t, runs*1000, carried.Counts.Finished(), "each run launches its share before continuing")
			require.Equal(t, "h", carried.TemplateHash, "the template is not prepared again")
			req = next
			continue
		}
		require.NoError(t, err)
		require.NoError(t, env.GetWorkflowResult(&final))
		break
	}
	require.Equal(t, 3, runs, "3,000 nodes at 1,000 per run")
	require.Equal(t, n, len(started), "every node is started")
	for node, count := range started {
		if count != 1 {
			t.Fatalf("node %s started %d times", node, count)
		}
	}
	require.Equal(t, n-3, final.Counts.Succeeded)
	require.Equal(t, 3, final.Counts.Failed)
	require.Equal(t, n, final.Selected)
	require.Equal(t, 2, final.ContinuedAsNew)
	failedNodes := []string{}
	for _, f := range final.Failures {
		failedNodes = append(failedNodes, f.Node)
	}
	require.Equal(t, []string{"node-00010", "node-01500", "node-02999"}, failedNodes)
}

func converterFromEnv() interface {
	FromPayloads(payloads *commonpb.Payloads, valuePtrs ...interface{}) error
} {
	return converter.GetDefaultDataConverter()
}

// A dry run writes nothing to the cluster: PrepareTemplate checks the template but does not
// store it (before, a dry run left the template's ConfigMap behind), and no child starts.
func TestDryRunStoresNoTemplate(t *testing.T) {
	env, a := newTestEnv(nil)
	var prepared []activities.PrepareTemplateInput
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		prepared = append(prepared, in)
		return activities.PreparedTemplate{Template: in.Template, Hash: "h"}, nil
	})
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		return activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}, nil
	})
	req := request("node-a", "node-b")
	req.DryRun = true
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	require.Len(t, res.Planned, 2)
	require.Equal(t, "h", res.TemplateHash)
	require.Len(t, prepared, 1)
	require.False(t, prepared[0].Store, "a dry run must not store the template in the cluster")

	// A real rollout still stores it, so its nodes share it by hash.
	env, a = newTestEnv(nil)
	prepared = nil
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		prepared = append(prepared, in)
		return activities.PreparedTemplate{}, temporal.NewNonRetryableApplicationError("stop here", api.ErrInvalidRequest, nil)
	})
	env.ExecuteWorkflow(api.RolloutWorkflow, request("node-a"))
	require.Len(t, prepared, 1)
	require.True(t, prepared[0].Store)
}

func TestWindowGrowthRules(t *testing.T) {
	grow := func(b api.Batch, ceiling, successes int) []int {
		w := newLaunchWindow(b, ceiling)
		sizes := []int{w.size}
		for i := 0; i < successes; i++ {
			before := w.size
			w.succeeded()
			if w.size != before {
				sizes = append(sizes, w.size)
			}
		}
		return sizes
	}
	require.Equal(t, []int{2, 4, 6, 8, 9}, grow(api.Batch{Initial: 2, Growth: api.GrowthLinear, Step: 2}, 9, 100))
	require.Equal(t, []int{1, 3, 9, 20}, grow(api.Batch{Initial: 1, Growth: api.GrowthExponential, Step: 3}, 20, 100))
	require.Equal(t, []int{5}, grow(api.Batch{Initial: 5, Growth: api.GrowthFixed}, 20, 100))
}

func TestWindowFailureRestartsTheStreak(t *testing.T) {
	w := newLaunchWindow(api.Batch{Initial: 2, Growth: api.GrowthLinear, Step: 1}, 10)
	w.succeeded()
	w.failed()
	w.succeeded()
	require.Equal(t, 2, w.size, "a failure in between: not a whole window of successes yet")
	w.succeeded()
	require.Equal(t, 3, w.size)
}

func TestWindowCeilingChanges(t *testing.T) {
	fixed := newLaunchWindow(api.Batch{Initial: 4, Growth: api.GrowthFixed}, 4)
	fixed.setCeiling(8)
	require.Equal(t, 8, fixed.size, "a fixed window follows parallelism")
	growing := newLaunchWindow(api.Batch{Initial: 1, Growth: api.GrowthExponential, Step: 2}, 8)
	growing.setCeiling(3)
	require.Equal(t, 1, growing.size, "a growing window is only capped")
	growing.succeeded()
	growing.succeeded()
	growing.succeeded()
	require.Equal(t, 3, growing.size)
}

func (s *RolloutSuite) TestDelayBetweenNodesSpacesLaunches() {
	req := request(nodeNames(4)...)
	req.DelayBetweenNodes = "30s"
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(4, s.result().Counts.Succeeded)
	for i, run := range s.runs {
		s.Equal(time.Duration(i)*30*time.Second, run.start.Sub(s.runs[0].start))
	}
}

func TestContinueAsNewNearTheHistoryLimitsNotAtTheSuggestion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        historyState
		window   int
		atLimits bool
		want     bool
	}{
		{"launched its share", historyState{launched: 2000}, 100, true, true},
		{"suggested, but far from the limits", historyState{launched: 900, events: 4100, bytes: 4 << 20, suggested: true}, 100, true, false},
		{"events near the warning limit", historyState{launched: 1900, events: 8700, bytes: 3 << 20}, 100, true, true},
		{"bytes near the warning limit", historyState{launched: 1500, events: 6000, bytes: 7800 << 10}, 100, true, true},
		{"a wide window leaves room for its drain", historyState{launched: 1000, events: 5000, bytes: 2 << 20}, 1000, true, true},
		{"runs from before the change follow the suggestion", historyState{launched: 900, events: 4100, suggested: true}, 100, false, true},
		{"and go on without it", historyState{launched: 900, events: 8700}, 100, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, continueAsNewDue(tc.h, 2000, tc.window, tc.atLimits))
		})
	}
}

// The policy's maxParallelism, learnt at PrepareTemplate, also bounds setParallelism later.
func TestSetParallelismStaysWithinThePolicy(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(
		activities.PreparedTemplate{Template: sampleTemplate, Hash: "h1", MaxParallelism: 5}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1"}, Total: 1}, nil)
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		}).After(time.Hour)
	var over, within error
	accepted := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateSetParallelism, "over", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { over = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: 6})
		env.UpdateWorkflow(api.UpdateSetParallelism, "within", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { within = err }, OnAccept: func() { accepted = true }, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: 5})
	}, time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", NodeSelector: "a=b", JobTemplate: sampleTemplate, Parallelism: 2})
	require.NoError(t, env.GetWorkflowError())
	require.ErrorContains(t, over, "maxParallelism")
	require.NoError(t, within)
	require.True(t, accepted)
}

// An update sent while the template is still being prepared cannot slip past the policy's cap.
func TestSetParallelismBeforeTheTemplateIsPreparedStaysWithinThePolicy(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).After(10*time.Minute).Return(
		activities.PreparedTemplate{Template: sampleTemplate, Hash: "h1", MaxParallelism: 5}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1"}, Total: 1}, nil)
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).After(time.Hour).Return(api.NodeResult{Outcome: api.OutcomeSucceeded}, nil)
	var updateErr error
	completed := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(api.UpdateSetParallelism, "early", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { updateErr = err }, OnAccept: func() {},
			OnComplete: func(_ any, err error) { completed, updateErr = true, err },
		}, api.SetParallelismRequest{Parallelism: 1000})
	}, time.Second)
	var st api.RolloutStatus
	env.RegisterDelayedCallback(func() {
		queryStatus(t, env, &st)
	}, 11*time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", NodeSelector: "a=b", JobTemplate: sampleTemplate, Parallelism: 2})
	require.NoError(t, env.GetWorkflowError())
	require.True(t, completed, "the update completes once the cap is known")
	require.ErrorContains(t, updateErr, "allows at most 5, got 1000")
	require.Equal(t, 2, st.Parallelism, "the parallelism over the cap was not applied")
}

// The requester in the memo reaches every Job and Node marker; the policy gets the selector
// and the parallelism it judges.
func TestRequesterAndPolicyInputsReachTheActivities(t *testing.T) {
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.SetMemoOnStart(map[string]any{api.MemoRequester: "alice@laptop"})

	var mu sync.Mutex
	var prepared activities.PrepareTemplateInput
	var created, finalized []string
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
			prepared = in
			return activities.PreparedTemplate{Template: in.Template, Hash: "h1"}, nil
		})
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(activities.ListNodesResult{Nodes: []string{"n1", "n2"}, Total: 2}, nil)
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
			mu.Lock()
			defer mu.Unlock()
			created = append(created, in.Requester)
			return activities.JobRef{Namespace: in.Namespace, Name: "j-" + in.Node, UID: "u-" + in.Node, Node: in.Node}, nil
		})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded}, nil)
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			finalized = append(finalized, in.Requester)
			return activities.FinalizeResult{}, nil
		})

	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).Return(activities.CordonResult{WeCordoned: true}, nil)
	env.OnActivity(a.UncordonNode, mock.Anything, mock.Anything).Return(activities.UncordonResult{Uncordoned: true}, nil)

	env.ExecuteWorkflow(api.RolloutWorkflow, api.RolloutRequest{Name: "kata", Namespace: "jobs", NodeSelector: "pool=a",
		JobTemplate: sampleTemplate, Parallelism: 7, Maintenance: &api.Maintenance{Cordon: true}})
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, "pool=a", prepared.NodeSelector)
	require.Equal(t, 7, prepared.Parallelism)
	require.True(t, prepared.Cordon, "the policy judges the maintenance before any node starts")
	require.False(t, prepared.Drain)
	require.Equal(t, []string{"alice@laptop", "alice@laptop"}, created)
	// Each node's Job's success, then its own once the uncordon is done.
	require.Equal(t, []string{"alice@laptop", "alice@laptop", "alice@laptop", "alice@laptop"}, finalized)
}

// childMemos records the memo of every child workflow started, as the server would get it.
type childMemos struct {
	mu    sync.Mutex
	memos map[string]map[string]any // by child workflow ID
}

func (c *childMemos) interceptor() interceptor.WorkerInterceptor {
	return outboundSeen{child: func(ctx workflow.Context) {
		opts := workflow.GetChildWorkflowOptions(ctx)
		c.mu.Lock()
		c.memos[opts.WorkflowID] = opts.Memo
		c.mu.Unlock()
	}}.interceptor()
}

// TestFleetPassesItsRequesterToTheClusterRollouts: each cluster's Rollout carries the fleet's
// requester and reason in its memo, where it reads them for its Jobs and Node markers.
func TestFleetPassesItsRequesterToTheClusterRollouts(t *testing.T) {
	env, _ := fleetEnv(t)
	memos := &childMemos{memos: map[string]map[string]any{}}
	intercept(env, memos.interceptor())
	require.NoError(t, env.SetMemoOnStart(map[string]any{api.MemoRequester: "alice@laptop", api.MemoReason: "CVE-1"}))
	env.ExecuteWorkflow(api.FleetRolloutWorkflow, fleetRequest(0))
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, memos.memos, 4)
	for id, memo := range memos.memos {
		require.Equal(t, map[string]any{api.MemoRequester: "alice@laptop", api.MemoReason: "CVE-1"}, memo, id)
	}
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want InvalidRequest naming %q, got %v", field, err)
	require.Equal(t, api.ErrInvalidRequest, appErr.Type())
	require.True(t, appErr.NonRetryable())
	require.Contains(t, appErr.Message(), field)
}

// A request typed into the Temporal UI with a misspelt nested field fails naming the field
// by its path and the field it was probably meant to be, as the starter does.
func TestRolloutNamesAMisspeltNestedFieldWithAHint(t *testing.T) {
	env, _ := newTestEnv(nil)
	env.ExecuteWorkflow(api.RolloutWorkflow, json.RawMessage(
		`{"name":"demo","nodes":["n1"],"jobTemplate":"t","batch":{"inital":1},"zzz":1}`))
	err := env.GetWorkflowError()
	requireInvalid(t, err, `batch.inital: unknown field; did you mean "batch.initial"?`)
	requireInvalid(t, err, `zzz: unknown field: remove it`)
}

// blockedCanary is the node plan of a rollout whose canary node-00007 its blocking Pods keep
// from running: its node workflow ends blocked, as runMaintained's gate ends it.
func (s *RolloutSuite) blockedCanary() api.RolloutRequest {
	succeed := s.succeedAfter(time.Minute)
	s.jobFn = func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		if in.Node != "node-00007" {
			return succeed(ctx, in)
		}
		s.mu.Lock()
		s.runs = append(s.runs, nodeRun{node: in.Node, start: workflow.Now(ctx)})
		s.mu.Unlock()
		res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeBlocked, Reason: api.ErrBlocked}
		return res, temporal.NewNonRetryableApplicationError("node node-00007 blocked", api.ErrNodeFailed, nil, res)
	}
	req := request(nodeNames(10)...)
	req.Canary = &api.Canary{Nodes: []string{"node-00007", "node-00003"}}
	return req
}

// A canary its blocking Pods kept from running proved nothing: the rollout stops after the
// canary stage as for a failed canary, naming it, and starts no other node.
func (s *RolloutSuite) TestABlockedCanaryStopsTheRollout() {
	s.env.ExecuteWorkflow(api.RolloutWorkflow, s.blockedCanary())
	appErr := requireAppError(s.T(), s.env.GetWorkflowError(), api.ErrCanaryFailed)
	s.Contains(appErr.Message(), "1 of 2 canary nodes did not run, so they proved nothing, and no other node was started; not run: node-00007 (blocked Blocked)")
	s.Equal([]string{"node-00003", "node-00007"}, s.startedNodes())
}

// Before versionPassedOverCanaryStops the stage passed over a blocked canary and every node ran.
func (s *RolloutSuite) TestABlockedCanaryOnTheOldVersionWasPassedOver() {
	s.env.OnGetVersion(versionPassedOverCanaryStops, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, s.blockedCanary())
	s.NoError(s.env.GetWorkflowError())
	s.Len(s.runs, 10)
}
