package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The queue of nodes to launch: pages of listed nodes, in name order or (pacing) in the
// requested order with each node's domain, and the canaries listed first.

// queuedNode is a listed node not yet handled, in name order.
type queuedNode struct {
	name   string
	skip   string // "", "done", "missing" or api.SkipUntoleratedTaint
	reason string // more of the skip: the untolerated taint
	domain string // value of topology.key (pacing only)
	rank   string // value of order.label (pacing only)
}

// takeQueued removes and returns the queue's node at index at. The first node, which an
// unpaced rollout always takes, costs only a move of the slice's start: copying the rest of a
// page for each start made every page's admissions quadratic in its length.
func (r *rollout) takeQueued(at int) queuedNode {
	next := r.queue[at]
	if at == 0 {
		r.queue = r.queue[1:]
	} else {
		r.queue = slices.Delete(r.queue, at, at+1)
	}
	return next
}

// recordSkip records a listed node that is not run: done for this template, or missing.
func (r *rollout) recordSkip(ctx workflow.Context, n queuedNode) {
	if n.skip == "missing" {
		r.record(ctx, api.NodeResult{Node: n.name, Outcome: api.OutcomeNodeGone, Reason: "NodeNotFound",
			Message: "no Node named " + n.name})
		return
	}
	if n.skip == api.SkipUntoleratedTaint {
		r.record(ctx, untoleratedResult(n))
		return
	}
	r.record(ctx, api.NodeResult{Node: n.name, Outcome: api.OutcomeSkipped, Reason: "AlreadyDone"})
}

// listMore fetches the next slice of selected nodes after the cursor.
func (r *rollout) listMore(ctx workflow.Context) error {
	// The listing resumes from the API server's continue token, not from its first page: a
	// listing that re-read every page up to the cursor for each slice was quadratic in the
	// fleet. A cursor is always at or after the token's place (it only moves forward within a
	// slice, and a reset clears the position), and the activity leaves out the names up to it.
	// No change ID: the commands are the same; only the activity's input and the state carried
	// across continue-as-new gain a token, which a history from before has not (it lists from
	// the first page, as it did), and a worker from before ignores.
	page, err := r.listPage(ctx, r.progress.Cursor, r.progress.Listing.ResumeToken(r.progress.Cursor))
	if err == nil && r.settings.Pacing.Order == api.OrderGiven {
		page, err = r.listRest(ctx, page)
	}
	if err != nil {
		return err
	}
	r.progress.Listing = &api.ListingPosition{Marks: page.Marks, Next: page.Continue, End: page.Next}
	r.queue = r.queuePage(page)
	r.progress.ListingDone = !page.More
	if page.Total > r.progress.Selected {
		r.progress.Selected = page.Total
	}
	if handled := r.progress.Counts.Finished() + r.progress.Counts.Running + r.progress.Counts.Waiting + len(r.queue); handled > r.progress.Selected {
		r.progress.Selected = handled
	}
	r.showProgress(ctx)
	return nil
}

// listPage fetches one slice of the selected nodes after the cursor, from the API server's
// continue token when there is one.
func (r *rollout) listPage(ctx workflow.Context, after, continueToken string) (activities.ListNodesResult, error) {
	var a *activities.Activities
	var page activities.ListNodesResult
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "list nodes after "+quoteOrStart(after)), a.ListNodes, activities.ListNodesInput{
		Rollout:       r.req.Name,
		Names:         r.req.Nodes,
		Selector:      r.req.NodeSelector,
		FieldSelector: r.req.FieldSelector,
		TemplateHash:  r.progress.TemplateHash,
		Rerun:         r.req.Rerun,
		After:         after,
		Limit:         listPageSize,
		Labels:        r.settings.Pacing.LabelKeys(),
		TaintCheck:    r.progress.TaintCheck,
		Continue:      continueToken,
	}).Get(ctx, &page)
	if err != nil {
		return activities.ListNodesResult{}, asWorkflowError(err)
	}
	return page, nil
}

func quoteOrStart(cursor string) string {
	if cursor == "" {
		return "the start"
	}
	return cursor
}

// mergeListed puts one ListNodes slice back into a single name-ordered queue.
func mergeListed(page activities.ListNodesResult) []queuedNode {
	q := make([]queuedNode, 0, len(page.Nodes)+len(page.Done)+len(page.Missing)+len(page.Untolerated))
	for _, n := range page.Nodes {
		q = append(q, queuedNode{name: n})
	}
	for _, n := range page.Done {
		q = append(q, queuedNode{name: n, skip: "done"})
	}
	for _, n := range page.Missing {
		q = append(q, queuedNode{name: n, skip: "missing"})
	}
	for _, n := range workflow.DeterministicKeys(page.Untolerated) {
		q = append(q, queuedNode{name: n, skip: api.SkipUntoleratedTaint, reason: page.Untolerated[n]})
	}
	sort.Slice(q, func(i, j int) bool { return q[i].name < q[j].name })
	return q
}

// queuePage turns a listed page into the queue: in name order as listed, or (pacing) with
// each node's domain and rank, canaries already run left out, in the requested order. A
// paced rollout's cursor is the page's last name: nodes start out of name order, so the
// page's remainder is carried across continue-as-new instead.
func (r *rollout) queuePage(page activities.ListNodesResult) []queuedNode {
	q := mergeListed(page)
	if !r.settings.Pacing.Active() || len(q) == 0 {
		return q
	}
	r.progress.Cursor = q[len(q)-1].name
	kept := q[:0]
	for _, n := range q {
		if r.pacer.isCanary[n.name] {
			continue
		}
		if r.settings.Pacing.DomainKey != "" {
			n.domain = page.Labels[n.name][r.settings.Pacing.DomainKey]
		}
		if r.settings.Pacing.OrderLabel != "" {
			n.rank = page.Labels[n.name][r.settings.Pacing.OrderLabel]
		}
		if r.settings.Pacing.Order == api.OrderGiven {
			n.rank = r.givenRank(n.name)
		}
		kept = append(kept, n)
	}
	r.pacer.order(kept)
	return kept
}

// listCanaries lists the canary nodes: by name, or the rollout's nodes that also match the
// canary selector.
func (r *rollout) listCanaries(ctx workflow.Context) error {
	c := r.settings.Pacing.Canary
	in := activities.ListNodesInput{
		Rollout:      r.req.Name,
		TemplateHash: r.progress.TemplateHash,
		Rerun:        r.req.Rerun,
		Limit:        api.MaxCanaries,
		Labels:       r.settings.Pacing.LabelKeys(),
		TaintCheck:   r.progress.TaintCheck,
	}
	switch {
	case len(c.Nodes) > 0:
		in.Names = c.Nodes
		if r.features.admission {
			// Named canaries of a rollout that selects its nodes must be among them.
			in.Selector, in.FieldSelector = r.req.NodeSelector, r.req.FieldSelector
		}
	case len(r.req.Nodes) > 0:
		in.Selector = c.Selector
	default:
		in.Selector = strings.Trim(r.req.NodeSelector+","+c.Selector, ",")
		in.FieldSelector = r.req.FieldSelector
	}
	var a *activities.Activities
	var page activities.ListNodesResult
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "list canary nodes"), a.ListNodes, in).Get(ctx, &page)
	if err != nil {
		return asWorkflowError(err)
	}
	// A rollout that names its nodes takes as canaries those of them the selector matches,
	// which the cluster-wide listing finds among every node it matches.
	ownNodes := len(c.Nodes) == 0 && len(r.req.Nodes) > 0
	var inRequest map[string]bool
	keepOwn := func(p *activities.ListNodesResult) {
		p.Nodes = slices.DeleteFunc(p.Nodes, func(n string) bool { return !inRequest[n] })
		p.Done = slices.DeleteFunc(p.Done, func(n string) bool { return !inRequest[n] })
		for _, n := range workflow.DeterministicKeys(p.Untolerated) {
			if !inRequest[n] {
				delete(p.Untolerated, n)
			}
		}
	}
	if ownNodes {
		inRequest = map[string]bool{}
		for _, n := range r.req.Nodes {
			inRequest[n] = true
		}
		keepOwn(&page)
		// From versionCanaryOwnNodes on, the 100 canaries are counted among the rollout's own
		// nodes: the listing pages on through the selector's other matches.
		if page.More && workflow.GetVersion(ctx, versionCanaryOwnNodes, workflow.DefaultVersion, 1) == 1 {
			for page.More && len(page.Nodes)+len(page.Done)+len(page.Untolerated) <= api.MaxCanaries {
				in.After, in.Limit = page.Next, listPageSize
				var next activities.ListNodesResult
				err := workflow.ExecuteActivity(withAPIActivity(ctx, "list canary nodes after "+in.After), a.ListNodes, in).Get(ctx, &next)
				if err != nil {
					return asWorkflowError(err)
				}
				keepOwn(&next)
				appendSelected(&page, next)
			}
			page.More = len(page.Nodes)+len(page.Done)+len(page.Untolerated) > api.MaxCanaries
		}
	}
	if page.More {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"invalid rollout request: canary.selector: selects more than %d nodes; narrow it", api.MaxCanaries), api.ErrInvalidRequest, nil)
	}
	if len(page.Unselected) > 0 {
		var ps []string
		for _, n := range page.Unselected {
			ps = append(ps, fmt.Sprintf("canary.nodes[%d]: %q is not selected by the rollout (nodeSelector %q, fieldSelector %q)",
				slices.Index(c.Nodes, n), n, r.req.NodeSelector, r.req.FieldSelector))
		}
		return temporal.NewNonRetryableApplicationError("invalid rollout request: "+strings.Join(ps, "; ")+
			"; canaries must be nodes of the rollout: correct the name or the selector", api.ErrInvalidRequest, nil)
	}
	r.queue = r.queuePage(page)
	r.pacer.canaries = nil
	for _, n := range r.queue {
		r.pacer.canaries = append(r.pacer.canaries, n.name)
		r.pacer.isCanary[n.name] = true
	}
	r.progress.Selected = max(r.progress.Selected, len(r.queue))
	r.progress.ListingDone = true
	r.showProgress(ctx)
	return nil
}

// appendSelected adds the next slice's runnable, done and untolerated nodes (with their labels)
// to page, and takes its place in the listing.
func appendSelected(page *activities.ListNodesResult, next activities.ListNodesResult) {
	page.Nodes = append(page.Nodes, next.Nodes...)
	page.Done = append(page.Done, next.Done...)
	for _, n := range workflow.DeterministicKeys(next.Untolerated) {
		if page.Untolerated == nil {
			page.Untolerated = map[string]string{}
		}
		page.Untolerated[n] = next.Untolerated[n]
	}
	for _, n := range workflow.DeterministicKeys(next.Labels) {
		if page.Labels == nil {
			page.Labels = map[string]map[string]string{}
		}
		page.Labels[n] = next.Labels[n]
	}
	page.More, page.Next = next.More, next.Next
}
