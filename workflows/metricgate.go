package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The rollout's metric gate (gates.prometheus): a PromQL query that must return nothing
// before any node starts and while nodes soak. One WatchMetricGate activity runs in the
// worker for as long as the gate keeps its state, asking Prometheus every interval; it returns
// only when the state changes, so a gate that holds for days costs a few events, not one per
// look. The state is a rule of the one admission point and travels across continue-as-new.
// It is asked only of requests with the section, which no history recorded before it had, so
// no version marker is needed.

// The admission point's words for the gate.
const (
	refusedMetricGate = "the metric gate is closed"
	refusedGateBroken = "the metric gate cannot be watched"
)

// metricGate is the gate as this run knows it.
type metricGate struct {
	rules api.MetricGate
	state api.GateState
	// err: the watch failed for good (the worker names no Prometheus): no node may start.
	err  error
	stop workflow.CancelFunc
}

// newMetricGate is the request's gate, closed until Prometheus first answered, or as the
// previous run left it; nil without one.
func newMetricGate(ctx workflow.Context, rules *api.MetricGate, carried *api.GateState) *metricGate {
	if rules == nil {
		return nil
	}
	g := &metricGate{rules: *rules, state: api.GateState{Reason: "Prometheus has not answered yet", Since: workflow.Now(ctx)}}
	if carried != nil {
		g.state = *carried
	}
	return g
}

// closed: no node may start now. A rollout without a gate is never held by one.
func (g *metricGate) closed() bool { return g != nil && !g.state.Open }

// broken: no node of this run may start any more.
func (g *metricGate) broken() bool { return g != nil && g.err != nil }

// pausing: Prometheus answered and the gate holds the rollout (what status calls paused).
func (g *metricGate) pausing() bool { return g.closed() && g.state.Asked }

func (g *metricGate) carried() *api.GateState {
	if g == nil {
		return nil
	}
	st := g.state
	return &st
}

func (g *metricGate) status() *api.GateState { return g.carried() }

// details is the gate's part of the UI's current details.
func (g *metricGate) details() string {
	switch {
	case g == nil:
		return ""
	case g.err != nil:
		return "; **metric gate broken**: " + g.err.Error()
	case g.pausing() && g.rules.Manual:
		return fmt.Sprintf("; **paused by the metric gate** since %s (resume: manual): %s", g.state.Since.Format(time.RFC3339), g.state.Reason)
	case g.pausing():
		return fmt.Sprintf("; **paused by the metric gate** since %s, going on once it has been quiet for %v: %s", g.state.Since.Format(time.RFC3339), g.rules.For, g.state.Reason)
	}
	return ""
}

// watchMetricGate keeps the gate's state in step with Prometheus until stopMetricGate.
func (r *rollout) watchMetricGate(ctx workflow.Context) {
	g := r.gate
	if g == nil {
		return
	}
	ctx, g.stop = workflow.WithCancel(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var a *activities.Activities
		for {
			in := activities.MetricGateInput{Query: g.rules.Query, IntervalSeconds: int64(g.rules.Interval / time.Second),
				ForSeconds: int64(g.rules.For / time.Second), Open: g.state.Open, First: !g.state.Asked}
			var res activities.MetricGateResult
			err := workflow.ExecuteActivity(withMetricGateActivity(ctx, g.rules.Interval), a.WatchMetricGate, in).Get(ctx, &res)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				g.err = asWorkflowError(err)
				r.showProgress(ctx)
				return
			}
			r.metricGateChanged(ctx, res)
		}
	})
}

// metricGateChanged takes the watch's answer: the gate's new state, a manual gate's pause,
// the details, and an Event on each node in flight.
func (r *rollout) metricGateChanged(ctx workflow.Context, res activities.MetricGateResult) {
	g := r.gate
	first := !g.state.Asked
	changed := res.Open != g.state.Open
	g.state.Asked, g.state.Open, g.state.Reason, g.state.Since = true, res.Open, res.Reason, workflow.Now(ctx)
	if !res.Open && (changed || first) {
		g.state.Closings++
		if g.rules.Manual {
			r.progress.Paused = true
		}
	}
	r.showProgress(ctx)
	inFlight := workflow.DeterministicKeys(r.pacer.domainOf)
	if len(inFlight) == 0 || (first && res.Open) {
		return
	}
	change := 2 * g.state.Closings // each closing and the opening after it have numbers of their own
	if !res.Open {
		change--
	}
	var a *activities.Activities
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "tell the nodes in flight of the metric gate"), a.RecordGateEvent, activities.GateEventInput{
		Rollout: r.req.Name, Nodes: inFlight, Open: res.Open, Reason: res.Reason, Change: change,
	}).Get(ctx, nil)
	if err != nil && ctx.Err() == nil {
		workflow.GetLogger(ctx).Warn("could not record the metric gate's Events on the nodes in flight", "error", err)
	}
}

// stopMetricGate ends the watch before the run ends or continues as new.
func (r *rollout) stopMetricGate() {
	if r.gate != nil && r.gate.stop != nil {
		r.gate.stop()
	}
}

// metricGateFailed ends a rollout whose gate could not be watched, once the nodes in flight
// have finished.
func (r *rollout) metricGateFailed(ctx workflow.Context) (api.RolloutResult, error) {
	r.done = true
	result := r.result(ctx)
	msg, errType := r.gate.err.Error(), api.ErrNoPrometheus
	var appErr *temporal.ApplicationError
	if errors.As(r.gate.err, &appErr) {
		msg, errType = appErr.Message(), appErr.Type()
	}
	return result, temporal.NewNonRetryableApplicationError(fmt.Sprintf("rollout %s stopped: gates.prometheus: %s", r.req.Name, msg), errType, nil, result)
}

// withMetricGateActivity runs a watch: as long as the gate keeps its state, heartbeating every
// third of the heartbeat timeout (a worker that died is noticed within five minutes, and the
// watch goes on elsewhere), and retried for ever unless the worker has no Prometheus; a retry
// resumes the quiet time the last heartbeat recorded.
func withMetricGateActivity(ctx workflow.Context, interval time.Duration) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    max(5*time.Minute, 3*interval),
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: interval, BackoffCoefficient: 2, MaximumInterval: 5 * time.Minute,
			NonRetryableErrorTypes: []string{api.ErrNoPrometheus}},
		Summary: "watch the metric gate",
	})
}
