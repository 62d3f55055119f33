package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/testjob"
)

var undoTemplate = "undo:\n  jobTemplate:\n" + testjob.YAML("    ", "c", "uninstall", "{{node}}")

// validate checks the undo fields offline: onFailure undo without undo names both fields and
// the fix, and the undo template is checked as the Job template is.
func TestValidateChecksUndoOffline(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\nmaintenance: {cordon: true, onFailure: undo}\n"+goodTemplate+undoTemplate)
	code, out, errOut := starter(t, "validate", "-f", good)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid")

	missing := writeFile(t, "missing.yaml", "name: kata\nnodeSelector: kata=true\nmaintenance: {cordon: true, onFailure: undo}\n"+goodTemplate)
	code, _, errOut = starter(t, "validate", "-f", missing)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "maintenance.onFailure: is undo, but the request has no undo template")
	require.Contains(t, errOut, "set undo.jobTemplate (or undo.jobTemplateRef)")

	badJob := writeFile(t, "bad.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate+
		strings.Replace(undoTemplate, "restartPolicy: Never", "restartPolicy: Always", 1))
	code, _, errOut = starter(t, "validate", "-f", badJob)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "undo: ")
	require.Contains(t, errOut, "restartPolicy")
}

// The undo of a rollout keeps its pacing and maintenance, runs its undo template, and reads
// its nodes from the markers (undoOf); an undo that fails is kept cordoned, not undone.
func TestUndoRequestKeepsPacingAndMaintenance(t *testing.T) {
	done := api.RolloutRequest{Name: "gpu-driver", Namespace: "ops", NodeSelector: "pool=gpu", JobTemplate: "t",
		Parallelism: 3, MaxFailures: "1", DelayBetweenNodes: "10s", JobTimeout: "5m",
		Topology: &api.Topology{Key: "zone", MaxPerDomain: 1},
		Canary:   &api.Canary{Nodes: []string{"a"}},
		Maintenance: &api.Maintenance{Cordon: true, Soak: "1m", OnFailure: api.OnFailureUndo,
			OnSuccess: &api.OnSuccess{Labels: map[string]string{"driver": "v2"}}},
		Taints: api.TaintsIgnore,
		Gates: &api.Gates{BlockingPods: &api.BlockingPodsGate{Selector: "app=training"},
			CheckJob: &api.CheckJobGate{JobTemplate: "check-t"}, Prometheus: &api.PrometheusGate{Query: "up == 0"}},
		Undo: &api.UndoTemplate{JobTemplate: "undo-t"}}
	req, err := undoRequest(done, "abcdef12")
	require.NoError(t, err)
	require.Equal(t, "undo-gpu-driver", req.Name)
	require.Equal(t, "undo-t", req.JobTemplate)
	require.Equal(t, &api.UndoOf{Rollout: "gpu-driver", To: "abcdef12"}, req.UndoOf)
	require.Empty(t, req.NodeSelector, "the nodes come from the markers")
	require.Nil(t, req.Canary)
	require.True(t, req.Rerun)
	require.Equal(t, 3, req.Parallelism)
	require.Equal(t, api.IntOrPercent("1"), req.MaxFailures)
	require.Equal(t, "10s", req.DelayBetweenNodes)
	require.Equal(t, done.Topology, req.Topology)
	require.Equal(t, api.OnFailureKeepCordoned, req.Maintenance.OnFailure)
	require.Equal(t, "1m", req.Maintenance.Soak)
	require.Equal(t, api.OnFailureUndo, done.Maintenance.OnFailure, "the done request is not changed")
	require.Nil(t, req.Maintenance.OnSuccess, "an undone node is not labelled as the rollout's success")
	require.NotNil(t, done.Maintenance.OnSuccess)
	require.Equal(t, api.TaintsIgnore, req.Taints, "the undo reaches the tainted nodes the rollout reached")
	require.Equal(t, &api.Gates{BlockingPods: done.Gates.BlockingPods}, req.Gates, "blocking Pods still hold a node; the check Job and metric gate were the rollout's")

	done.Undo = nil
	_, err = undoRequest(done, "")
	require.ErrorContains(t, err, "rollout gpu-driver has no undo template")
}

// A failed node's line says whether its undo ran.
func TestFailedNodesSayWhetherTheyWereUndone(t *testing.T) {
	var b strings.Builder
	printNodes(&b, "FAILED NODES", []api.NodeResult{
		{Node: "a", Outcome: api.OutcomeFailed, Undone: true, UndoJob: "undo-a-x"},
		{Node: "b", Outcome: api.OutcomeFailed, UndoFailed: "timedOut: JobTimeout"},
	})
	require.Contains(t, b.String(), "undone (Job undo-a-x)")
	require.Contains(t, b.String(), "undo failed (timedOut: JobTimeout), kept cordoned")
}

// The dry run says what each node goes back to: a template, none (its first), or unknown (a
// marker from before previous templates were recorded).
func TestUndoDryRunSaysWhatEachNodeGoesBackTo(t *testing.T) {
	req := api.RolloutRequest{Name: "undo-kata", UndoOf: &api.UndoOf{Rollout: "kata"}}
	at := time.Date(2026, 12, 2, 23, 0, 0, 0, time.UTC)
	res := api.RolloutResult{Planned: []api.PlannedNode{
		{Node: "a", Undo: &api.UndoNode{Outcome: api.OutcomeFailed, Template: strings.Repeat("2", 64), Previous: strings.Repeat("1", 64), FinishedAt: at}},
		{Node: "b", Undo: &api.UndoNode{Outcome: api.OutcomeSucceeded, Template: strings.Repeat("2", 64), FinishedAt: at}},
		{Node: "c", Undo: &api.UndoNode{Outcome: api.OutcomeSucceeded, Template: strings.Repeat("2", 64)}},
	}}
	var b strings.Builder
	require.NoError(t, printUndoDryRun(&b, req, res))
	lines := strings.Split(b.String(), "\n")
	require.Regexp(t, `^1\s+a\s+failed\s+222222222222\s+111111111111$`, lines[2])
	require.Contains(t, lines[3], "(none: the node's first template of this rollout)")
	require.Contains(t, lines[4], "(unknown: marker written before previous templates were recorded)")
}
