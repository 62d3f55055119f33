package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestMaxFailuresTakesNumbersAndStrings(t *testing.T) {
	for raw, want := range map[string]FailureBudget{`3`: {count: 3}, `"3"`: {count: 3}, `"10%"`: {percent: 10, isShare: true}, `"0"`: {}} {
		var req RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","maxFailures":`+raw+`}`), &req))
		s, problems := req.Settings(), req.Problems()
		require.Empty(t, problems, raw)
		require.Equal(t, want, s.FailureBudget, raw)
	}
}

func TestBudgetShareOfSelected(t *testing.T) {
	b := FailureBudget{percent: 10, isShare: true}
	require.True(t, b.Allows(10, 100))
	require.False(t, b.Allows(11, 100))
	require.True(t, FailureBudget{count: 2}.Allows(2, 5))
	require.False(t, FailureBudget{count: 2}.Allows(3, 5))
}

// FuzzValidate feeds arbitrary requests (as JSON, the way they arrive) to validation: it must
// never panic, and whatever it accepts must really be valid.
func FuzzValidate(f *testing.F) {
	seed, _ := json.Marshal(RolloutRequest{Name: "kata-deploy", Namespace: "kube-system", NodeSelector: "kata=true", JobTemplate: "apiVersion: batch/v1\nkind: Job"})
	f.Add(string(seed))
	f.Add(`{"name":"x","nodes":["a","a"],"jobTemplate":"t","maxFailures":"100%","batch":{"initial":1,"growth":"linear"}}`)
	f.Add(`{"name":"","nodes":[],"parallelism":-5,"jobTimeout":"1ns"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, input string) {
		var req RolloutRequest
		if err := json.Unmarshal([]byte(input), &req); err != nil {
			return // not JSON at all: the Temporal data converter rejects it before the workflow
		}
		s, problems := req.Settings(), req.Problems()
		if len(problems) > 0 {
			return
		}
		if len(validation.IsDNS1123Label(req.Name)) > 0 {
			t.Fatalf("accepted name %q", req.Name)
		}
		if (len(req.Nodes) > 0) == (req.NodeSelector != "" || req.FieldSelector != "") {
			t.Fatalf("accepted nodes=%v selector=%q field=%q", req.Nodes, req.NodeSelector, req.FieldSelector)
		}
		for _, n := range req.Nodes {
			if len(validation.IsDNS1123Subdomain(n)) > 0 {
				t.Fatalf("accepted node %q", n)
			}
		}
		if (req.JobTemplate == "") == (req.JobTemplateRef == nil) {
			t.Fatal("accepted zero or two templates")
		}
		if s.Parallelism < 1 || s.Parallelism > MaxParallelism || s.Batch.Initial < 1 || s.Batch.Initial > s.Parallelism {
			t.Fatalf("accepted parallelism %d window %d", s.Parallelism, s.Batch.Initial)
		}
		if s.JobTimeout < time.Second || s.JobTimeout > MaxJobTimeout || s.JobTTL < 0 || s.DelayBetweenNodes < 0 {
			t.Fatalf("accepted durations %v %v %v", s.JobTimeout, s.JobTTL, s.DelayBetweenNodes)
		}
		if s.FailureBudget.count < 0 || s.FailureBudget.percent < 0 || s.FailureBudget.percent > 100 {
			t.Fatalf("accepted budget %+v", s.FailureBudget)
		}
		switch s.KeepJobs {
		case KeepNever, KeepFailed, KeepAlways:
		default:
			t.Fatalf("accepted keepJobs %q", s.KeepJobs)
		}
		if len(req.decodeProblems) > 0 {
			t.Fatalf("accepted despite %v", req.decodeProblems)
		}
	})
}

func validRequest() RolloutRequest {
	return RolloutRequest{Name: "kata-deploy", Namespace: "kube-system", NodeSelector: "kata=true", JobTemplate: "apiVersion: batch/v1\nkind: Job\n"}
}

func TestValidateAppliesDefaults(t *testing.T) {
	require.Empty(t, validRequest().Problems())
	s := validRequest().Settings()
	require.Equal(t, DefaultParallelism, s.Parallelism)
	require.Equal(t, Batch{Initial: DefaultParallelism, Growth: GrowthFixed}, s.Batch)
	require.Equal(t, DefaultJobTimeout, s.JobTimeout)
	require.Equal(t, DefaultJobTTL, s.JobTTL)
	require.Equal(t, KeepFailed, s.KeepJobs)
	require.Equal(t, DefaultContinueAsNewAfter, s.ContinueAsNewAfter)
	require.Equal(t, FailureBudget{}, s.FailureBudget)
}

func TestEveryBadFieldIsNamed(t *testing.T) {
	many := make([]string, MaxExplicitNodes+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	cases := []struct {
		name  string
		edit  func(r *RolloutRequest)
		field string
	}{
		{"empty name", func(r *RolloutRequest) { r.Name = "" }, "name"},
		{"name not a DNS label", func(r *RolloutRequest) { r.Name = "Kata_Deploy" }, "name"},
		{"name too long", func(r *RolloutRequest) { r.Name = strings.Repeat("a", 64) }, "name"},
		{"bad namespace", func(r *RolloutRequest) { r.Namespace = "Kube System" }, "namespace"},
		{"both node choices", func(r *RolloutRequest) { r.Nodes = []string{"a"} }, "nodes"},
		{"no node choice", func(r *RolloutRequest) { r.NodeSelector = "" }, "nodes"},
		{"bad selector", func(r *RolloutRequest) { r.NodeSelector = "kata in (" }, "nodeSelector"},
		{"bad field selector", func(r *RolloutRequest) { r.FieldSelector = "metadata.name=!=x" }, "fieldSelector"},
		{"node not a DNS subdomain", func(r *RolloutRequest) { r.NodeSelector, r.Nodes = "", []string{"ok", "Not_OK"} }, "nodes[1]"},
		{"too many explicit nodes", func(r *RolloutRequest) { r.NodeSelector, r.Nodes = "", many }, "select them with nodeSelector"},
		{"zero parallelism is the default, negative is not", func(r *RolloutRequest) { r.Parallelism = -1 }, "parallelism"},
		{"parallelism too big", func(r *RolloutRequest) { r.Parallelism = MaxParallelism + 1 }, "parallelism"},
		{"budget over 100%", func(r *RolloutRequest) { r.MaxFailures = "150%" }, "maxFailures"},
		{"negative budget", func(r *RolloutRequest) { r.MaxFailures = "-1" }, "maxFailures"},
		{"budget not a number", func(r *RolloutRequest) { r.MaxFailures = "some" }, "maxFailures"},
		{"no template", func(r *RolloutRequest) { r.JobTemplate = "" }, "jobTemplate"},
		{"both templates", func(r *RolloutRequest) { r.JobTemplateRef = &TemplateRef{Name: "cm"} }, "jobTemplate"},
		{"ref without name", func(r *RolloutRequest) { r.JobTemplate, r.JobTemplateRef = "", &TemplateRef{} }, "jobTemplateRef.name"},
		{"template too big", func(r *RolloutRequest) { r.JobTemplate = strings.Repeat("#", 300*1024) }, "jobTemplate"},
		{"batch initial zero", func(r *RolloutRequest) { r.Batch = &Batch{Initial: 0} }, "batch.initial"},
		{"batch initial over parallelism", func(r *RolloutRequest) { r.Batch = &Batch{Initial: 11} }, "batch.initial"},
		{"unknown growth", func(r *RolloutRequest) { r.Batch = &Batch{Initial: 1, Growth: "fast"} }, "batch.growth"},
		{"exponential step 1", func(r *RolloutRequest) { r.Batch = &Batch{Initial: 1, Growth: GrowthExponential, Step: 1} }, "batch.step"},
		{"bad delay", func(r *RolloutRequest) { r.DelayBetweenNodes = "soon" }, "delayBetweenNodes"},
		{"negative timeout", func(r *RolloutRequest) { r.JobTimeout = "-5m" }, "jobTimeout"},
		{"timeout too long", func(r *RolloutRequest) { r.JobTimeout = "9000h" }, "jobTimeout"},
		{"bad ttl", func(r *RolloutRequest) { r.JobTTL = "1 day" }, "jobTTL"},
		{"bad keepJobs", func(r *RolloutRequest) { r.KeepJobs = "sometimes" }, "keepJobs"},
		{"owner without uid", func(r *RolloutRequest) {
			r.Owner = &OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}
		}, "owner"},
		{"negative continue-as-new", func(r *RolloutRequest) { r.ContinueAsNewAfter = -1 }, "continueAsNewAfter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest()
			tc.edit(&req)
			err := invalid(req)
			requireInvalid(t, err, tc.field)
		})
	}
}

func TestJSONDecodingProblemsBecomeInvalidRequest(t *testing.T) {
	cases := []struct {
		json  string
		field string
	}{
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","paralelism":3}`, "paralelism"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelism":"ten"}`, "parallelism"},
		{`{"name":"a","nodes":"node-1","jobTemplate":"t"}`, "nodes"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","rerun":"yes"}`, "rerun"},
	}
	for _, tc := range cases {
		var req RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(tc.json), &req), "decoding never fails, so the workflow task never loops")
		err := invalid(req)
		requireInvalid(t, err, tc.field)
	}
}

func TestMaintenanceFailuresChargeTheBudget(t *testing.T) {
	var c Counts
	c.Add(OutcomeDrainTimedOut)
	c.Add(OutcomeUnhealthy)
	require.Equal(t, 2, c.Failures())
	require.Equal(t, 2, c.Finished())
}

func TestMaintenanceValidation(t *testing.T) {
	for _, c := range []struct {
		json, field string
	}{
		{`{"maintenance": {}}`, "maintenance"},
		{`{"maintenance": {"drain": {"timout": "1m"}}}`, "maintenance.drain.timout"},
		{`{"maintenance": {"drain": {"timeout": "soon"}}}`, "maintenance.drain.timeout"},
		{`{"maintenance": {"drain": {"podSelector": "app in ("}}}`, "maintenance.drain.podSelector"},
		{`{"maintenance": {"drain": {"gracePeriod": "-1s"}}}`, "maintenance.drain.gracePeriod"},
		{`{"maintenance": {"health": {"conditions": {"Ready": "yes"}}}}`, "maintenance.health.conditions.Ready"},
		{`{"maintenance": {"health": {"timeout": "0s"}}}`, "maintenance.health.timeout"},
		{`{"maintenance": {"soak": "forever"}}`, "maintenance.soak"},
		{`{"maintenance": {"cordon": true, "onFailure": "ignore"}}`, "maintenance.onFailure"},
		{`{"maintenance": {"cordon": "yes"}}`, "maintenance.cordon"},
	} {
		t.Run(c.field, func(t *testing.T) {
			req := decodeRequest(t, c.json)
			err := invalid(req)
			require.Error(t, err)
			require.Contains(t, err.Error(), c.field+":")
		})
	}

	req := decodeRequest(t, `{"maintenance": {"drain": {"timeout": "20s", "gracePeriod": "5s"}, "soak": "5s"}}`)
	err := invalid(req)
	require.NoError(t, err)
	g := int64(5)
	require.Equal(t, &NodeMaintenance{Cordon: true, Drain: true, DrainTimeoutSeconds: 20, GracePeriodSeconds: &g,
		Health: true, HealthTimeoutSeconds: 600, Conditions: map[string]string{"Ready": "True"}, SoakSeconds: 5}, req.Settings().Maintenance)
}

// decodeRequest is a valid request with the given fields merged in.
func decodeRequest(t *testing.T, fields string) RolloutRequest {
	t.Helper()
	base := `{"name": "demo", "nodes": ["a"], "jobTemplate": "apiVersion: batch/v1\nkind: Job\n", `
	var req RolloutRequest
	require.NoError(t, req.UnmarshalJSON([]byte(base+strings.TrimPrefix(fields, "{"))))
	return req
}

func TestPacingFieldsAreValidated(t *testing.T) {
	base := func() RolloutRequest {
		return RolloutRequest{Name: "demo", Nodes: []string{"a", "b"}, JobTemplate: "t"}
	}
	for _, tc := range []struct {
		field string
		edit  func(*RolloutRequest)
	}{
		{"maintenanceWindow.start", func(r *RolloutRequest) {
			r.MaintenanceWindow = &MaintenanceWindow{Start: "25:00", Duration: "1h"}
		}},
		{"maintenanceWindow.duration", func(r *RolloutRequest) { r.MaintenanceWindow = &MaintenanceWindow{Start: "10:00"} }},
		{"maintenanceWindow.days[1]", func(r *RolloutRequest) {
			r.MaintenanceWindow = &MaintenanceWindow{Days: []string{"Mon", "Funday"}, Start: "10:00", Duration: "1h"}
		}},
		{"topology.maxPerDomain", func(r *RolloutRequest) { r.Topology = &Topology{Key: "topology.kubernetes.io/zone"} }},
		{"topology.key", func(r *RolloutRequest) { r.Topology = &Topology{Key: "bad key!", MaxPerDomain: 1} }},
		{"canary", func(r *RolloutRequest) { r.Canary = &Canary{Approval: true} }},
		{"canary.nodes[0]", func(r *RolloutRequest) { r.Canary = &Canary{Nodes: []string{"c"}} }},
		{"canary.soak", func(r *RolloutRequest) { r.Canary = &Canary{Nodes: []string{"a"}, Soak: "soon"} }},
		{"order.by", func(r *RolloutRequest) { r.Order = &Order{By: "random"} }},
		{"order.label", func(r *RolloutRequest) { r.Order = &Order{By: OrderByLabel} }},
		{"order.label", func(r *RolloutRequest) { r.Order = &Order{By: OrderSpread} }},
		{"maintenanceWindow.cron", func(r *RolloutRequest) {
			r.MaintenanceWindow = &MaintenanceWindow{Cron: "every minute", Duration: "1h"}
		}},
	} {
		req := base()
		tc.edit(&req)
		err := invalid(req)
		require.Error(t, err, tc.field)
		require.Contains(t, err.Error(), tc.field+":", tc.field)
	}
	req := base()
	req.MaintenanceWindow = &MaintenanceWindow{Days: []string{"sat", "Sunday"}, Start: "22:00", Duration: "4h", TimeZone: "Europe/Berlin"}
	req.Topology = &Topology{Key: "topology.kubernetes.io/zone", MaxPerDomain: 1}
	req.Canary = &Canary{Nodes: []string{"a"}, Soak: "10m", Approval: true}
	req.Order = &Order{By: OrderSpread}
	err := invalid(req)
	require.NoError(t, err)

	var decoded RolloutRequest
	require.NoError(t, decoded.UnmarshalJSON([]byte(`{"name":"x","nodes":["a"],"jobTemplate":"t","topology":{"key":"k","maxPerDomian":1}}`)))
	err = invalid(decoded)
	require.ErrorContains(t, err, "topology.maxPerDomian")
}

// A cron window that can never open is refused when the request is checked (the starter's
// validate runs the same check offline): @every has no fixed opening (each reading starts it
// anew from that instant), and 30 February never comes.
func TestCronWindowThatNeverOpensIsRefused(t *testing.T) {
	for _, expr := range []string{"@every 1h", "0 0 30 2 *", "0 0 31 4 *"} {
		req := RolloutRequest{Name: "w", Nodes: []string{"a"}, JobTemplate: "t",
			MaintenanceWindow: &MaintenanceWindow{Cron: expr, Duration: "1h"}}
		err := invalid(req)
		require.ErrorContains(t, err, "maintenanceWindow.cron:", expr)
	}
	for _, expr := range []string{"@daily", "0 22 * * 6", "0 0 29 2 *"} {
		req := RolloutRequest{Name: "w", Nodes: []string{"a"}, JobTemplate: "t",
			MaintenanceWindow: &MaintenanceWindow{Cron: expr, Duration: "1h"}}
		err := invalid(req)
		require.NoError(t, err, expr)
	}
}

// A Job pasted into the UI as an object is the same template as its YAML text.
func TestJobTemplateAsAJSONObjectIsAccepted(t *testing.T) {
	var req RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":{"apiVersion":"batch/v1","kind":"Job"}}`), &req))
	err := invalid(req)
	require.NoError(t, err)
	require.JSONEq(t, `{"apiVersion":"batch/v1","kind":"Job"}`, req.JobTemplate)
}

// invalid is the request's problems as one error, as the Rollout workflow lists them in its
// InvalidRequest; nil for a valid request.
func invalid(r RolloutRequest) error {
	var errs []error
	for _, p := range r.Problems() {
		errs = append(errs, p)
	}
	return errors.Join(errs...)
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorContains(t, err, field)
}

// A start request cannot smuggle in continue-as-new state (it skipped the template check and
// the parallelism ceiling), and unknown fields are named at any depth.
func TestCallerCannotSetInternalStateAndUnknownFieldsAreNamed(t *testing.T) {
	for _, tc := range []struct{ json, field string }{
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","progress":{"templateHash":"h","template":"hidden"}}`, "progress"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","batch":{"inital":1}}`, "batch.inital"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","owner":{"apiVersion":"v1","kind":"K","name":"n","uid":"u","controller":true}}`, "owner.controller"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplateRef":{"nmae":"cm"}}`, "jobTemplateRef.nmae"},
		{`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelism":0}`, "parallelism"},
	} {
		var req RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(tc.json), &req))
		err := invalid(req)
		requireInvalid(t, err, tc.field)
	}
}

// Every field of the wrong type is named at once (encoding/json stops at the first), and the
// zero value it leaves behind brings no second, misleading problem.
func TestEveryMistypedFieldIsNamedOnce(t *testing.T) {
	req := decodeRequest(t, `{"parallelism": "5", "maintenance": {"health": {"conditions": {"Ready": true}}}}`)
	var got []string
	for _, p := range req.Problems() {
		got = append(got, p.Field+": "+p.Problem)
	}
	require.Equal(t, []string{
		"maintenance.health.conditions.Ready: must be a JSON string, got bool",
		"parallelism: must be a JSON integer, got string",
	}, got)
}
