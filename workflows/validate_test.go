package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

func validRequest() api.RolloutRequest {
	return api.RolloutRequest{Name: "kata-deploy", Namespace: "kube-system", NodeSelector: "kata=true", JobTemplate: sampleTemplate}
}

func TestValidateAppliesDefaults(t *testing.T) {
	s, err := Validate(validRequest())
	require.NoError(t, err)
	require.Equal(t, api.DefaultParallelism, s.Parallelism)
	require.Equal(t, api.Batch{Initial: api.DefaultParallelism, Growth: api.GrowthFixed}, s.Batch)
	require.Equal(t, api.DefaultJobTimeout, s.JobTimeout)
	require.Equal(t, api.DefaultJobTTL, s.JobTTL)
	require.Equal(t, api.KeepFailed, s.KeepJobs)
	require.Equal(t, api.DefaultContinueAsNewAfter, s.ContinueAsNewAfter)
	require.Equal(t, api.FailureBudget{}, s.FailureBudget)
}

func TestEveryBadFieldIsNamed(t *testing.T) {
	many := make([]string, api.MaxExplicitNodes+1)
	for i := range many {
		many[i] = fmt.Sprintf("n%d", i)
	}
	cases := []struct {
		name  string
		edit  func(r *api.RolloutRequest)
		field string
	}{
		{"empty name", func(r *api.RolloutRequest) { r.Name = "" }, "name"},
		{"name not a DNS label", func(r *api.RolloutRequest) { r.Name = "Kata_Deploy" }, "name"},
		{"name too long", func(r *api.RolloutRequest) { r.Name = strings.Repeat("a", 64) }, "name"},
		{"bad namespace", func(r *api.RolloutRequest) { r.Namespace = "Kube System" }, "namespace"},
		{"both node choices", func(r *api.RolloutRequest) { r.Nodes = []string{"a"} }, "nodes"},
		{"no node choice", func(r *api.RolloutRequest) { r.NodeSelector = "" }, "nodes"},
		{"bad selector", func(r *api.RolloutRequest) { r.NodeSelector = "kata in (" }, "nodeSelector"},
		{"bad field selector", func(r *api.RolloutRequest) { r.FieldSelector = "metadata.name=!=x" }, "fieldSelector"},
		{"node not a DNS subdomain", func(r *api.RolloutRequest) { r.NodeSelector, r.Nodes = "", []string{"ok", "Not_OK"} }, "nodes[1]"},
		{"too many explicit nodes", func(r *api.RolloutRequest) { r.NodeSelector, r.Nodes = "", many }, "select them with nodeSelector"},
		{"zero parallelism is the default, negative is not", func(r *api.RolloutRequest) { r.Parallelism = -1 }, "parallelism"},
		{"parallelism too big", func(r *api.RolloutRequest) { r.Parallelism = api.MaxParallelism + 1 }, "parallelism"},
		{"budget over 100%", func(r *api.RolloutRequest) { r.MaxFailures = "150%" }, "maxFailures"},
		{"negative budget", func(r *api.RolloutRequest) { r.MaxFailures = "-1" }, "maxFailures"},
		{"budget not a number", func(r *api.RolloutRequest) { r.MaxFailures = "some" }, "maxFailures"},
		{"no template", func(r *api.RolloutRequest) { r.JobTemplate = "" }, "jobTemplate"},
		{"both templates", func(r *api.RolloutRequest) { r.JobTemplateRef = &api.TemplateRef{Name: "cm"} }, "jobTemplate"},
		{"ref without name", func(r *api.RolloutRequest) { r.JobTemplate, r.JobTemplateRef = "", &api.TemplateRef{} }, "jobTemplateRef.name"},
		{"template too big", func(r *api.RolloutRequest) { r.JobTemplate = strings.Repeat("#", 300*1024) }, "jobTemplate"},
		{"batch initial zero", func(r *api.RolloutRequest) { r.Batch = &api.Batch{Initial: 0} }, "batch.initial"},
		{"batch initial over parallelism", func(r *api.RolloutRequest) { r.Batch = &api.Batch{Initial: 11} }, "batch.initial"},
		{"unknown growth", func(r *api.RolloutRequest) { r.Batch = &api.Batch{Initial: 1, Growth: "fast"} }, "batch.growth"},
		{"exponential step 1", func(r *api.RolloutRequest) { r.Batch = &api.Batch{Initial: 1, Growth: api.GrowthExponential, Step: 1} }, "batch.step"},
		{"bad delay", func(r *api.RolloutRequest) { r.DelayBetweenNodes = "soon" }, "delayBetweenNodes"},
		{"negative timeout", func(r *api.RolloutRequest) { r.JobTimeout = "-5m" }, "jobTimeout"},
		{"timeout too long", func(r *api.RolloutRequest) { r.JobTimeout = "9000h" }, "jobTimeout"},
		{"bad ttl", func(r *api.RolloutRequest) { r.JobTTL = "1 day" }, "jobTTL"},
		{"bad keepJobs", func(r *api.RolloutRequest) { r.KeepJobs = "sometimes" }, "keepJobs"},
		{"owner without uid", func(r *api.RolloutRequest) {
			r.Owner = &api.OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "x"}
		}, "owner"},
		{"negative continue-as-new", func(r *api.RolloutRequest) { r.ContinueAsNewAfter = -1 }, "continueAsNewAfter"},
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
	require.Equal(t, api.ErrInvalidRequest, appErr.Type())
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
		var req api.RolloutRequest
		require.NoError(t, json.Unmarshal([]byte(tc.json), &req), "decoding never fails, so the workflow task never loops")
		_, err := Validate(req)
		requireInvalid(t, err, tc.field)
	}
}

// A request typed into the Temporal UI with a misspelt nested field fails naming the field
// by its path and the field it was probably meant to be, as the starter does.
func TestRolloutNamesAMisspeltNestedFieldWithAHint(t *testing.T) {
	env, _ := nodeEnv(t)
	env.RegisterWorkflow(Rollout)
	env.ExecuteWorkflow(api.RolloutWorkflow, json.RawMessage(
		`{"name":"demo","nodes":["n1"],"jobTemplate":"t","batch":{"inital":1},"zzz":1}`))
	err := env.GetWorkflowError()
	requireInvalid(t, err, `batch.inital: unknown field; did you mean "batch.initial"?`)
	requireInvalid(t, err, `zzz: unknown field: remove it`)
}
