package workflows

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// gateScenario plays a rollout with a metric gate over as many runs as it continues as new,
// with its query firing in the given spans (offsets from the start) and each node's Job taking
// nodeTakes. The watch is mocked as the worker's activity behaves: the first look answers at
// once, an open gate closes when the query fires, a closed one opens once it has been quiet
// for the gate's for, counted from when the watch began at the earliest.
type gateScenario struct {
	t         *testing.T
	start     time.Time
	req       api.RolloutRequest
	firing    firingSpans
	nodeTakes time.Duration
	// firstLook, when set, is the watch's first look (the real activity, in some tests).
	firstLook func(context.Context, activities.MetricGateInput) (activities.MetricGateResult, error)
	// at are callbacks at offsets from the start, in the run that is running then.
	at map[time.Duration]func(env *testsuite.TestWorkflowEnvironment)

	mu      sync.Mutex
	starts  map[string]time.Duration // node -> when its child started
	watches []activities.MetricGateInput
	events  []activities.GateEventInput
	carried []api.Progress // what each continue-as-new carried
	// watchesStarted counts every WatchMetricGate started, answered or cut short.
	watchesStarted int
	final          api.RolloutResult
	finalErr       error
}

// firingSpans are when a gate's query fires: [from, to) offsets from start, in order.
type firingSpans struct {
	start time.Time
	spans [][2]time.Duration
}

func (f firingSpans) firingAt(t time.Time) bool {
	for _, sp := range f.spans {
		if !t.Before(f.start.Add(sp[0])) && t.Before(f.start.Add(sp[1])) {
			return true
		}
	}
	return false
}

// untilFiring is how long from now until the query fires (a long time if it never does again).
func (f firingSpans) untilFiring(now time.Time) time.Duration {
	if f.firingAt(now) {
		return 0
	}
	for _, sp := range f.spans {
		if from := f.start.Add(sp[0]); from.After(now) {
			return from.Sub(now)
		}
	}
	return 1000 * time.Hour
}

// untilQuietFor is how long from now until the query has been quiet for d, counted from now
// at the earliest (a watch that begins knows nothing of the quiet before it).
func (f firingSpans) untilQuietFor(now time.Time, d time.Duration) time.Duration {
	quietSince := now
	for _, sp := range f.spans {
		from, to := f.start.Add(sp[0]), f.start.Add(sp[1])
		if to.After(quietSince) && from.Before(quietSince.Add(d)) {
			quietSince = to
		}
	}
	return quietSince.Add(d).Sub(now)
}

func (s *gateScenario) run() {
	s.starts = map[string]time.Duration{}
	s.firing.start = s.start
	now := s.start
	var carried *api.Progress
	req := s.req
	gateFor := req.Settings().MetricGate.For
	for run := 1; ; run++ {
		require.LessOrEqual(s.t, run, 10)
		env, a := newTestEnv(nil)
		jobsOutlastTheWatch(env)
		childrenDrainAtContinueAsNew(env)
		env.SetStartTime(now)
		env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
			if info.ActivityType.Name == "WatchMetricGate" {
				s.mu.Lock()
				s.watchesStarted++
				s.mu.Unlock()
			}
		})
		env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil).Maybe()
		env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return((&RolloutSuite{done: map[string]bool{}}).listNodes).Maybe()
		mockWatch(env, s.firing, gateFor, s.firstLook, func(in activities.MetricGateInput, _ activities.MetricGateResult) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.watches = append(s.watches, in)
		})
		env.OnActivity(a.RecordGateEvent, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.GateEventInput) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.events = append(s.events, in)
			return nil
		}).Maybe()
		env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			s.mu.Lock()
			s.starts[in.Node] = workflow.Now(ctx).Sub(s.start)
			s.mu.Unlock()
			if err := workflow.Sleep(ctx, s.nodeTakes); err != nil {
				return api.NodeResult{}, err
			}
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		}).Maybe()
		for offset, fn := range s.at {
			if at := s.start.Add(offset); !at.Before(now) {
				env.RegisterDelayedCallback(func() { fn(env) }, at.Sub(now))
			}
		}
		if carried != nil {
			env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", run-1))
		}
		env.ExecuteWorkflow(Rollout, req, carried)
		require.True(s.t, env.IsWorkflowCompleted())
		err := env.GetWorkflowError()
		if next, handed, ok := continuation(s.t, err); ok {
			req, carried = next, handed // decoded afresh: the previous run's progress stays as it was
			s.carried = append(s.carried, *carried)
			now = env.Now()
			continue
		}
		s.finalErr = err
		if err == nil {
			require.NoError(s.t, env.GetWorkflowResult(&s.final))
		}
		return
	}
}

// mockWatch mocks WatchMetricGate as the worker's activity behaves over the firing spans, on
// the environment's clock: the first look answers at once (firstLook, when set, makes it), an
// open gate closes when the query fires, a closed one opens once it has been quiet for gateFor.
// answered sees each answer.
func mockWatch(env *testsuite.TestWorkflowEnvironment, f firingSpans, gateFor time.Duration,
	firstLook func(context.Context, activities.MetricGateInput) (activities.MetricGateResult, error),
	answered func(activities.MetricGateInput, activities.MetricGateResult)) {
	var a *activities.Activities
	answer := func(in activities.MetricGateInput, res activities.MetricGateResult) (activities.MetricGateResult, error) {
		answered(in, res)
		return res, nil
	}
	fired := func(in activities.MetricGateInput) activities.MetricGateResult {
		return activities.MetricGateResult{Reason: in.Query + " returned 1 series"}
	}
	env.OnActivity(a.WatchMetricGate, mock.Anything, mock.MatchedBy(func(in activities.MetricGateInput) bool { return in.First })).Return(
		func(ctx context.Context, in activities.MetricGateInput) (activities.MetricGateResult, error) {
			switch {
			case firstLook != nil:
				res, err := firstLook(ctx, in)
				answered(in, res)
				return res, err
			case f.firingAt(env.Now()):
				return answer(in, fired(in))
			}
			return answer(in, activities.MetricGateResult{Open: true, Reason: in.Query + " returned nothing"})
		}).Maybe()
	env.OnActivity(a.WatchMetricGate, mock.Anything, mock.MatchedBy(func(in activities.MetricGateInput) bool { return !in.First && in.Open })).
		AfterFn(func() time.Duration { return f.untilFiring(env.Now()) }).Return(
		func(_ context.Context, in activities.MetricGateInput) (activities.MetricGateResult, error) {
			return answer(in, fired(in))
		}).Maybe()
	env.OnActivity(a.WatchMetricGate, mock.Anything, mock.MatchedBy(func(in activities.MetricGateInput) bool { return !in.First && !in.Open })).
		AfterFn(func() time.Duration { return f.untilQuietFor(env.Now(), gateFor) }).Return(
		func(_ context.Context, in activities.MetricGateInput) (activities.MetricGateResult, error) {
			return answer(in, activities.MetricGateResult{Open: true, Reason: fmt.Sprintf("%s returned nothing for %v", in.Query, gateFor)})
		}).Maybe()
}

func gateRequest(nodes int, gate api.PrometheusGate) api.RolloutRequest {
	req := request(nodeNames(nodes)...)
	req.Parallelism = 1
	req.Gates = &api.Gates{Prometheus: &gate}
	return req
}

// The gate pauses the rollout when its query fires, across continue-as-new (the closed state is
// carried into the next run), and the rollout goes on by itself once the query has been quiet
// for 'for'; one watch per state change (and per run), never one per look.
func TestMetricGatePausesAndResumesAcrossContinueAsNew(t *testing.T) {
	req := gateRequest(6, api.PrometheusGate{Query: `ALERTS{alertstate="firing"}`, For: "10m", Interval: "30s"})
	req.ContinueAsNewAfter = 2
	s := &gateScenario{t: t, start: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), req: req,
		firing: firingSpans{spans: [][2]time.Duration{{100 * time.Minute, 150 * time.Minute}}}, nodeTakes: 30 * time.Minute}
	s.run()
	require.NoError(t, s.finalErr)
	require.Equal(t, 6, s.final.Counts.Succeeded)
	require.Equal(t, map[string]time.Duration{
		"node-00000": 0, "node-00001": 30 * time.Minute, // run 1
		"node-00002": 60 * time.Minute, "node-00003": 90 * time.Minute, // run 2; the query fires at 100m
		"node-00004": 160 * time.Minute, "node-00005": 190 * time.Minute, // run 3: quiet from 150m for 10m
	}, s.starts)
	require.Len(t, s.carried, 2)
	require.NotNil(t, s.carried[1].Gate, "the gate's state is carried across continue-as-new")
	require.True(t, s.carried[0].Gate.Open)
	require.False(t, s.carried[1].Gate.Open, "the second run continued as new with its gate closed")
	require.Contains(t, s.carried[1].Gate.Reason, "returned 1 series")
	// The watches that answered: the first look (open), the open watch that closed at 100m (run
	// 2), the closed one that opened at 160m (run 3). Each run also started one that its end
	// cut short: six watches for three runs and two changes, not one per look.
	var kinds []string
	for _, w := range s.watches {
		kinds = append(kinds, fmt.Sprintf("open=%v first=%v", w.Open, w.First))
	}
	require.Equal(t, []string{"open=false first=true", "open=true first=false", "open=false first=false"}, kinds)
	require.Equal(t, 6, s.watchesStarted)
	// The node in flight when the gate closed was told, and again when it opened (none was).
	require.Len(t, s.events, 1)
	require.Equal(t, []string{"node-00003"}, s.events[0].Nodes)
	require.False(t, s.events[0].Open)
}

// resume: manual keeps the rollout paused after the query went quiet, until someone resumes.
func TestMetricGateWithManualResumeStaysPausedUntilResumed(t *testing.T) {
	req := gateRequest(3, api.PrometheusGate{Query: "up == 0", For: "5m", Resume: api.GateResumeManual})
	var at100 api.RolloutStatus
	s := &gateScenario{t: t, start: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), req: req,
		firing: firingSpans{spans: [][2]time.Duration{{40 * time.Minute, 50 * time.Minute}}}, nodeTakes: 30 * time.Minute}
	s.at = map[time.Duration]func(*testsuite.TestWorkflowEnvironment){
		100 * time.Minute: func(env *testsuite.TestWorkflowEnvironment) {
			queryStatus(t, env, &at100)
		},
		120 * time.Minute: func(env *testsuite.TestWorkflowEnvironment) { env.SignalWorkflow(api.SignalResume, nil) },
	}
	s.run()
	require.NoError(t, s.finalErr)
	require.Equal(t, map[string]time.Duration{"node-00000": 0, "node-00001": 30 * time.Minute, "node-00002": 120 * time.Minute}, s.starts)
	require.Equal(t, "paused", at100.Phase)
	require.True(t, at100.Paused)
	require.True(t, at100.Gate.Open, "the query is quiet again, and the rollout waits for a person")
	require.Equal(t, 1, at100.Gate.Closings)
}

// A Prometheus that cannot be asked pauses the rollout (the real watch's first look), with
// the reason in the status; the rollout goes on once Prometheus answers and is quiet.
func TestMetricGatePausesWhilePrometheusIsUnreachable(t *testing.T) {
	down, err := activities.NewPrometheus(activities.Prometheus{URL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	worker := &activities.Activities{Prometheus: down, Now: time.Now}
	req := gateRequest(2, api.PrometheusGate{Query: "up == 0", For: "20m"})
	var at10 api.RolloutStatus
	s := &gateScenario{t: t, start: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), req: req, nodeTakes: 30 * time.Minute,
		firstLook: worker.WatchMetricGate}
	s.at = map[time.Duration]func(*testsuite.TestWorkflowEnvironment){
		10 * time.Minute: func(env *testsuite.TestWorkflowEnvironment) {
			queryStatus(t, env, &at10)
		},
	}
	s.run()
	require.NoError(t, s.finalErr)
	require.Equal(t, map[string]time.Duration{"node-00000": 20 * time.Minute, "node-00001": 50 * time.Minute}, s.starts)
	require.Equal(t, "paused", at10.Phase)
	require.Contains(t, at10.Gate.Reason, "could not be asked")
}

// A request with a gate on a worker that names no Prometheus fails at once, for good, naming
// the worker's flag; no node starts.
func TestMetricGateOnAWorkerWithoutPrometheusFailsNamingTheFlag(t *testing.T) {
	worker := &activities.Activities{Now: time.Now}
	s := &gateScenario{t: t, start: time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC), req: gateRequest(2, api.PrometheusGate{Query: "up == 0"}),
		nodeTakes: time.Minute, firstLook: worker.WatchMetricGate}
	s.run()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, s.finalErr, &appErr)
	require.Equal(t, api.ErrNoPrometheus, appErr.Type())
	require.True(t, appErr.NonRetryable())
	require.Contains(t, appErr.Error(), "--prometheus-url")
	require.Empty(t, s.starts)
	require.Len(t, s.watches, 1, "not retried")
}
