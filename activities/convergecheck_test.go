package activities

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// convergeNode is a node for the converge checks: in the pool or not, Ready or not, with the
// rollout "gpu"'s marker (or none).
func convergeNode(name string, pool, ready bool, marker string) *corev1.Node {
	n := testNode(name, nil)
	n.Labels = map[string]string{"zone": "z-" + name}
	if pool {
		n.Labels["pool"] = "gpu"
	}
	if marker != "" {
		n.Annotations = map[string]string{jobspec.NodeMarkerKey("gpu"): marker}
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}
	return n
}

// CheckNodes runs what is off the template (new, another template, aborted), leaves what is
// at it (failed included: a failure stands until a rerun), waits for Ready, and sends a node
// that left the selector after running the template to onDeselect once.
func TestCheckNodesSaysWhatAConvergingRolloutOwes(t *testing.T) {
	kube := fake.NewClientset(
		convergeNode("new", true, true, ""),
		convergeNode("done", true, true, "h:succeeded"),
		convergeNode("failed", true, true, "h:failed"),
		convergeNode("aborted", true, true, "h:aborted"),
		convergeNode("older", true, true, "old:succeeded"),
		convergeNode("notready", true, false, ""),
		convergeNode("left", false, true, "h:succeeded"),
		convergeNode("uninstalled", false, true, "d:succeeded"),
		convergeNode("stranger", false, true, ""),
	)
	a := &Activities{Kube: kube}
	in := CheckNodesInput{Rollout: "gpu", Selector: "pool=gpu", TemplateHash: "h", DeselectHash: "d", Labels: []string{"zone"},
		Names: []string{"new", "done", "failed", "aborted", "older", "notready", "left", "uninstalled", "stranger", "gone"}}
	res, err := a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"aborted", "new", "older"}, res.Run)
	require.Equal(t, []string{"left"}, res.Deselect)
	require.Equal(t, 6, res.Selected)
	require.Equal(t, 1, res.AtTemplate)
	require.Equal(t, "z-new", res.Labels["new"]["zone"])

	in.Names, in.Resync = nil, true
	resynced, err := a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, res.Run, resynced.Run, "a resync finds the same among every node")
	require.Equal(t, res.Deselect, resynced.Deselect)

	in.Resync, in.Names, in.Retry = false, []string{"new"}, []string{"failed", "done"}
	res, err = a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"failed", "new"}, res.Run, "a failed node due for its retry runs; a succeeded one does not")

	in.Retry = nil
	in.DeselectHash = ""
	res, err = a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Empty(t, res.Deselect, "without onDeselect a node that leaves is left alone")
}

// The Node watch signals only for events that change what a rollout owes a node: an added
// or re-created node, one that became Ready, joined or left the selector, or whose marker
// changed to one the rollout must act on; not a status heartbeat of a node at the template.
func TestNodeWatchSignalsOnlyForChangesThatMatter(t *testing.T) {
	r := convergingRollout{name: "gpu", hash: "h", deselectHash: "d"}
	var err error
	r.selector, err = labels.Parse("pool=gpu")
	require.NoError(t, err)
	r.fieldSelector = fields.Everything()
	fresh := convergeNode("n", true, true, "")
	done := convergeNode("n", true, true, "h:succeeded")
	notReady := convergeNode("n", true, false, "")
	left := convergeNode("n", false, true, "h:succeeded")
	reused := convergeNode("n", true, true, "")
	reused.UID = types.UID("another-machine")

	require.True(t, r.owes(nodeChange{new: fresh}), "added")
	require.True(t, r.owes(nodeChange{old: notReady, new: fresh}), "became Ready")
	require.False(t, r.owes(nodeChange{old: fresh, new: notReady}), "not Ready: nothing yet")
	require.False(t, r.owes(nodeChange{old: done, new: done}), "a heartbeat of a node at the template")
	require.False(t, r.owes(nodeChange{old: fresh, new: fresh}), "nothing it judges by changed")
	require.True(t, r.owes(nodeChange{old: done, new: reused}), "a new machine under the name, without the marker")
	require.True(t, r.owes(nodeChange{old: fresh, new: reused}), "a new machine under the name of one not yet run (the delete missed)")
	require.True(t, r.owes(nodeChange{old: done, new: left}), "left the selector: onDeselect")
	require.True(t, r.owes(nodeChange{old: done, new: convergeNode("n", true, true, "other:succeeded")}), "marker of another template")
	require.False(t, r.owes(nodeChange{old: left, new: convergeNode("n", false, true, "d:succeeded")}), "uninstalled")
}

// A batch of Node events gathers for Gather, and on until ListEvery has passed since the last
// list of converging rollouts: one list a second however many markers are written.
func TestNodeWatchListsConvergingRolloutsAtMostOnceEveryListEvery(t *testing.T) {
	w := &NodeWatch{Gather: 200 * time.Millisecond, ListEvery: time.Second}
	require.Equal(t, 200*time.Millisecond, w.gatherFor(t0), "no list yet")
	w.lastList = t0
	require.Equal(t, 900*time.Millisecond, w.gatherFor(t0.Add(100*time.Millisecond)))
	require.Equal(t, 200*time.Millisecond, w.gatherFor(t0.Add(900*time.Millisecond)), "at least Gather")
	require.Equal(t, 200*time.Millisecond, w.gatherFor(t0.Add(time.Minute)))
}

// A node the converging rollout owes a run is skipped, not run, while it carries a taint the
// Job's Pod does not tolerate, as the first pass's listing skips it; a taint the Pod
// tolerates, or taints: ignore (no check), lets it run.
func TestCheckNodesSkipsANodeWithAnUntoleratedTaint(t *testing.T) {
	tainted := convergeNode("tainted", true, true, "")
	tainted.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule}}
	tolerated := convergeNode("tolerated", true, true, "")
	tolerated.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	a := &Activities{Kube: fake.NewClientset(tainted, tolerated)}
	in := CheckNodesInput{Rollout: "gpu", Selector: "pool=gpu", TemplateHash: "h", Names: []string{"tainted", "tolerated"},
		TaintCheck: &api.TaintCheck{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}}}
	res, err := a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"tolerated"}, res.Run)
	require.Equal(t, map[string]string{"tainted": "dedicated=training:NoSchedule"}, res.Untolerated)

	in.Names, in.Resync = nil, true
	res, err = a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"tolerated"}, res.Run, "a resync skips it too")
	require.Contains(t, res.Untolerated, "tainted")

	in.TaintCheck = nil
	res, err = a.CheckNodes(context.Background(), in)
	require.NoError(t, err)
	require.Equal(t, []string{"tainted", "tolerated"}, res.Run, "taints: ignore")
	require.Empty(t, res.Untolerated)
}

// retryFailedAfter runs again a node whose Job failed, and one whose step around a succeeded
// Job failed (its check Job, its reboot) or whose blocking Pods kept it from starting.
func TestCheckNodesRetriesFailedStepsAndBlockedNodes(t *testing.T) {
	var nodes []runtime.Object
	var names []string
	for _, o := range []api.Outcome{api.OutcomeFailed, api.OutcomeCheckFailed, api.OutcomeRebootTimedOut, api.OutcomeBlocked, api.OutcomeSucceeded, api.OutcomeSkipped} {
		nodes = append(nodes, convergeNode(string(o), true, true, "h:"+string(o)))
		names = append(names, string(o))
	}
	a := &Activities{Kube: fake.NewClientset(nodes...)}
	res, err := a.CheckNodes(context.Background(), CheckNodesInput{Rollout: "gpu", Selector: "pool=gpu", TemplateHash: "h", Retry: names})
	require.NoError(t, err)
	require.Equal(t, []string{"blocked", "checkFailed", "failed", "rebootTimedOut"}, res.Run)
}

// A change of a node's taints is told to a converging rollout that owes the node a run: a
// lifted taint may let the Job's Pod on.
func TestNodeWatchSignalsWhenATaintIsLifted(t *testing.T) {
	r := convergingRollout{name: "gpu", hash: "h", selector: labels.Everything(), fieldSelector: fields.Everything()}
	tainted := convergeNode("n", true, true, "")
	tainted.Spec.Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
	lifted := convergeNode("n", true, true, "")
	require.True(t, mayMatter(tainted, lifted))
	require.True(t, r.owes(nodeChange{old: tainted, new: lifted}))
	require.False(t, mayMatter(tainted, tainted.DeepCopy()), "the same taints")
	retainted := tainted.DeepCopy()
	retainted.Spec.Taints[0].Effect = corev1.TaintEffectPreferNoSchedule
	require.True(t, r.owes(nodeChange{old: tainted, new: retainted}), "a taint's effect changed")
}
