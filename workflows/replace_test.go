package workflows

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// A converging rollout replaced (UpdateReplace) hands over to the new request whatever stage it
// is in: the rule is that the replacement takes over once the nodes in flight have ended.

// replaceWith sends UpdateReplace with next, as `starter start` of a changed request does; the
// update must be accepted.
func replaceWith(t *testing.T, next api.RolloutRequest) func(env *testsuite.TestWorkflowEnvironment) {
	return func(env *testsuite.TestWorkflowEnvironment) {
		env.UpdateWorkflow(api.UpdateReplace, "replace", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("replace rejected: %v", err) },
			OnAccept: func() {}, OnComplete: func(any, error) {},
		}, next)
	}
}

func templateHash(template string) string { return "h-" + fmt.Sprint(len(template)) }

var replaceStart = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// replaceScenario is a converging cluster of the given nodes (one zone), the rollout's request,
// and the request that replaces it: the same with a new template.
func replaceScenario(t *testing.T, nodes ...string) (c *convergeCluster, req, next api.RolloutRequest) {
	c = newConvergeCluster(t)
	for _, n := range nodes {
		c.join(n, "z1")
	}
	req = convergeRequest()
	next = req
	next.JobTemplate = sampleTemplate + "\n# v2\n"
	return c, req, next
}

// The canaries' soak and approval judge the request being replaced: a replacement that comes
// while the stage waits on them hands over at once (the canary ended long before), and the
// replacing request's run moves the other nodes. On the old version it waited for the old
// request's approval (or soak) first.
func TestAReplacementEndsTheCanaryStagesWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		canary api.Canary
	}{
		{name: "approval", canary: api.Canary{Nodes: []string{"a0"}, Approval: true}},
		{name: "soak", canary: api.Canary{Nodes: []string{"a0"}, Soak: "24h"}},
	} {
		for _, v := range []workflow.Version{1, workflow.DefaultVersion} {
			t.Run(fmt.Sprintf("%s/version %d", tc.name, v), func(t *testing.T) {
				c, req, next := replaceScenario(t, "a0", "a1", "a2")
				c.versions = map[string]workflow.Version{versionReplacementTakesOver: v}
				req.Canary = &tc.canary
				var phase, waitingFor string
				steps := []convergeStep{
					// a0, the canary, ran for 10 minutes; at an hour the stage waits.
					{at: time.Hour, do: replaceWith(t, next)},
					{at: 5 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
						var st api.RolloutStatus
						queryStatus(t, env, &st)
						phase = st.Phase
						if st.Pacing != nil {
							waitingFor = st.Pacing.WaitingFor
						}
					}},
					abortAt(48 * time.Hour),
				}
				runs, _, err := c.runConverge(t, req, replaceStart, steps)
				require.Error(t, err, "aborted")
				require.Empty(t, c.problems)
				require.Equal(t, templateHash(req.JobTemplate), c.runsOf("a0")[0], "the canary ran on the old template")
				if v == workflow.DefaultVersion {
					// The old version waits for the old request's approval (for ever here), or
					// soaks its 24 hours, before it hands over.
					require.Equal(t, tc.name, waitingFor, "at 5h, 4h after the replacement")
					return
				}
				require.Equal(t, 2, runs, "the replacement took over; at 5h the phase was %q", phase)
				for _, n := range []string{"a0", "a1", "a2"} {
					runs := c.runsOf(n)
					require.Equal(t, templateHash(next.JobTemplate), runs[len(runs)-1], "%s moves to the new template", n)
					require.Equal(t, time.Hour, c.runs[n][len(runs)-1].created.Sub(replaceStart), "%s moves as the replacement is accepted", n)
				}
			})
		}
	}
}

// An operator pushes a fix (replace) while a canary is failing: once the canary ends, the
// replacement takes over, as it does from a rollout whose failure budget is spent. Before, the
// rollout ended CanaryFailed and dropped the replacement it had accepted.
func TestAReplacementTakesOverFromAFailedCanary(t *testing.T) {
	c, req, next := replaceScenario(t, "a0", "a1")
	c.jobFor = time.Hour
	c.failing["a0"] = true
	req.Canary = &api.Canary{Nodes: []string{"a0"}}
	// a0, the canary, runs from 0 to 1h and fails; the fix is pushed at 30 minutes.
	requireTakesOver(t, c, req, next, 30*time.Minute)
	require.Equal(t, []string{templateHash(req.JobTemplate), templateHash(next.JobTemplate)}, c.runsOf("a0"), "the failed canary runs again on the new template")
	require.Equal(t, []string{templateHash(next.JobTemplate)}, c.runsOf("a1"))
}

// requireTakesOver runs the scenario with the replacement sent at the given time, and checks
// that it took over: one hand-over, after which every node's last Job is the new template's.
func requireTakesOver(t *testing.T, c *convergeCluster, req, next api.RolloutRequest, at time.Duration) {
	t.Helper()
	runs, last, err := c.runConverge(t, req, replaceStart, []convergeStep{{at: at, do: replaceWith(t, next)}, abortAt(10 * time.Hour)})
	require.Equal(t, 2, runs, "the accepted replacement took over; the rollout ended instead with: %v", err)
	require.Equal(t, next.JobTemplate, last.JobTemplate)
	for n := range c.runs {
		runs := c.runsOf(n)
		require.Equal(t, templateHash(next.JobTemplate), runs[len(runs)-1], "%s moves to the new template", n)
	}
}

// A pause taken before or during a replacement holds the replacing request's run too: a
// replacement changes what runs, not whether it may run now. Before, the hand-over dropped
// the pause and the new run started its nodes at once.
func TestAPauseHoldsTheReplacingRun(t *testing.T) {
	for _, pauseFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("paused before the replace: %v", pauseFirst), func(t *testing.T) {
			c, req, next := replaceScenario(t, "a0", "a1", "a2", "a3")
			c.jobFor = time.Hour
			req.Parallelism = 2
			pauseAt, replaceAt := 40*time.Minute, 30*time.Minute
			if pauseFirst {
				pauseAt, replaceAt = replaceAt, pauseAt
			}
			var paused bool
			steps := []convergeStep{
				// a0 and a1 run from 0 to 1h; a2 and a3 are queued.
				{at: replaceAt, do: replaceWith(t, next)},
				{at: pauseAt, do: func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(api.SignalPause, nil) }},
				{at: 3 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
					var st api.RolloutStatus
					queryStatus(t, env, &st)
					paused = st.Paused
				}},
				{at: 4 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(api.SignalResume, nil) }},
				abortAt(10 * time.Hour),
			}
			runs, _, err := c.runConverge(t, req, replaceStart, steps)
			require.Error(t, err, "aborted")
			require.Equal(t, 2, runs, "one hand-over")
			require.True(t, paused, "the replacing run is paused")
			for n, rs := range c.runs {
				for _, r := range rs {
					at := r.created.Sub(replaceStart)
					require.False(t, at > pauseAt && at < 4*time.Hour, "%s started at %s, while paused", n, at)
				}
			}
			for _, n := range []string{"a0", "a1", "a2", "a3"} {
				require.Equal(t, templateHash(next.JobTemplate), c.runsOf(n)[len(c.runsOf(n))-1], "%s reaches the new template once resumed", n)
			}
		})
	}
}

// A replacement pending when the metric gate breaks (its watch failed for good) takes over
// once the nodes in flight have ended: the replacing request's run gates afresh (here it has
// no gate). Before, the run ended on the broken gate and dropped the replacement it had
// accepted.
func TestAReplacementTakesOverFromABrokenMetricGate(t *testing.T) {
	c, req, next := replaceScenario(t, "a0", "a1", "a2")
	c.jobFor = time.Hour
	c.mockMore = func(env *testsuite.TestWorkflowEnvironment) {
		var a *activities.Activities
		first := func(in activities.MetricGateInput) bool { return in.First }
		env.OnActivity(a.WatchMetricGate, mock.Anything, mock.MatchedBy(first)).
			Return(activities.MetricGateResult{Open: true, Reason: "up == 0 returned nothing"}, nil).Maybe()
		// The watch breaks at 20 minutes, a0 in flight and the replacement pending.
		env.OnActivity(a.WatchMetricGate, mock.Anything, mock.MatchedBy(func(in activities.MetricGateInput) bool { return !first(in) })).
			After(20*time.Minute).Return(activities.MetricGateResult{}, temporal.NewNonRetryableApplicationError("Prometheus refused the query", "BadQuery", nil)).Maybe()
	}
	req.Parallelism = 1
	req.Gates = &api.Gates{Prometheus: &api.PrometheusGate{Query: "up == 0"}}
	requireTakesOver(t, c, req, next, 10*time.Minute)
	require.Len(t, c.runs, 3, "every node moved")
}

// A setParallelism accepted while the rollout is being replaced is the operator's latest word
// on its pace: the replacing run keeps it, over the parallelism the replacing request was sent
// with. Before, the hand-over dropped it, though the update had answered that it was set.
func TestASetParallelismWhileReplacingHoldsInTheReplacingRun(t *testing.T) {
	c, req, next := replaceScenario(t, "a0", "a1", "a2", "a3")
	c.jobFor = time.Hour
	req.Parallelism = 2
	next.Parallelism = 3
	steps := []convergeStep{
		// a0 and a1 run from 0 to 1h; a2 and a3 are queued.
		{at: 30 * time.Minute, do: replaceWith(t, next)},
		{at: 40 * time.Minute, do: func(env *testsuite.TestWorkflowEnvironment) {
			env.UpdateWorkflow(api.UpdateSetParallelism, "slower", &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("setParallelism rejected: %v", err) },
				OnAccept: func() {}, OnComplete: func(any, error) {},
			}, api.SetParallelismRequest{Parallelism: 1})
		}},
		abortAt(10 * time.Hour),
	}
	runs, last, _ := c.runConverge(t, req, replaceStart, steps)
	require.Equal(t, 2, runs, "one hand-over")
	require.Equal(t, 1, last.Parallelism, "the replacing run's parallelism")
	var starts []time.Time
	for _, n := range []string{"a0", "a1", "a2", "a3"} {
		rs := c.runs[n]
		require.Equal(t, templateHash(next.JobTemplate), rs[len(rs)-1].hash, "%s moves to the new template", n)
		starts = append(starts, rs[len(rs)-1].created)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), c.jobFor, "one node at a time in the replacing run")
	}
}
