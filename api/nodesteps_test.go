package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// nodeStepsRequest is a valid request with every field of issue 33's node steps, changed by edit.
func nodeStepsRequest(edit func(*RolloutRequest)) RolloutRequest {
	r := RolloutRequest{Name: "gpu", NodeSelector: "pool=gpu", JobTemplate: "t",
		Maintenance: &Maintenance{Drain: &Drain{}, Soak: "2m",
			Reboot:    &Reboot{When: RebootIfRequested, JobTemplate: "r", Timeout: "20m"},
			OnSuccess: &OnSuccess{Labels: map[string]string{"example.com/gpu-driver": "550.54"}, RemoveTaints: []string{"example.com/driver-not-ready"}}},
		Gates: &Gates{BlockingPods: &BlockingPodsGate{Selector: "app=training"}, CheckJob: &CheckJobGate{JobTemplateRef: &TemplateRef{Name: "burn-in"}}},
	}
	if edit != nil {
		edit(&r)
	}
	return r
}

func fieldsOf(ps []*FieldError) []string {
	var fields []string
	for _, p := range ps {
		fields = append(fields, p.Field)
	}
	return fields
}

// TestNodeStepsDefaultsReachTheNode: the settings carry each section with its defaults.
func TestNodeStepsDefaultsReachTheNode(t *testing.T) {
	r := nodeStepsRequest(func(r *RolloutRequest) { r.Maintenance.Reboot.When, r.Maintenance.Reboot.Timeout = "", "" })
	require.Empty(t, r.Problems())
	nm := r.Settings().Maintenance
	require.Equal(t, &NodeReboot{When: RebootAlways, TimeoutSeconds: int64(DefaultRebootTimeout / time.Second)}, nm.Reboot)
	require.Equal(t, &NodeBlockingPods{Selector: "app=training", TimeoutSeconds: int64(DefaultBlockingPodsTimeout / time.Second)}, nm.BlockingPods)
	require.Equal(t, &NodeCheckJob{TimeoutSeconds: int64(DefaultCheckJobTimeout / time.Second)}, nm.CheckJob)
	require.Equal(t, r.Maintenance.OnSuccess, nm.OnSuccess)
	require.Equal(t, map[string]string{"Ready": "True"}, nm.RebootConditions())

	gatesOnly := RolloutRequest{Name: "g", Nodes: []string{"n"}, JobTemplate: "t", Gates: &Gates{CheckJob: &CheckJobGate{JobTemplate: "c", Timeout: "5m"}}}
	require.Empty(t, gatesOnly.Problems())
	require.Equal(t, &NodeMaintenance{CheckJob: &NodeCheckJob{TimeoutSeconds: 300}}, gatesOnly.Settings().Maintenance, "gates alone: no cordon, no health")
	require.Nil(t, RolloutRequest{Name: "g", Nodes: []string{"n"}, JobTemplate: "t", Gates: &Gates{}}.Settings().Maintenance)
}

// TestNodeStepsProblemsNameTheFieldAndTheFix: every mistake names its field and a fix.
func TestNodeStepsProblemsNameTheFieldAndTheFix(t *testing.T) {
	cases := map[string]struct {
		edit  func(*RolloutRequest)
		field string
	}{
		"unknown when":         {func(r *RolloutRequest) { r.Maintenance.Reboot.When = "sometimes" }, "maintenance.reboot.when"},
		"no reboot template":   {func(r *RolloutRequest) { r.Maintenance.Reboot.JobTemplate = "" }, "maintenance.reboot.jobTemplate"},
		"two reboot templates": {func(r *RolloutRequest) { r.Maintenance.Reboot.JobTemplateRef = &TemplateRef{Name: "x"} }, "maintenance.reboot.jobTemplate"},
		"reboot timeout":       {func(r *RolloutRequest) { r.Maintenance.Reboot.Timeout = "soon" }, "maintenance.reboot.timeout"},
		"empty onSuccess":      {func(r *RolloutRequest) { r.Maintenance.OnSuccess = &OnSuccess{} }, "maintenance.onSuccess"},
		"bad label key":        {func(r *RolloutRequest) { r.Maintenance.OnSuccess.Labels = map[string]string{"a b": "x"} }, "maintenance.onSuccess.labels"},
		"bad label value":      {func(r *RolloutRequest) { r.Maintenance.OnSuccess.Labels = map[string]string{"k": "a b"} }, "maintenance.onSuccess.labels.k"},
		"bad taint effect": {func(r *RolloutRequest) {
			r.Maintenance.OnSuccess.AddTaints = []Taint{{Key: "k", Effect: "Never"}}
		}, "maintenance.onSuccess.addTaints[0].effect"},
		"added and removed": {func(r *RolloutRequest) {
			r.Maintenance.OnSuccess.AddTaints = []Taint{{Key: "example.com/driver-not-ready", Effect: "NoSchedule"}}
		}, "maintenance.onSuccess.addTaints[0].key"},
		"bad removed key":         {func(r *RolloutRequest) { r.Maintenance.OnSuccess.RemoveTaints = []string{"/"} }, "maintenance.onSuccess.removeTaints[0]"},
		"selector does not parse": {func(r *RolloutRequest) { r.Gates.BlockingPods.Selector = "app in (" }, "gates.blockingPods.selector"},
		"selector empty":          {func(r *RolloutRequest) { r.Gates.BlockingPods.Selector = "" }, "gates.blockingPods.selector"},
		"blocking timeout":        {func(r *RolloutRequest) { r.Gates.BlockingPods.Timeout = "0s" }, "gates.blockingPods.timeout"},
		"no check template":       {func(r *RolloutRequest) { r.Gates.CheckJob.JobTemplateRef = nil }, "gates.checkJob.jobTemplate"},
		"check ref without name":  {func(r *RolloutRequest) { r.Gates.CheckJob.JobTemplateRef.Name = "" }, "gates.checkJob.jobTemplateRef.name"},
		"check timeout":           {func(r *RolloutRequest) { r.Gates.CheckJob.Timeout = "-1m" }, "gates.checkJob.timeout"},
	}
	require.Empty(t, nodeStepsRequest(nil).Problems())
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			ps := nodeStepsRequest(c.edit).Problems()
			require.Equal(t, []string{c.field}, fieldsOf(ps))
			require.NotEmpty(t, ps[0].Fix)
		})
	}
}

// TestNodeStepsDecodeFromJSON: the fields arrive as the README spells them, and a misspelt one
// is an unknown field.
func TestNodeStepsDecodeFromJSON(t *testing.T) {
	var r RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"gpu","nodeSelector":"pool=gpu","jobTemplate":"t",
		"maintenance":{"drain":{},"reboot":{"when":"ifRequested","jobTemplate":"r","timeout":"10m"},
		  "onSuccess":{"labels":{"example.com/gpu-driver":"550.54"},"removeTaints":["example.com/driver-not-ready"],"addTaints":[{"key":"k","effect":"NoSchedule"}]}},
		"gates":{"blockingPods":{"selector":"app=training","timeout":"30m"},"checkJob":{"jobTemplate":"c"}}}`), &r))
	require.Empty(t, r.Problems())
	require.Equal(t, RebootIfRequested, r.Settings().Maintenance.Reboot.When)
	require.Equal(t, int64(1800), r.Settings().Maintenance.BlockingPods.TimeoutSeconds)

	var typo RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"gpu","nodeSelector":"pool=gpu","jobTemplate":"t","gates":{"checkjob":{"jobTemplate":"c"}}}`), &typo))
	require.Contains(t, fieldsOf(typo.Problems()), "gates.checkjob")
}
