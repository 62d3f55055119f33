package workflows

import (
	"errors"
	"fmt"
	"strconv"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Undo in the workflows: a rollout with undoOf runs its Job (the undone rollout's undo
// template) on the nodes PlanUndo read from the undone rollout's markers, in the order it
// gave (order given); a node with maintenance.onFailure undo runs the undo template when its
// Job or health gate failed, before it is released. Both paths are taken only by requests
// with these fields, which no history recorded before them has, so they need no version.

// prepareUndo stores the undo template of a request with maintenance.onFailure undo, and
// plans an undo's nodes (undoOf without nodes: the first run; later runs carry the list in
// the request).
func (r *rollout) prepareUndo(ctx workflow.Context, store bool) error {
	var a *activities.Activities
	if m := r.settings.Maintenance; m != nil && m.UndoOnFailure && r.req.Undo != nil {
		var prepared activities.PreparedTemplate
		err := workflow.ExecuteActivity(withAPIActivity(ctx, "load and check the undo Job template"), a.PrepareTemplate, activities.PrepareTemplateInput{
			Namespace:    r.settings.Namespace,
			Template:     r.req.Undo.JobTemplate,
			TemplateRef:  r.req.Undo.JobTemplateRef,
			Store:        store,
			NodeSelector: r.req.NodeSelector,
			Parallelism:  r.settings.Parallelism,
			Cordon:       m.Cordon,
			Drain:        m.Drain,
		}).Get(ctx, &prepared)
		if err != nil {
			return undoTemplateError(asWorkflowError(err))
		}
		r.progress.UndoTemplateHash = prepared.Hash
		// The worker lets this rollout's nodes run the undo template too (activities.Lineage).
		if err := workflow.UpsertMemo(ctx, map[string]any{"undoTemplateHash": prepared.Hash}); err != nil {
			return err
		}
	}
	if o := r.req.UndoOf; o != nil && len(r.req.Nodes) == 0 {
		var plan []api.UndoNode
		err := workflow.ExecuteActivity(withAPIActivity(ctx, "read the nodes rollout "+o.Rollout+" changed"), a.PlanUndo,
			activities.UndoPlanInput{Rollout: o.Rollout, To: o.To}).Get(ctx, &plan)
		if err != nil {
			return asWorkflowError(err)
		}
		r.undoPlan = map[string]*api.UndoNode{}
		for i := range plan {
			r.req.Nodes = append(r.req.Nodes, plan[i].Node)
			r.undoPlan[plan[i].Node] = &plan[i]
		}
	}
	return nil
}

// undoTemplateError says that it is the undo template a problem was found in.
func undoTemplateError(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return temporal.NewNonRetryableApplicationError("undo: "+appErr.Message(), appErr.Type(), nil)
	}
	return err
}

// listRest fetches the pages after page until the last: nodes in the given order start out
// of name order, so the whole list is queued at once (at most api.MaxExplicitNodes).
func (r *rollout) listRest(ctx workflow.Context, page activities.ListNodesResult) (activities.ListNodesResult, error) {
	for page.More {
		next, err := r.listPage(ctx, page.Next, page.Continue)
		if err != nil {
			return activities.ListNodesResult{}, err
		}
		appendSelected(&page, next)
		page.Missing = append(page.Missing, next.Missing...)
		page.Unselected = append(page.Unselected, next.Unselected...)
		page.Continue, page.Marks = next.Continue, next.Marks
	}
	return page, nil
}

// givenRank is the node's place in the request's nodes list, as a rank pacer.order sorts
// numerically.
func (r *rollout) givenRank(node string) string {
	if r.givenPlace == nil {
		r.givenPlace = make(map[string]int, len(r.req.Nodes))
		for i, n := range r.req.Nodes {
			if _, seen := r.givenPlace[n]; !seen {
				r.givenPlace[n] = i
			}
		}
	}
	return strconv.Itoa(r.givenPlace[node])
}

// undoes says whether the node's failure is one maintenance.onFailure undo takes back: its
// Job, health gate or check Job failed (or timed out), and no abort came. A node that did not
// come back from its reboot is not: an undo Job could not run on it.
func (n *nodeSteps) undoes(ctx workflow.Context, err error, result api.NodeResult) bool {
	if n.in.Maintenance == nil || !n.in.Maintenance.UndoOnFailure || n.in.UndoTemplateHash == "" || isCancel(ctx, err) {
		return false
	}
	switch result.Outcome {
	case api.OutcomeFailed, api.OutcomeTimedOut, api.OutcomeUnhealthy, api.OutcomeCheckFailed:
		return true
	}
	return false
}

// undo runs the undo Job on a node whose rollout failed (result, failed), with the node
// still cordoned: the Job as the undo rollout's (its own name, marker and Event), its success
// turning the rollout's marker to undone. The node is uncordoned once the undo succeeded, and
// stays cordoned when it did not. The node's outcome stays what failed, with undone or
// undoFailed beside it.
func (n *nodeSteps) undo(ctx workflow.Context, result api.NodeResult, failed error) (api.NodeResult, error) {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` %s: running the undo Job", n.in.Node, result.Outcome))
	u := nodeSteps{in: n.in, oneStep: n.oneStep}
	u.in.Rollout = api.UndoName(n.in.Rollout)
	u.in.Template = ""
	u.in.TemplateHash = n.in.UndoTemplateHash
	u.in.Maintenance = nil
	u.in.WatchSeconds = 0
	u.in.UndoOf = n.in.Rollout
	undone, err := u.runJob(ctx)
	result.UndoJob = undone.Job
	switch {
	case err == nil:
		result.Undone = true
		n.in.Maintenance = withUncordon(n.in.Maintenance)
		n.leave(ctx)
	case isCancel(ctx, err):
		result.UndoFailed = string(api.OutcomeAborted)
	default:
		result.UndoFailed = string(undone.Outcome)
		if undone.Reason != "" {
			result.UndoFailed += ": " + undone.Reason
		}
	}
	if !result.Undone && n.mayHaveCordoned {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` is kept cordoned: its undo Job did not succeed (%s)", n.in.Node, result.UndoFailed))
	}
	if failed == nil { // the node did not fail after all: nothing else to say
		return result, nil
	}
	return result, nodeFailed(n.in.Node, result)
}

// withUncordon is the maintenance section with onFailure uncordon, for the release of an
// undone node.
func withUncordon(m *api.NodeMaintenance) *api.NodeMaintenance {
	c := *m
	c.UncordonOnFailure = true
	return &c
}

// undoNote is what the node's error says of its undo.
func undoNote(result api.NodeResult) string {
	switch {
	case result.Undone:
		return fmt.Sprintf("; undone (Job %s)", result.UndoJob)
	case result.UndoFailed != "":
		return "; the undo failed too (" + result.UndoFailed + "): the node stays cordoned"
	}
	return ""
}
