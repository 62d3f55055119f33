package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrometheusGateDefaultsAndProblems(t *testing.T) {
	req := validRequest()
	req.Gates = &Gates{Prometheus: &PrometheusGate{Query: " up == 0 "}}
	require.Empty(t, req.Problems())
	require.Equal(t, &MetricGate{Query: "up == 0", For: DefaultGateFor, Interval: DefaultGateInterval}, req.Settings().MetricGate)
	req.Gates.Prometheus = &PrometheusGate{Query: "up", For: "0s", Interval: "5s", Resume: GateResumeManual}
	require.Equal(t, &MetricGate{Query: "up", Interval: 5 * time.Second, Manual: true}, req.Settings().MetricGate)
	require.Nil(t, validRequest().Settings().MetricGate)

	req.Gates.Prometheus = &PrometheusGate{Query: "", For: "soon", Interval: "0s", Resume: "later"}
	var fields []string
	for _, p := range req.Problems() {
		fields = append(fields, p.Field)
	}
	require.Equal(t, []string{"gates.prometheus.query", "gates.prometheus.for", "gates.prometheus.interval", "gates.prometheus.resume"}, fields)
}

// A misspelt gate field is named, as any other.
func TestPrometheusGateUnknownFieldIsNamed(t *testing.T) {
	var req RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodes":["x"],"jobTemplate":"t","gates":{"prometheus":{"query":"up","fro":"5m"}}}`), &req))
	var msgs []string
	for _, p := range req.Problems() {
		msgs = append(msgs, p.Error())
	}
	require.Contains(t, strings.Join(msgs, "\n"), "gates.prometheus.fro")
}
