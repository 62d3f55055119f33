package workflows

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below, whatever the machine has installed

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

const zoneKey = "topology.kubernetes.io/zone"

// labelledFleet makes ListNodes report these label values per node.
func (s *RolloutSuite) labelledFleet(labels map[string]map[string]string) {
	s.listFn = func(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		res, err := s.listNodes(ctx, in)
		for _, n := range append(append([]string(nil), res.Nodes...), res.Done...) {
			for _, k := range in.Labels {
				if v, ok := labels[n][k]; ok {
					if res.Labels == nil {
						res.Labels = map[string]map[string]string{}
					}
					if res.Labels[n] == nil {
						res.Labels[n] = map[string]string{}
					}
					res.Labels[n][k] = v
				}
			}
		}
		return res, err
	}
}

// peakPerDomain is the most runs of one domain that overlapped, from the recorded runs.
func peakPerDomain(runs []nodeRun, domainOf func(string) string) map[string]int {
	peak := map[string]int{}
	for _, r := range runs {
		d := domainOf(r.node)
		live := 0
		for _, o := range runs {
			if domainOf(o.node) == d && !o.start.After(r.start) && o.finish.After(r.start) {
				live++
			}
		}
		peak[d] = max(peak[d], live)
	}
	return peak
}

func (s *RolloutSuite) TestWindowClosesMidRolloutAndReopensNextDay() {
	// Monday 2 March 2026, 09:50 UTC; the window is 10:00-10:30 every day.
	start := time.Date(2026, 3, 2, 9, 50, 0, 0, time.UTC)
	s.env.SetStartTime(start)
	s.jobFn = s.succeedAfter(20 * time.Minute)
	req := request(nodeNames(6)...)
	req.Parallelism = 2
	req.MaintenanceWindow = &api.MaintenanceWindow{Start: "10:00", Duration: "30m", TimeZone: "UTC"}
	var before, closed api.RolloutStatus
	s.env.RegisterDelayedCallback(func() { before = s.query() }, 5*time.Minute)
	s.env.RegisterDelayedCallback(func() { closed = s.query() }, 3*time.Hour)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(6, s.result().Counts.Succeeded)

	opens := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s.Equal("waiting for window (opens 2026-03-02T10:00:00Z)", before.Phase)
	s.Equal("window", before.Pacing.WaitingFor)
	s.Equal(opens, *before.Pacing.WindowOpensAt)
	s.Equal("waiting for window (opens 2026-03-03T10:00:00Z)", closed.Phase)
	s.Equal(0, closed.Counts.Running, "the nodes in flight when it closed have finished")

	var starts []string
	for _, r := range s.runs {
		starts = append(starts, r.start.UTC().Format("Jan 2 15:04"))
	}
	// Two at the opening, two at 10:20 (they run on to 10:40, past the close), the rest the
	// next day at the opening.
	s.Equal([]string{"Mar 2 10:00", "Mar 2 10:00", "Mar 2 10:20", "Mar 2 10:20", "Mar 3 10:00", "Mar 3 10:00"}, starts)
	s.Equal(time.Date(2026, 3, 2, 10, 40, 0, 0, time.UTC), s.runs[3].finish.UTC())
}

func (s *RolloutSuite) query() api.RolloutStatus {
	var st api.RolloutStatus
	queryStatus(s.T(), s.env, &st)
	return st
}

func (s *RolloutSuite) TestWindowFollowsDaylightSavingInItsZone() {
	// Berlin moves from CET (+1) to CEST (+2) on Sunday 29 March 2026 at 02:00. The window
	// opens at 09:00 Berlin time: 08:00 UTC on Saturday, 07:00 UTC on Sunday.
	s.env.SetStartTime(time.Date(2026, 3, 28, 10, 30, 0, 0, time.UTC))
	s.jobFn = s.succeedAfter(10 * time.Minute)
	req := request(nodeNames(3)...)
	req.Parallelism = 1
	req.MaintenanceWindow = &api.MaintenanceWindow{Days: []string{"Sat", "Sun"}, Start: "09:00", Duration: "1h", TimeZone: "Europe/Berlin"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(3, s.result().Counts.Succeeded)
	s.Equal(time.Date(2026, 3, 29, 7, 0, 0, 0, time.UTC), s.runs[0].start.UTC())
	s.Equal(time.Date(2026, 3, 29, 7, 20, 0, 0, time.UTC), s.runs[2].start.UTC())
}

func (s *RolloutSuite) TestUnknownTimeZoneFailsAtOnceNamingTheField() {
	req := request(nodeNames(2)...)
	req.MaintenanceWindow = &api.MaintenanceWindow{Start: "10:00", Duration: "1h", TimeZone: "Mars/Olympus"}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	appErr := requireAppError(s.T(), err, api.ErrInvalidRequest)
	s.Contains(appErr.Message(), "maintenanceWindow.timeZone")
	s.Empty(s.runs)
}

// zonedFleet is 32 nodes: 15 in zone a, 10 in b, 5 in c and 2 without the label.
func zonedFleet() (names []string, labels map[string]map[string]string, domainOf func(string) string) {
	names = nodeNames(32)
	labels = map[string]map[string]string{}
	for i, n := range names {
		switch {
		case i < 15:
			labels[n] = map[string]string{zoneKey: "a"}
		case i < 25:
			labels[n] = map[string]string{zoneKey: "b"}
		case i < 30:
			labels[n] = map[string]string{zoneKey: "c"}
		}
	}
	return names, labels, func(n string) string { return labels[n][zoneKey] }
}

func unevenJobs(node string) (time.Duration, bool) {
	var i int
	fmt.Sscanf(node, "node-%d", &i)
	return time.Duration(1+(i*7)%11) * time.Minute, true
}

func (s *RolloutSuite) TestMaxPerDomainNeverExceededWithUnevenJobsAndParallelismChange() {
	names, labels, domainOf := zonedFleet()
	s.fleet = names
	s.labelledFleet(labels)
	s.jobFn = s.runFor(unevenJobs)
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Parallelism: 4,
		Topology: &api.Topology{Key: zoneKey, MaxPerDomain: 2}}
	var mid api.RolloutStatus
	s.env.RegisterDelayedCallback(func() { mid = s.query() }, 90*time.Second)
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateSetParallelism, "up", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { s.Fail("rejected", err) }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: 10})
	}, 10*time.Minute)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(32, s.result().Counts.Succeeded)
	s.Len(s.runs, 32)
	peak := peakPerDomain(s.runs, domainOf)
	s.Equal(map[string]int{"a": 2, "b": 2, "c": 2, "": 2}, peak, "each domain used up to its limit, never beyond")
	// Other domains fill the window: 4 in flight from the start (2 of a, 2 of b), and after
	// the raise to 10 every domain's limit at once (4 domains x 2).
	s.Equal(8, s.peak)
	s.Equal(4, s.runs[3].concurrent)
	s.Equal(map[string]int{"a": 2, "b": 2}, mid.Pacing.InFlightByDom)
}

func (s *RolloutSuite) TestOrderByLabelValue() {
	s.fleet = []string{"n-a", "n-b", "n-c", "n-d", "n-e"}
	s.labelledFleet(map[string]map[string]string{
		"n-a": {"rollout-priority": "10"}, "n-b": {"rollout-priority": "2"}, "n-d": {"rollout-priority": "2"}, "n-e": {"rollout-priority": "low"},
	})
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Parallelism: 1,
		Order: &api.Order{By: api.OrderByLabel, Label: "rollout-priority"}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(5, s.result().Counts.Succeeded)
	var order []string
	for _, r := range s.runs {
		order = append(order, r.node)
	}
	// Numbers numerically, then words, then nodes without the label; ties by name.
	s.Equal([]string{"n-b", "n-d", "n-a", "n-e", "n-c"}, order)
}

func (s *RolloutSuite) TestSpreadAlternatesDomains() {
	names, labels, domainOf := zonedFleet()
	s.fleet = names[:20] // 15 in a, 5 in b
	s.labelledFleet(labels)
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Parallelism: 1,
		Order: &api.Order{By: api.OrderSpread, Label: zoneKey}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(20, s.result().Counts.Succeeded)
	var domains string
	for _, r := range s.runs {
		domains += domainOf(r.node)
	}
	s.Equal("ababababab"+strings.Repeat("a", 10), domains)
}

func (s *RolloutSuite) TestCanaryFailureStopsTheRest() {
	s.jobFn = s.runFor(func(node string) (time.Duration, bool) { return time.Minute, node != "node-00007" })
	req := request(nodeNames(10)...)
	req.Canary = &api.Canary{Nodes: []string{"node-00007", "node-00003"}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	err := s.env.GetWorkflowError()
	appErr := requireAppError(s.T(), err, api.ErrCanaryFailed)
	s.Contains(appErr.Message(), "1 of 2 canary nodes failed, no other node was started; failed: node-00007 (failed BackoffLimitExceeded)")
	s.Equal([]string{"node-00003", "node-00007"}, s.startedNodes())
}

// startedNodes are the nodes whose child ran, sorted.
func (s *RolloutSuite) startedNodes() []string {
	var started []string
	for _, r := range s.runs {
		started = append(started, r.node)
	}
	sort.Strings(started)
	return started
}

func (s *RolloutSuite) TestCanariesBySelectorThenApprovalViaUpdate() {
	s.fleet = nodeNames(8)
	s.listFn = func(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		if in.Selector == "pool=a,canary=true" {
			return activities.ListNodesResult{Nodes: []string{"node-00005", "node-00006"}, Total: 2}, nil
		}
		s.Equal("pool=a", in.Selector)
		return s.listNodes(ctx, in)
	}
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Parallelism: 4,
		Canary: &api.Canary{Selector: "canary=true", Soak: "10m", Approval: true}}
	var early, accepted error
	var soaking, awaiting api.RolloutStatus
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateApprove, "early", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { early = err }, OnAccept: func() { s.Fail("approval during the canaries must be refused") }, OnComplete: func(any, error) {},
		}, api.ApproveRequest{})
	}, 30*time.Second)
	s.env.RegisterDelayedCallback(func() { soaking = s.query() }, 5*time.Minute)
	s.env.RegisterDelayedCallback(func() {
		awaiting = s.query()
		s.env.UpdateWorkflow(api.UpdateApprove, "ok", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { accepted = err }, OnAccept: func() {}, OnComplete: func(_ any, err error) { accepted = err },
		}, api.ApproveRequest{Note: "canaries look fine"})
	}, 2*time.Hour)
	r := s.runToEnd(req)
	s.Equal(8, r.Counts.Succeeded)
	s.Equal(8, r.Selected)
	s.Require().Error(early)
	s.Contains(early.Error(), "the canaries have not finished yet")
	s.NoError(accepted)
	s.Equal("soak", soaking.Pacing.WaitingFor)
	s.Equal("approval", awaiting.Pacing.WaitingFor)
	s.Equal("waiting for approval (starter approve)", awaiting.Phase)
	s.Equal([]string{"node-00005", "node-00006"}, awaiting.Pacing.Canaries)
	s.Len(s.runs, 8, "canaries are not run again")
	s.ElementsMatch([]string{"node-00005", "node-00006"}, []string{s.runs[0].node, s.runs[1].node}, "the canaries first (started together, in either order)")
	first := s.runs[0].start
	for _, run := range s.runs[2:] {
		s.Equal(2*time.Hour, run.start.Sub(first).Truncate(time.Hour), "node %s starts only after the approval", run.node)
	}
}

func (s *RolloutSuite) TestApproveRefusedWithoutAGate() {
	var refused error
	s.env.RegisterDelayedCallback(func() {
		s.env.UpdateWorkflow(api.UpdateApprove, "x", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { refused = err }, OnAccept: func() {}, OnComplete: func(any, error) {},
		}, api.ApproveRequest{})
	}, 10*time.Second)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, request(nodeNames(2)...))
	s.Equal(2, s.result().Counts.Succeeded)
	s.Require().Error(refused)
	s.Contains(refused.Error(), "no approval gate")
}

func TestMaxPerDomainAndOrderAcrossContinueAsNew(t *testing.T) {
	names, labels, domainOf := zonedFleet()
	ts := &testsuite.WorkflowTestSuite{}
	req := api.RolloutRequest{Name: "demo", NodeSelector: "pool=a", JobTemplate: sampleTemplate, Parallelism: 5,
		ContinueAsNewAfter: 7, Topology: &api.Topology{Key: zoneKey, MaxPerDomain: 2}, Order: &api.Order{By: api.OrderSpread},
		Canary: &api.Canary{Nodes: []string{"node-00000"}}}
	var carried *api.Progress
	var runs []nodeRun
	var final api.RolloutResult
	for run := 1; ; run++ {
		require.LessOrEqual(t, run, 12)
		env, a := newTestEnv(ts)
		jobsOutlastTheWatch(env)
		childrenDrainAtContinueAsNew(env) // "a run drains before it continues", below
		fleet := &RolloutSuite{fleet: names, done: map[string]bool{}}
		fleet.labelledFleet(labels)
		env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(fleet.listFn)
		env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil).Maybe()
		env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(fleet.runFor(unevenJobs))
		if carried != nil {
			env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", run-1))
		}
		env.ExecuteWorkflow(Rollout, req, carried)
		require.True(t, env.IsWorkflowCompleted())
		runs = append(runs, fleet.runs...)
		// Each run has its own clock: the peak is per run (a run drains before it continues).
		for d, p := range peakPerDomain(fleet.runs, domainOf) {
			require.LessOrEqual(t, p, 2, "domain %q in run %d", d, run)
		}
		if next, handed, ok := continuation(t, env.GetWorkflowError()); ok {
			req, carried = next, handed
			require.NotNil(t, carried.Pacing)
			require.Equal(t, canaryStageDone, carried.Pacing.CanaryStage)
			continue
		}
		require.NoError(t, env.GetWorkflowError())
		require.NoError(t, env.GetWorkflowResult(&final))
		break
	}
	require.Equal(t, 32, final.Counts.Succeeded)
	require.GreaterOrEqual(t, final.ContinuedAsNew, 4)
	started := map[string]int{}
	for _, r := range runs {
		started[r.node]++
	}
	require.Len(t, started, 32, "every node started")
	for n, c := range started {
		require.Equal(t, 1, c, "node %s started %d times", n, c)
	}
	// After the canary, the first five in spread order: one node of each domain in turn
	// ("" sorts first), where name order would have given a, a, b, b, c.
	firstDomains := map[string]int{}
	for _, r := range runs[1:] {
		if r.start.Equal(runs[1].start) {
			firstDomains[domainOf(r.node)]++
		}
	}
	require.Equal(t, map[string]int{"": 2, "a": 1, "b": 1, "c": 1}, firstDomains)
}

// canary.selector on a rollout that names its nodes picks the named nodes that match it: a
// selector that also matches more than 100 other nodes of the cluster (a fleet-wide
// canary=true label) must not fail the rollout when only a few of its own nodes match.
func (s *RolloutSuite) TestCanarySelectorCountsOnlyTheRolloutsOwnNodes() {
	labelled := nodeNames(250) // the cluster's nodes labelled canary=true
	s.listFn = func(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		if in.Selector == "canary=true" {
			saved := s.fleet
			s.fleet = labelled
			defer func() { s.fleet = saved }()
		}
		return s.listNodes(ctx, in)
	}
	req := request("node-00120", "node-00240", "web-1", "web-2")
	req.Parallelism = 4
	req.Canary = &api.Canary{Selector: "canary=true"}
	r := s.runToEnd(req)
	s.Equal(4, r.Counts.Succeeded)
	s.Equal(4, r.Selected)
	s.Require().Len(s.runs, 4)
	s.ElementsMatch([]string{"node-00120", "node-00240"}, []string{s.runs[0].node, s.runs[1].node}, "the canaries run first")
}

// A named canary of a rollout that selects its nodes by label must be one of them: a mistyped
// or foreign node is refused before anything starts, not given the Job, the cordon and the drain.
func (s *RolloutSuite) TestCanaryNodeOutsideTheSelectorIsRefused() {
	s.listFn = func(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		if len(in.Names) > 0 {
			if in.Selector != "pool=gpu" {
				return activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}, nil
			}
			return activities.ListNodesResult{Nodes: []string{"gpu-1"}, Unselected: []string{"web-1"}, Total: 2}, nil
		}
		return activities.ListNodesResult{Nodes: []string{"gpu-1", "gpu-2"}, Total: 2}, nil
	}
	req := api.RolloutRequest{Name: "demo", Namespace: "jobs", NodeSelector: "pool=gpu", JobTemplate: sampleTemplate,
		Canary: &api.Canary{Nodes: []string{"gpu-1", "web-1"}}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.True(s.env.IsWorkflowCompleted())
	err := s.env.GetWorkflowError()
	s.Require().Error(err)
	s.Contains(err.Error(), `canary.nodes[1]: "web-1" is not selected by the rollout`)
	s.Empty(s.runs, "no node started")
}
