//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// jobsByCreation is the nodes of the rollout's Jobs, oldest Job first. Creation times count in
// seconds, so the rollouts here run one node at a time, each for longer than a second.
func jobsByCreation(t *testing.T, f *Fleet, rollout string) []string {
	t.Helper()
	var jobs []batchv1.Job
	for _, js := range f.Jobs(t, rollout) {
		jobs = append(jobs, js...)
	}
	slices.SortFunc(jobs, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	var nodes []string
	for i, j := range jobs {
		if i > 0 {
			require.True(t, jobs[i-1].CreationTimestamp.Before(&j.CreationTimestamp), "Jobs %s and %s were created in the same second", jobs[i-1].Name, j.Name)
		}
		nodes = append(nodes, j.Annotations[jobspec.AnnotationNode])
	}
	return nodes
}

// TestUndoRunsTheUndoJobOnEveryNodeInReverseOrder: a rollout over four nodes, one at a time
// and continuing as new after every two, one node failing; once it ended, `starter undo`
// lists (dry run) and then runs the undo Job on all four: the failed node first, then the
// others in reverse order of completion, and each node's marker of the rollout says undone.
func TestUndoRunsTheUndoJobOnEveryNodeInReverseOrder(t *testing.T) {
	f := NewFleet(t, 4)
	bad := f.Nodes[1]
	req := f.Request("undo-order", 1500*time.Millisecond)
	req.JobTemplate = JobTemplate(1500*time.Millisecond, map[string]string{"noderollout.dev/fail-nodes": bad})
	req.Parallelism = 1
	req.MaxFailures = "1"
	req.ContinueAsNewAfter = 2
	req.Undo = &api.UndoTemplate{JobTemplate: JobTemplate(1500*time.Millisecond, nil)}
	res, _ := Result(t, Start(t, req))
	require.Equal(t, 3, res.Counts.Succeeded, "%+v", res.Counts)
	require.Equal(t, 1, res.Counts.Failed)
	require.Positive(t, res.ContinuedAsNew, "the rollout continued as new before it ended")

	ran := jobsByCreation(t, f, req.Name)
	require.ElementsMatch(t, f.Nodes, ran)
	want := []string{bad}
	for _, n := range slices.Backward(ran) {
		if n != bad {
			want = append(want, n)
		}
	}

	out, code := runStarter(t, "undo", req.Name, "--dry-run")
	require.Equal(t, 0, code, out)
	t.Logf("starter undo %s --dry-run:\n%s", req.Name, out)
	var listed []string
	for _, line := range strings.Split(out, "\n") {
		if fields := strings.Fields(line); len(fields) >= 2 && slices.Contains(f.Nodes, fields[1]) {
			listed = append(listed, fields[1])
		}
	}
	require.Equal(t, want, listed, out)
	require.Empty(t, f.Jobs(t, api.UndoName(req.Name)), "a dry run starts nothing")

	out, code = runStarter(t, "undo", req.Name, "--wait")
	require.Equal(t, 0, code, out)
	require.Equal(t, want, jobsByCreation(t, f, api.UndoName(req.Name)), "undo Jobs by creation")
	for node, marker := range f.Markers(t, req.Name) {
		_, outcome, ok := jobspec.ParseNodeMarker(marker)
		require.True(t, ok, node)
		require.Equal(t, string(api.OutcomeUndone), outcome, node)
	}

	// Nothing is left to undo: a second undo says so.
	out, code = runStarter(t, "undo", req.Name, "--dry-run")
	require.NotEqual(t, 0, code, out)
	require.Contains(t, out, "every node is undone already")
}

// TestOnFailureUndoRunsTheUndoJobOnAFailedNode: with maintenance.onFailure undo, a node whose
// Job failed runs the undo Job while cordoned and is uncordoned once it succeeded; a node whose
// undo fails too stays cordoned; each outcome says which; a node that succeeded runs no undo.
func TestOnFailureUndoRunsTheUndoJobOnAFailedNode(t *testing.T) {
	f := NewFleet(t, 3)
	undone, stuck, fine := f.Nodes[0], f.Nodes[1], f.Nodes[2]
	req := f.Request("on-failure-undo", time.Second)
	req.JobTemplate = JobTemplate(time.Second, map[string]string{"noderollout.dev/fail-nodes": undone + "," + stuck})
	req.MaxFailures = "2"
	req.Maintenance = &api.Maintenance{Cordon: true, OnFailure: api.OnFailureUndo}
	req.Undo = &api.UndoTemplate{JobTemplate: JobTemplate(time.Second, map[string]string{"noderollout.dev/fail-nodes": stuck})}
	res, _ := Result(t, Start(t, req))
	require.Equal(t, 1, res.Counts.Succeeded, "%+v", res.Counts)
	require.Equal(t, 2, res.Counts.Failed)

	byNode := map[string]api.NodeResult{}
	for _, r := range res.Failures {
		byNode[r.Node] = r
	}
	require.True(t, byNode[undone].Undone, "%+v", byNode[undone])
	require.NotEmpty(t, byNode[undone].UndoJob)
	require.False(t, byNode[stuck].Undone)
	require.Contains(t, byNode[stuck].UndoFailed, "failed")

	undoJobs := f.Jobs(t, api.UndoName(req.Name))
	require.Len(t, undoJobs[undone], 1, "the failed node ran its undo Job")
	require.Equal(t, byNode[undone].UndoJob, undoJobs[undone][0].Name)
	require.Len(t, undoJobs[stuck], 1)
	require.Empty(t, undoJobs[fine], "a node that succeeded runs no undo")

	unschedulable := func(node string) bool {
		n, err := stack.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		require.NoError(t, err)
		return n.Spec.Unschedulable
	}
	require.False(t, unschedulable(undone), "an undone node is released")
	require.True(t, unschedulable(stuck), "a node whose undo failed stays cordoned")
	require.False(t, unschedulable(fine))
	markers := f.Markers(t, req.Name)
	require.True(t, strings.HasSuffix(markers[undone], ":"+string(api.OutcomeUndone)), markers[undone])
	require.True(t, strings.HasSuffix(markers[stuck], ":failed"), markers[stuck])
}
