package api

import (
	"fmt"
	"strings"
	"time"
)

// Gates stop a bad rollout without a person: conditions checked across the rollout.
type Gates struct {
	// Prometheus is a PromQL query that must return nothing (like an alert) before every
	// node starts and while nodes soak; while it returns something the rollout pauses itself.
	Prometheus *PrometheusGate `json:"prometheus,omitempty"`
}

// PrometheusGate is asked at the Prometheus the worker's configuration names
// (--prometheus-url): the request names only the query.
type PrometheusGate struct {
	Query string `json:"query"`
	// For is how long the query must have returned nothing before the rollout goes on by
	// itself (default 5m).
	For string `json:"for,omitempty"`
	// Interval is how often the worker asks (default 30s).
	Interval string `json:"interval,omitempty"`
	// Resume: auto (default) goes on once the query has been quiet for For; manual stays
	// paused until `starter resume`.
	Resume string `json:"resume,omitempty"`
}

// Defaults and values of gates.prometheus.
const (
	GateResumeAuto        = "auto"
	GateResumeManual      = "manual"
	DefaultGateFor        = 5 * time.Minute
	DefaultGateInterval   = 30 * time.Second
	maxGateQueryBytes     = 4096
	gatePrometheusSection = "gates.prometheus"
)

var (
	gateForField      = durationField{"gates.prometheus.for", DefaultGateFor, 0, 24 * time.Hour}
	gateIntervalField = durationField{"gates.prometheus.interval", DefaultGateInterval, time.Second, time.Hour}
)

// MetricGate is gates.prometheus with its defaults applied, as the Rollout workflow runs it.
type MetricGate struct {
	Query    string
	For      time.Duration
	Interval time.Duration
	// Manual: once closed, the rollout stays paused until resumed by hand.
	Manual bool
}

// GateState is the metric gate as the rollout knows it, shown by status and carried across
// continue-as-new.
type GateState struct {
	// Open: nodes may start. A gate is closed until Prometheus first answered.
	Open bool `json:"open"`
	// Asked: Prometheus has answered at least once.
	Asked  bool      `json:"asked,omitempty"`
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// Closings counts how often the gate closed.
	Closings int `json:"closings,omitempty"`
}

func (g *Gates) metricGate() *MetricGate {
	if g == nil || g.Prometheus == nil {
		return nil
	}
	p := g.Prometheus
	return &MetricGate{Query: strings.TrimSpace(p.Query), For: gateForField.read(p.For), Interval: gateIntervalField.read(p.Interval),
		Manual: p.Resume == GateResumeManual}
}

func (g *Gates) check(ps *problems) {
	if g == nil {
		return
	}
	p := g.Prometheus
	if p == nil {
		return
	}
	switch q := strings.TrimSpace(p.Query); {
	case q == "":
		ps.add(gatePrometheusSection+".query", "is required", "give a PromQL query that returns nothing while all is well, e.g. ALERTS{alertstate=\"firing\",severity=\"critical\"}")
	case len(q) > maxGateQueryBytes:
		ps.add(gatePrometheusSection+".query", fmt.Sprintf("is %d bytes, over %d", len(q), maxGateQueryBytes), "use a recording rule for a long query")
	}
	gateForField.check(ps, p.For)
	gateIntervalField.check(ps, p.Interval)
	switch p.Resume {
	case "", GateResumeAuto, GateResumeManual:
	default:
		ps.add(gatePrometheusSection+".resume", fmt.Sprintf("%q is not allowed", p.Resume), "use auto (go on once the query has been quiet for 'for') or manual (stay paused until starter resume)")
	}
}
