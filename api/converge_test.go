package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each bad use of mode and onDeselect is named by its field, with the fix.
func TestConvergeProblemsNameTheFieldAndTheFix(t *testing.T) {
	base := func() RolloutRequest {
		return RolloutRequest{Name: "drivers", NodeSelector: "pool=gpu", JobTemplate: "t", Mode: ModeConverge}
	}
	require.Empty(t, base().Problems())
	withDeselect := base()
	withDeselect.OnDeselect = &DeselectJob{JobTemplateRef: &TemplateRef{Name: "uninstall"}}
	require.Empty(t, withDeselect.Problems())

	for name, c := range map[string]struct {
		edit       func(*RolloutRequest)
		field, fix string
	}{
		"named nodes":         {func(r *RolloutRequest) { r.NodeSelector, r.Nodes = "", []string{"a"} }, "mode", "select the nodes with nodeSelector"},
		"field selector only": {func(r *RolloutRequest) { r.NodeSelector, r.FieldSelector = "", "metadata.name=a" }, "mode", "set nodeSelector"},
		"unknown mode":        {func(r *RolloutRequest) { r.Mode = "forever" }, "mode", "use once (the default) or converge"},
		"dry run":             {func(r *RolloutRequest) { r.DryRun = true }, "mode", "omit mode for a dry run"},
		"onDeselect without converge": {func(r *RolloutRequest) {
			r.Mode, r.OnDeselect = "", &DeselectJob{JobTemplate: "u"}
		}, "onDeselect", "set mode: converge"},
		"onDeselect empty": {func(r *RolloutRequest) { r.OnDeselect = &DeselectJob{} }, "onDeselect", "set onDeselect.jobTemplate"},
		"onDeselect both": {func(r *RolloutRequest) {
			r.OnDeselect = &DeselectJob{JobTemplate: "u", JobTemplateRef: &TemplateRef{Name: "u"}}
		}, "onDeselect.jobTemplate", "not both"},
		"retry without converge": {func(r *RolloutRequest) { r.Mode, r.RetryFailedAfter = "", "1h" }, "retryFailedAfter", "set mode: converge"},
		"retry too soon":         {func(r *RolloutRequest) { r.RetryFailedAfter = "10s" }, "retryFailedAfter", "write it like"},
		"onDeselect ref name":    {func(r *RolloutRequest) { r.OnDeselect = &DeselectJob{JobTemplateRef: &TemplateRef{}} }, "onDeselect.jobTemplateRef.name", "name the ConfigMap"},
	} {
		req := base()
		c.edit(&req)
		ps := req.Problems()
		require.NotEmpty(t, ps, name)
		found := false
		for _, p := range ps {
			if p.Field == c.field && strings.Contains(p.Error(), c.fix) {
				found = true
			}
		}
		require.True(t, found, "%s: want a problem on %s saying %q, got %v", name, c.field, c.fix, ps)
	}
}

// mode and onDeselect decode from a request file's JSON, and a misspelt field inside
// onDeselect is refused by its path.
func TestConvergeFieldsDecode(t *testing.T) {
	var req RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"d","nodeSelector":"pool=gpu","jobTemplate":"t","mode":"converge","onDeselect":{"jobTemplate":"u"}}`), &req))
	require.True(t, req.Converging())
	require.Equal(t, "u", req.OnDeselect.JobTemplate)
	require.Empty(t, req.Problems())
	require.NoError(t, json.Unmarshal([]byte(`{"name":"d","nodeSelector":"pool=gpu","jobTemplate":"t","mode":"converge","onDeselect":{"jobTemplat":"u"}}`), &req))
	var msgs []string
	for _, p := range req.Problems() {
		msgs = append(msgs, p.Error())
	}
	require.Contains(t, strings.Join(msgs, "\n"), "onDeselect.jobTemplat")
}
