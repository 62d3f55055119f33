package activities

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// markerAnnotations are the annotations FinalizeJob writes on node: the rollout's marker,
// beside it the template the node held before (undo's "goes back to") and when it was
// written (undo's order), who asked and which run wrote it; and, for a succeeded undo Job,
// the undone rollout's marker turned to undone.
func (a *Activities) markerAnnotations(node *corev1.Node, in FinalizeInput) map[string]string {
	key := jobspec.NodeMarkerKey(in.Rollout)
	annotations := map[string]string{
		key:                                 jobspec.NodeMarker(in.TemplateHash, string(in.End.Outcome)),
		jobspec.NodeFinishedKey(in.Rollout): a.Now().UTC().Format(time.RFC3339Nano),
	}
	previousKey := jobspec.NodePreviousKey(in.Rollout)
	if prev := jobspec.PreviousTemplate(node.Annotations[key], node.Annotations[previousKey], in.TemplateHash); prev != "" {
		annotations[previousKey] = prev
	}
	if in.Requester != "" {
		annotations[NodeRequesterKey(in.Rollout)] = in.Requester
	}
	if run := finalizingRun(in); run != "" {
		annotations[jobspec.NodeRunKey(in.Rollout)] = run
	}
	if in.UndoOf != "" && in.End.Outcome == api.OutcomeSucceeded {
		undone := jobspec.NodeMarkerKey(in.UndoOf)
		if hash, _, ok := jobspec.ParseNodeMarker(node.Annotations[undone]); ok {
			annotations[undone] = jobspec.NodeMarker(hash, string(api.OutcomeUndone))
		}
	}
	return annotations
}

// changedOutcomes are the marker outcomes of nodes whose Job ran, in whole or in part: the
// nodes an undo goes back over (a node whose check Job failed or that did not come back from
// its reboot ran the Job to its success). A node skipped, gone, blocked, never drained or
// already undone holds nothing of the rollout's template.
var changedOutcomes = map[api.Outcome]bool{
	api.OutcomeSucceeded: true, api.OutcomeFailed: true, api.OutcomeTimedOut: true,
	api.OutcomeUnhealthy: true, api.OutcomeAborted: true,
	api.OutcomeCheckFailed: true, api.OutcomeRebootTimedOut: true,
}

// UndoPlanInput names the rollout to undo and, optionally, the previous template to keep.
type UndoPlanInput struct {
	Rollout string `json:"rollout"`
	To      string `json:"to,omitempty"`
}

// PlanUndo reads, from the Nodes' markers, the nodes the rollout changed and the order to undo
// them in (orderUndo). The markers, not the rollout's history: they outlive the workflow's
// retention and its continue-as-new chain, hold each node's latest state whichever run or
// re-run of the name wrote it, and are what a re-run reads too. Nodes are read page by page.
func (a *Activities) PlanUndo(ctx context.Context, in UndoPlanInput) ([]api.UndoNode, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	if in.Rollout == "" {
		return nil, invalidRequest("undoOf.rollout", "is empty; name the rollout to undo")
	}
	var found []api.UndoNode
	opts := metav1.ListOptions{Limit: NodePageSize}
	for {
		page, err := a.Kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, kubeError(err, "list", "nodes")
		}
		for i := range page.Items {
			if n, ok := undoNode(&page.Items[i], in.Rollout); ok {
				found = append(found, n)
			}
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if len(found) == 0 {
		return nil, invalidRequest("undoOf.rollout", "no node carries a marker of rollout %q with outcome succeeded, failed, timedOut, unhealthy or aborted (annotation %s): it changed no node, or every node is undone already",
			in.Rollout, jobspec.NodeMarkerKey(in.Rollout))
	}
	plan := found
	if in.To != "" {
		plan = slices.DeleteFunc(slices.Clone(found), func(n api.UndoNode) bool { return !previousIs(n.Previous, in.To) })
		if len(plan) == 0 {
			return nil, invalidRequest("undoOf.to", "no node of rollout %q had template %s before it; their previous templates: %s",
				in.Rollout, in.To, previousSummary(found))
		}
	}
	if len(plan) > api.MaxExplicitNodes {
		return nil, invalidRequest("undoOf", "rollout %q changed %d nodes, more than the %d one undo runs on; restrict it with --to HASH",
			in.Rollout, len(plan), api.MaxExplicitNodes)
	}
	OrderUndo(plan)
	return plan, nil
}

// undoNode reads the rollout's marker on node: ok when the rollout changed it.
func undoNode(node *corev1.Node, rollout string) (api.UndoNode, bool) {
	hash, outcome, ok := jobspec.ParseNodeMarker(node.Annotations[jobspec.NodeMarkerKey(rollout)])
	if !ok || !changedOutcomes[api.Outcome(outcome)] {
		return api.UndoNode{}, false
	}
	n := api.UndoNode{Node: node.Name, Outcome: api.Outcome(outcome), Template: hash,
		Previous: node.Annotations[jobspec.NodePreviousKey(rollout)]}
	if t, err := time.Parse(time.RFC3339Nano, node.Annotations[jobspec.NodeFinishedKey(rollout)]); err == nil {
		n.FinishedAt = t
	}
	return n, true
}

// previousIs says whether the recorded previous template is the one --to names: the same
// hash, or one it begins with (at least 8 characters, as people copy them).
func previousIs(previous, to string) bool {
	if previous == "" {
		return false
	}
	return jobspec.SameTemplateHash(previous, to) || len(to) >= 8 && strings.HasPrefix(previous, to)
}

// previousSummary lists the previous templates of the nodes and how many had each.
func previousSummary(nodes []api.UndoNode) string {
	count := map[string]int{}
	for _, n := range nodes {
		count[cmp.Or(n.Previous, "(not recorded)")]++
	}
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s (%d nodes)", p, count[p]))
	}
	return strings.Join(parts, ", ")
}

// OrderUndo sorts the nodes to undo: those whose rollout did not succeed first (they are the
// likely broken ones), then the rest; each group in reverse order of completion (the node
// changed last goes back first). Markers without a completion time are the oldest; ties go
// by name.
func OrderUndo(nodes []api.UndoNode) {
	slices.SortStableFunc(nodes, func(x, y api.UndoNode) int {
		xok, yok := x.Outcome == api.OutcomeSucceeded, y.Outcome == api.OutcomeSucceeded
		if xok != yok {
			if yok {
				return -1
			}
			return 1
		}
		if c := y.FinishedAt.Compare(x.FinishedAt); c != 0 {
			return c
		}
		return cmp.Compare(x.Node, y.Node)
	})
}
