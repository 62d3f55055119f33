package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/noderollout/noderollout/activities"
)

func validRequest() RolloutRequest {
	return RolloutRequest{Name: "kata-deploy", Namespace: "kube-system", NodeSelector: "kata=true", JobTemplate: sampleTemplate}
}

func TestValidateAppliesDefaults(t *testing.T) {
	s, err := Validate(validRequest())
	require.NoError(t, err)
	require.Equal(t, DefaultParallelism, s.parallelism)
	require.Equal(t, Batch{Initial: DefaultParallelism, Growth: GrowthFixed}, s.batch)
	require.Equal(t, DefaultJobTimeout, s.jobTimeout)
	require.Equal(t, DefaultJobTTL, s.jobTTL)
	require.Equal(t, activities.KeepFailed, s.keepJobs)
	require.Equal(t, DefaultContinueAsNewAfter, s.continueAsNewAfter)
	require.Equal(t, budget{}, s.failureBudget)
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
		{"both templates", func(r *RolloutRequest) { r.JobTemplateRef = &activities.TemplateRef{Name: "cm"} }, "jobTemplate"},
		{"ref without name", func(r *RolloutRequest) { r.JobTemplate, r.JobTemplateRef = "", &activities.TemplateRef{} }, "jobTemplateRef.name"},
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
			r.Owner = &activities.OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}
		}, "owner"},
		{"negative continue-as-new", func(r *RolloutRequest) { r.ContinueAsNewAfter = -1 }, "continueAsNewAfter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := validRequest()
			tc.edit(&req)
			_, err := Validate(req)
			requireInvalid(t, err, tc.field)
		})
	}
}

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want InvalidRequest naming %q, got %v", field, err)
	require.Equal(t, activities.ErrInvalidRequest, appErr.Type())
	require.True(t, appErr.NonRetryable())
	require.Contains(t, appErr.Message(), field)
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
		_, err := Validate(req)
		requireInvalid(t, err, tc.field)
	}
}

func TestMaxFailuresTakesNumbersAndStrings(t *testing.T) {
	for raw, want := range map[string]budget{`3`: {count: 3}, `"3"`: {count: 3}, `"10%"`: {percent: 10, isShare: true}, `"0"`: {}} {
		var req RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","maxFailures":`+raw+`}`), &req))
		s, err := Validate(req)
		require.NoError(t, err, raw)
		require.Equal(t, want, s.failureBudget, raw)
	}
}

func TestBudgetShareOfSelected(t *testing.T) {
	b := budget{percent: 10, isShare: true}
	require.True(t, b.allows(10, 100))
	require.False(t, b.allows(11, 100))
	require.True(t, budget{count: 2}.allows(2, 5))
	require.False(t, budget{count: 2}.allows(3, 5))
}

// FuzzValidate feeds arbitrary requests (as JSON, the way they arrive) to validation: it must
// never panic, and whatever it accepts must really be valid.
func FuzzValidate(f *testing.F) {
	seed, _ := json.Marshal(validRequest())
	f.Add(string(seed))
	f.Add(`{"name":"x","nodes":["a","a"],"jobTemplate":"t","maxFailures":"100%","batch":{"initial":1,"growth":"linear"}}`)
	f.Add(`{"name":"","nodes":[],"parallelism":-5,"jobTimeout":"1ns"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, input string) {
		var req RolloutRequest
		if err := json.Unmarshal([]byte(input), &req); err != nil {
			return // not JSON at all: the Temporal data converter rejects it before the workflow
		}
		s, err := Validate(req)
		if err != nil {
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != activities.ErrInvalidRequest {
				t.Fatalf("rejection is not InvalidRequest: %v", err)
			}
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
		if s.parallelism < 1 || s.parallelism > MaxParallelism || s.batch.Initial < 1 || s.batch.Initial > s.parallelism {
			t.Fatalf("accepted parallelism %d window %d", s.parallelism, s.batch.Initial)
		}
		if s.jobTimeout < time.Second || s.jobTimeout > MaxJobTimeout || s.jobTTL < 0 || s.delayBetweenNodes < 0 {
			t.Fatalf("accepted durations %v %v %v", s.jobTimeout, s.jobTTL, s.delayBetweenNodes)
		}
		if s.failureBudget.count < 0 || s.failureBudget.percent < 0 || s.failureBudget.percent > 100 {
			t.Fatalf("accepted budget %+v", s.failureBudget)
		}
		switch s.keepJobs {
		case activities.KeepNever, activities.KeepFailed, activities.KeepAlways:
		default:
			t.Fatalf("accepted keepJobs %q", s.keepJobs)
		}
		if len(req.decodeProblems) > 0 {
			t.Fatalf("accepted despite %v", req.decodeProblems)
		}
	})
}
