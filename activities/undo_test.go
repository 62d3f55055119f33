package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

const (
	hashV1 = "1111111111111111111111111111111111111111111111111111111111111111"
	hashV2 = "2222222222222222222222222222222222222222222222222222222222222222"
	hashV3 = "3333333333333333333333333333333333333333333333333333333333333333"
)

func planUndo(t *testing.T, a *Activities, in UndoPlanInput) ([]api.UndoNode, error) {
	t.Helper()
	return execute[[]api.UndoNode](t, a, a.PlanUndo, in)
}

func nodeAnnotations(t *testing.T, a *Activities, name string) map[string]string {
	t.Helper()
	node, err := a.Kube.CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return node.Annotations
}

// A marker from before the previous template was recorded ("<hash>:<outcome>" alone) is read,
// and the next template's marker names it as the previous one; a re-run of the same template
// keeps the recorded previous, and a third template pushes the second back.
func TestMarkerRecordsThePreviousTemplate(t *testing.T) {
	old := map[string]string{jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(hashV1, "succeeded")}
	_, a := newCluster(testNode("node-a", old))
	mark := func(hash string, outcome api.Outcome) map[string]string {
		in := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: hash, End: JobEnd{Outcome: outcome}, KeepJobs: api.KeepNever}
		_, err := finalize(t, a, in)
		require.NoError(t, err)
		return nodeAnnotations(t, a, "node-a")
	}

	got := mark(hashV2, api.OutcomeSucceeded)
	require.Equal(t, jobspec.NodeMarker(hashV2, "succeeded"), got[jobspec.NodeMarkerKey("kata")])
	require.Equal(t, hashV1, got[jobspec.NodePreviousKey("kata")], "the old marker's template is the previous one")
	require.Equal(t, t0.UTC().Format(time.RFC3339Nano), got[jobspec.NodeFinishedKey("kata")])

	got = mark(hashV2, api.OutcomeFailed)
	require.Equal(t, hashV1, got[jobspec.NodePreviousKey("kata")], "a re-run of the same template keeps the previous")

	got = mark(hashV3, api.OutcomeSucceeded)
	require.Equal(t, hashV2, got[jobspec.NodePreviousKey("kata")])
}

// A node's first marker has no previous template to record.
func TestFirstMarkerRecordsNoPreviousTemplate(t *testing.T) {
	_, a := newCluster(testNode("node-a", nil))
	_, err := finalize(t, a, FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: hashV1, End: JobEnd{Outcome: api.OutcomeSucceeded}})
	require.NoError(t, err)
	require.NotContains(t, nodeAnnotations(t, a, "node-a"), jobspec.NodePreviousKey("kata"))
}

// nodesOf is an undo plan's nodes, in order.
func nodesOf(plan []api.UndoNode) []string {
	var names []string
	for _, n := range plan {
		names = append(names, n.Node)
	}
	return names
}

func at(minute int) string {
	return t0.Add(time.Duration(minute) * time.Minute).UTC().Format(time.RFC3339Nano)
}

func undoMarker(hash, outcome, previous, finished string) map[string]string {
	m := map[string]string{jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(hash, outcome)}
	if previous != "" {
		m[jobspec.NodePreviousKey("kata")] = previous
	}
	if finished != "" {
		m[jobspec.NodeFinishedKey("kata")] = finished
	}
	return m
}

// The undo goes over the nodes the rollout changed: failed ones first (the likely broken
// ones), then the rest, each in reverse order of completion; a marker from before the
// completion time was recorded counts as the oldest. Skipped, gone and undone nodes, and
// nodes of other rollouts, are left out.
func TestPlanUndoOrdersFailedFirstThenReverseCompletion(t *testing.T) {
	_, a := newCluster(
		testNode("a", undoMarker(hashV2, "succeeded", hashV1, at(1))),
		testNode("b", undoMarker(hashV2, "succeeded", hashV1, at(3))),
		testNode("c", undoMarker(hashV2, "failed", hashV1, at(2))),
		testNode("d", undoMarker(hashV2, "succeeded", "", "")), // an old marker
		testNode("e", undoMarker(hashV2, "timedOut", hashV1, at(4))),
		testNode("f", undoMarker(hashV2, "skipped", hashV1, at(5))),
		testNode("g", undoMarker(hashV2, "undone", hashV1, at(6))),
		testNode("h", map[string]string{jobspec.NodeMarkerKey("other"): jobspec.NodeMarker(hashV2, "succeeded")}),
		testNode("i", undoMarker(hashV2, "succeeded", hashV1, at(2))),
	)
	plan, err := planUndo(t, a, UndoPlanInput{Rollout: "kata"})
	require.NoError(t, err)
	names := nodesOf(plan)
	require.Equal(t, []string{"e", "c", "b", "i", "a", "d"}, names)
	require.Equal(t, hashV1, plan[0].Previous)
	require.Empty(t, plan[5].Previous, "an old marker's previous template is unknown")
}

// --to keeps the nodes whose previous template it names (by a prefix of 8 or more
// characters too), and says which previous templates there are when it names none.
func TestPlanUndoToKeepsTheNodesOfThatPreviousTemplate(t *testing.T) {
	_, a := newCluster(
		testNode("a", undoMarker(hashV3, "succeeded", hashV1, at(1))),
		testNode("b", undoMarker(hashV3, "succeeded", hashV2, at(2))),
	)
	plan, err := planUndo(t, a, UndoPlanInput{Rollout: "kata", To: hashV2[:12]})
	require.NoError(t, err)
	require.Len(t, plan, 1)
	require.Equal(t, "b", plan[0].Node)

	_, err = planUndo(t, a, UndoPlanInput{Rollout: "kata", To: "4444444444"})
	appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Contains(t, appErr.Error(), "undoOf.to")
	require.Contains(t, appErr.Error(), hashV1+" (1 nodes)")

	_, err = planUndo(t, a, UndoPlanInput{Rollout: "nothing"})
	appErr = requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Contains(t, appErr.Error(), `rollout "nothing"`)
}

// An undo Job that succeeded turns the undone rollout's marker to undone (so a re-run of it
// covers the node again, and a second undo leaves it out); one that failed leaves it.
func TestUndoSuccessMarksTheUndoneRollout(t *testing.T) {
	_, a := newCluster(testNode("node-a", undoMarker(hashV2, "succeeded", hashV1, at(1))))
	in := FinalizeInput{Rollout: "undo-kata", Node: "node-a", TemplateHash: hashV3, UndoOf: "kata", End: JobEnd{Outcome: api.OutcomeFailed}}
	_, err := finalize(t, a, in)
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(hashV2, "succeeded"), nodeAnnotations(t, a, "node-a")[jobspec.NodeMarkerKey("kata")])

	in.End.Outcome = api.OutcomeSucceeded
	_, err = finalize(t, a, in)
	require.NoError(t, err)
	got := nodeAnnotations(t, a, "node-a")
	require.Equal(t, jobspec.NodeMarker(hashV2, "undone"), got[jobspec.NodeMarkerKey("kata")])
	require.Equal(t, hashV1, got[jobspec.NodePreviousKey("kata")], "what the node went back to stays recorded")
	require.Equal(t, jobspec.NodeMarker(hashV3, "succeeded"), got[jobspec.NodeMarkerKey("undo-kata")])
}

// RunJob, which finalizes a short Job itself, passes the undone rollout on to the finalize.
func TestRunJobOfAnUndoMarksTheUndoneRollout(t *testing.T) {
	req := testRequest("node-a")
	req.Rollout = "undo-kata"
	cs := fake.NewClientset(testNode("node-a", undoMarker(hashV2, "succeeded", hashV1, at(1))))
	stampCreatedJobs(cs)
	completeOnCreate(cs)
	a := startedActivities(t, cs)
	res := runJob(t, a, RunJobInput{Job: req, WatchSeconds: 60, TimeoutSeconds: 3600, KeepJobs: api.KeepNever, UndoOf: "kata"})
	require.True(t, res.Done, "%+v", res)
	require.Equal(t, jobspec.NodeMarker(hashV2, "undone"), nodeAnnotations(t, a, "node-a")[jobspec.NodeMarkerKey("kata")])
}

// A node whose Job succeeded and whose check Job failed, or which did not come back from its
// reboot, was changed by the rollout: the undo takes it, among the failed ones first. A
// blocked node was not touched.
func TestPlanUndoTakesNodesWhoseStepAfterTheJobFailed(t *testing.T) {
	_, a := newCluster(
		testNode("a", undoMarker(hashV2, "succeeded", hashV1, at(1))),
		testNode("checked", undoMarker(hashV2, "checkFailed", hashV1, at(2))),
		testNode("rebooted", undoMarker(hashV2, "rebootTimedOut", hashV1, at(3))),
		testNode("blocked", undoMarker(hashV2, "blocked", hashV1, at(4))),
	)
	plan, err := planUndo(t, a, UndoPlanInput{Rollout: "kata"})
	require.NoError(t, err)
	names := nodesOf(plan)
	require.Equal(t, []string{"rebooted", "checked", "a"}, names)
}
