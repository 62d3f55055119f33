package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func problemText(r RolloutRequest) string {
	var s []string
	for _, p := range r.Problems() {
		s = append(s, p.Error())
	}
	return strings.Join(s, "\n")
}

func TestUndoFieldsAreCheckedTogether(t *testing.T) {
	base := func() RolloutRequest {
		return RolloutRequest{Name: "kata", NodeSelector: "kata=true", JobTemplate: "t"}
	}
	r := base()
	r.Maintenance = &Maintenance{Cordon: true, OnFailure: OnFailureUndo}
	require.Contains(t, problemText(r), "maintenance.onFailure: is undo, but the request has no undo template; set undo.jobTemplate (or undo.jobTemplateRef)")
	r.Undo = &UndoTemplate{JobTemplate: "u"}
	require.Empty(t, r.Problems())
	require.True(t, r.Settings().Maintenance.UndoOnFailure)

	r.Undo = &UndoTemplate{}
	require.Contains(t, problemText(r), "undo: has no Job")
	r.Undo = &UndoTemplate{JobTemplate: "u", JobTemplateRef: &TemplateRef{Name: "cm"}}
	require.Contains(t, problemText(r), "undo.jobTemplate: is set together with undo.jobTemplateRef")

	u := RolloutRequest{Name: UndoName("kata"), JobTemplate: "u", UndoOf: &UndoOf{Rollout: "kata"}}
	require.Empty(t, u.Problems(), "an undo names no nodes: they come from the markers")
	require.Equal(t, OrderGiven, u.Settings().Pacing.Order)
	u.NodeSelector = "x=y"
	require.Contains(t, problemText(u), "undoOf: is set together with nodeSelector/fieldSelector")

	g := base()
	g.Order = &Order{By: OrderGiven}
	require.Contains(t, problemText(g), "order.by: is given, but the request names no nodes")
	g.NodeSelector, g.Nodes = "", []string{"b", "a"}
	require.Empty(t, g.Problems())
}

// undo.jobTemplate may be an object, as jobTemplate may; a misspelt field under undo is
// refused by its path.
func TestUndoDecodes(t *testing.T) {
	var r RolloutRequest
	require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","undo":{"jobTemplate":{"kind":"Job"}}}`), &r))
	require.Empty(t, r.Problems())
	require.JSONEq(t, `{"kind":"Job"}`, r.Undo.JobTemplate)
	require.NoError(t, json.Unmarshal([]byte(`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","undo":{"jobTemplat":"x"}}`), &r))
	require.Contains(t, problemText(r), "undo.jobTemplat")
}

func TestUndoNameIsALabel(t *testing.T) {
	require.Equal(t, "undo-kata", UndoName("kata"))
	long := UndoName(strings.Repeat("a", 63))
	require.LessOrEqual(t, len(long), 63)
	require.NotEqual(t, long, UndoName(strings.Repeat("a", 62)+"b"))
}
