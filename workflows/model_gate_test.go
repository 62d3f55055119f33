package workflows

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The model's metric gate: some scenarios have gates.prometheus, with the query firing in a
// few spans of the scenario (the events that close and open the gate), and resume: manual in
// some, whose operator resumes a while after the query went quiet. The invariant: no node
// starts while the gate is closed, from the instant the query fires until it has been quiet
// for the gate's for (checked leniently at both instants).

// modelGate is a scenario's gate.
type modelGate struct {
	rules   api.PrometheusGate
	gateFor time.Duration
	firing  firingSpans
}

// scriptGate gives a quarter of the scenarios a gate. It draws from the seed after everything
// else, so the scenarios of the seeds stay as they were before the gate existed.
func (m *model) scriptGate() {
	r := m.rng
	if r.IntN(4) != 0 {
		return
	}
	g := &modelGate{gateFor: time.Duration(5+r.IntN(55)) * time.Minute, firing: firingSpans{start: m.start}}
	g.rules = api.PrometheusGate{Query: `ALERTS{alertstate="firing"}`, For: g.gateFor.String(), Interval: "30s"}
	if r.IntN(3) == 0 {
		g.rules.Resume = api.GateResumeManual
	}
	at := time.Duration(0)
	for range 1 + r.IntN(3) {
		from := at + time.Duration(10+r.IntN(24*60))*time.Minute
		to := from + time.Duration(5+r.IntN(6*60))*time.Minute
		g.firing.spans = append(g.firing.spans, [2]time.Duration{from, to})
		if g.rules.Resume == api.GateResumeManual {
			m.events = append(m.events, modelEvent{at: to + g.gateFor + time.Duration(1+r.IntN(180))*time.Minute, kind: "resume"})
		}
		at = to + g.gateFor
	}
	sort.SliceStable(m.events, func(i, j int) bool { return m.events[i].at < m.events[j].at })
	m.gate = g
	m.req.Gates = &api.Gates{Prometheus: &g.rules}
}

// mockGate plays the watch over the scenario's spans; a manual gate's closing is a pause.
func (m *model) mockGate(env *testsuite.TestWorkflowEnvironment, run int) {
	if m.gate == nil {
		return
	}
	mockWatch(env, m.gate.firing, m.gate.gateFor, nil, func(in activities.MetricGateInput, res activities.MetricGateResult) {
		if !m.lockRun(run) {
			return
		}
		defer m.mu.Unlock()
		m.note("metric gate: open=%v at %s (%s)", res.Open, env.Now().Format(time.TimeOnly), res.Reason)
		if !res.Open && m.gate.rules.Resume == api.GateResumeManual {
			m.pausedAt = append(m.pausedAt, env.Now())
		}
	})
	var a *activities.Activities
	env.OnActivity(a.RecordGateEvent, mock.Anything, mock.Anything).Return(func(context.Context, activities.GateEventInput) error { return nil }).Maybe()
}

// checkGate: no node starts while the gate is closed (callers hold m.mu).
func (m *model) checkGate(node string, t time.Time) {
	if m.gate == nil {
		return
	}
	for _, sp := range m.gate.firing.spans {
		closed, opens := m.start.Add(sp[0]), m.start.Add(sp[1]+m.gate.gateFor)
		if t.After(closed) && t.Before(opens) {
			m.fail("%s started at %s while the metric gate was closed (the query fired at %s, quiet for %v only at %s)", node, t, closed, m.gate.gateFor, opens)
		}
	}
}

func (g *modelGate) String() string {
	if g == nil {
		return "none"
	}
	return fmt.Sprintf("%+v firing %v", g.rules, g.firing.spans)
}
