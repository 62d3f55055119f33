package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Converge mode (mode: converge): once its first pass has ended, the rollout waits to be told
// of nodes that changed (SignalNodesChanged, sent by the worker's Node watch: no timer, so an
// idle rollout costs nothing), checks just those nodes (CheckNodes), and queues the ones off
// its template, which then pass the same admission point as the first pass. A node that left
// the selector gets onDeselect's Job once. The rollout runs until it is aborted, its failure
// budget is spent, or a request of the same name replaces it (UpdateReplace): then it starts
// no more nodes, lets those in flight end, and continues as new with the new request, whose
// run moves the nodes to the new template as a first pass does.

// convergeState is a converging rollout's state; nil for one that runs once.
type convergeState struct {
	api.ConvergeProgress
	changed map[string]bool // told of and not yet checked (Changed, as a set)
	// checking is set while CheckNodes runs; settledMeanwhile are the nodes whose run ended
	// then, whose marker the check may have read before their end was recorded.
	checking         bool
	settledMeanwhile map[string]bool
	// deselecting are the nodes queued or in flight for onDeselect's Job.
	deselecting map[string]bool
	signals     workflow.ReceiveChannel
}

// startConverge sets up a converging rollout's state and its handlers; it is a no-op for a
// rollout that runs once. Called before the first blocking call.
func (r *rollout) startConverge(ctx workflow.Context, carried *api.Progress) error {
	if !r.req.Converging() {
		return nil
	}
	c := &convergeState{changed: map[string]bool{}, settledMeanwhile: map[string]bool{}, deselecting: map[string]bool{}}
	if carried != nil && carried.Converge != nil {
		c.ConvergeProgress = *carried.Converge
		for _, n := range c.Changed {
			c.changed[n] = true
		}
		c.Changed = nil
	} else {
		// Once the first pass ends, one look at every node counts those at the template and
		// catches any that joined behind the listing's cursor.
		c.Resync = true
	}
	if c.RetryAt == nil {
		c.RetryAt = map[string]time.Time{}
	}
	r.conv = c
	c.signals = workflow.GetSignalChannel(ctx, api.SignalNodesChanged)
	r.signals = append(r.signals, c.signals)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var in api.NodesChanged
			if !c.signals.Receive(ctx, &in) {
				return
			}
			for _, n := range in.Nodes {
				c.changed[n] = true
			}
			c.Resync = c.Resync || in.Resync
		}
	})
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateReplace,
		func(ctx workflow.Context, next api.RolloutRequest) (api.ReplaceResult, error) {
			c.Replacement = &next
			r.showProgress(ctx)
			return api.ReplaceResult{PreviousTemplateHash: r.progress.TemplateHash}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(next api.RolloutRequest) error {
			switch {
			case c.Replacement != nil:
				return fmt.Errorf("rollout %s is already being replaced; wait for the new run, then start again", r.req.Name)
			case next.Name != r.req.Name:
				return fmt.Errorf("name: the replacement is %q, this rollout is %q", next.Name, r.req.Name)
			case !next.Converging():
				return fmt.Errorf("mode: a converging rollout is replaced only by another (mode: converge); abort it first to run once")
			}
			if problems := next.Problems(); len(problems) > 0 {
				return invalidRequest("invalid rollout request: ", problems)
			}
			return nil
		}})
}

// prepareConverge stores onDeselect's template (carried == nil: the first run) and marks the
// rollout in its memo for the worker's Node watch.
func (r *rollout) prepareConverge(ctx workflow.Context) error {
	if r.conv == nil {
		return nil
	}
	// The only GetVersion converge mode asks: no history from before it converges.
	workflow.GetVersion(ctx, versionConverge, workflow.DefaultVersion, 1)
	memo := map[string]any{api.MemoMode: api.ModeConverge, "name": r.req.Name}
	if d := r.req.OnDeselect; d != nil && r.conv.DeselectHash == "" {
		var a *activities.Activities
		var prepared activities.PreparedTemplate
		err := workflow.ExecuteActivity(withAPIActivity(ctx, "load and check the onDeselect Job template"), a.PrepareTemplate, activities.PrepareTemplateInput{
			Namespace:    r.settings.Namespace,
			Template:     d.JobTemplate,
			TemplateRef:  d.JobTemplateRef,
			Store:        true,
			NodeSelector: r.req.NodeSelector,
			Parallelism:  r.settings.Parallelism,
		}).Get(ctx, &prepared)
		if err != nil {
			return asWorkflowError(err)
		}
		r.conv.DeselectHash = prepared.Hash
	}
	if r.conv.DeselectHash != "" {
		memo["deselectHash"] = r.conv.DeselectHash
	}
	return workflow.UpsertMemo(ctx, memo)
}

// converging says the run waits for changes once its queue is empty, rather than ending.
func (r *rollout) converging() bool { return r.conv != nil }

// replacing says a new request replaces this rollout: no node starts any more.
func (r *rollout) replacing() bool { return r.conv != nil && r.conv.Replacement != nil }

// awaitChanges waits for nodes to change (or, with retryFailedAfter, for a failed node's
// retry to be due: the only timer converge mode sets), checks them and queues those that need
// a run. stop says the rollout is being replaced (or no node may start): the caller drains.
func (r *rollout) awaitChanges(ctx workflow.Context) (stop bool, err error) {
	c := r.conv
	told := func() bool {
		return len(c.changed) > 0 || c.Resync || c.Replacement != nil || r.rolloutRefusal(ctx).final
	}
	var due []string
	for {
		if due = c.dueRetries(workflow.Now(ctx)); len(due) > 0 {
			break
		}
		// A node that fails meanwhile sets a retry: the wait starts again with its time.
		retries := len(c.RetryAt)
		woken := func() bool { return told() || len(c.RetryAt) != retries }
		if next, ok := c.nextRetry(); ok {
			_, err = workflow.AwaitWithTimeout(ctx, next.Sub(workflow.Now(ctx)), woken)
		} else {
			err = workflow.Await(ctx, woken)
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil || told() {
			break
		}
	}
	if err != nil {
		return false, err
	}
	if c.Replacement != nil || r.rolloutRefusal(ctx).final {
		return true, nil
	}
	if due = c.dueRetries(workflow.Now(ctx)); len(due) > 0 {
		for _, n := range due {
			delete(c.RetryAt, n)
		}
	}
	return false, r.checkChanged(ctx, due)
}

// nextRetry is when the earliest failed node is due to run again.
func (c *convergeState) nextRetry() (time.Time, bool) {
	var next time.Time
	for _, n := range workflow.DeterministicKeys(c.RetryAt) {
		if at := c.RetryAt[n]; next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, !next.IsZero()
}

// dueRetries are the failed nodes whose retry is due at now.
func (c *convergeState) dueRetries(now time.Time) []string {
	var due []string
	for _, n := range workflow.DeterministicKeys(c.RetryAt) {
		if !c.RetryAt[n].After(now) {
			due = append(due, n)
		}
	}
	return due
}

// checkChanged runs CheckNodes over the nodes told of and queues those it says to run. A node
// in flight or queued already is left alone: the end of its run writes its marker, which the
// Node watch reads, and tells again if the node still needs something.
func (r *rollout) checkChanged(ctx workflow.Context, retry []string) error {
	c := r.conv
	names := workflow.DeterministicKeys(c.changed)
	resync := c.Resync
	clear(c.changed)
	c.Resync = false
	c.checking = true
	var a *activities.Activities
	var res activities.CheckNodesResult
	err := workflow.ExecuteActivity(withAPIActivity(ctx, fmt.Sprintf("check %d changed nodes", len(names))), a.CheckNodes, activities.CheckNodesInput{
		Rollout:       r.req.Name,
		Selector:      r.req.NodeSelector,
		FieldSelector: r.req.FieldSelector,
		TemplateHash:  r.progress.TemplateHash,
		DeselectHash:  c.DeselectHash,
		Names:         names,
		Resync:        resync,
		Retry:         retry,
		Labels:        r.settings.Pacing.LabelKeys(),
		TaintCheck:    r.progress.TaintCheck,
	}).Get(ctx, &res)
	c.checking = false
	settled := c.settledMeanwhile
	c.settledMeanwhile = map[string]bool{}
	if err != nil {
		if ctx.Err() == nil {
			// Told again, the next look covers them.
			for _, n := range names {
				c.changed[n] = true
			}
			c.Resync = c.Resync || resync
			for _, n := range retry {
				c.RetryAt[n] = workflow.Now(ctx)
			}
		}
		return asWorkflowError(err)
	}
	queued := map[string]bool{}
	for _, n := range r.queue {
		queued[n.name] = true
	}
	busy := func(n string) bool {
		_, inFlight := r.pacer.domainOf[n]
		return inFlight || queued[n] || settled[n] || r.waiting[n]
	}
	added := 0
	for _, n := range res.Run {
		if busy(n) {
			continue
		}
		q := queuedNode{name: n}
		if k := r.settings.Pacing.DomainKey; k != "" {
			q.domain = res.Labels[n][k]
		}
		if k := r.settings.Pacing.OrderLabel; k != "" {
			q.rank = res.Labels[n][k]
		}
		r.queue = append(r.queue, q)
		added++
	}
	// A node whose taint the Job's Pod does not tolerate is skipped as in the first pass: a
	// Job pinned by nodeName would bypass the scheduler's taint check.
	for _, n := range workflow.DeterministicKeys(res.Untolerated) {
		if !busy(n) {
			r.queue = append(r.queue, queuedNode{name: n, skip: api.SkipUntoleratedTaint, reason: res.Untolerated[n]})
			added++
		}
	}
	for _, n := range res.Deselect {
		if busy(n) {
			continue
		}
		c.deselecting[n] = true
		r.queue = append(r.queue, queuedNode{name: n})
		added++
	}
	if r.settings.Pacing.Active() {
		r.pacer.order(r.queue)
	}
	r.progress.Selected = max(r.progress.Selected, res.Selected)
	c.AtTemplate = res.AtTemplate
	if added > 0 {
		c.LastChange = workflow.Now(ctx)
	}
	r.showProgress(ctx)
	return nil
}

// deselecting says the node's turn runs onDeselect's Job.
func (r *rollout) deselecting(node string) bool {
	return r.conv != nil && r.conv.deselecting[node]
}

// templateHashOf is the template a node's child runs: onDeselect's for a node that left the
// selector, else the rollout's.
func (r *rollout) templateHashOf(node string) string {
	if r.deselecting(node) {
		return r.conv.DeselectHash
	}
	return r.progress.TemplateHash
}

// convergeSettled notes a node whose turn ended; a failed one is due again after
// retryFailedAfter, when set.
func (r *rollout) convergeSettled(ctx workflow.Context, node string, end nodeEnd) {
	c := r.conv
	if c == nil {
		return
	}
	if c.checking {
		c.settledMeanwhile[node] = true
	}
	if c.deselecting[node] {
		delete(c.deselecting, node)
		return
	}
	if end.started && end.result.Outcome == api.OutcomeSucceeded && r.progress.ListingDone {
		c.AtTemplate++
		c.LastChange = end.result.FinishedAt
	}
	if d := r.req.RetryFailedAfterDuration(); d > 0 && end.started && api.RetriedByConverge(end.result.Outcome) {
		c.RetryAt[node] = workflow.Now(ctx).Add(d)
	}
}

// carryConverge is the converge state the next run takes: the nodes still queued go back among
// the changed ones, to be checked again there (a node queued for onDeselect is known only by
// that check).
func (r *rollout) carryConverge(p *api.Progress) {
	c := r.conv
	if c == nil {
		return
	}
	carried := c.ConvergeProgress
	changed := map[string]bool{}
	for _, n := range workflow.DeterministicKeys(c.changed) {
		changed[n] = true
	}
	if r.progress.ListingDone {
		for _, n := range r.queue {
			changed[n.name] = true
		}
		p.ListingDone = true
		if p.Pacing != nil {
			p.Pacing.Queue = nil
		}
	}
	carried.Changed = workflow.DeterministicKeys(changed)
	p.Converge = &carried
}

// handOver ends a replaced rollout: it continues as new with the replacing request, whose run
// prepares its template and lists every node afresh. Every node of this run has ended, so no
// node runs twice at once (and node workflow IDs serialise them anyway). From
// versionReplacementTakesOver on, the words that came with the decision are read first, as
// before a continue-as-new, and an operator's pause and the last start's time carry over: a
// replacement changes what runs, not whether it may run now.
func (r *rollout) handOver(ctx workflow.Context) (api.RolloutResult, error) {
	if !r.replacementTakesOver(ctx) {
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return r.cancelled(ctx)
		}
		return api.RolloutResult{}, workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, *r.conv.Replacement, (*api.Progress)(nil))
	}
	if err := r.awaitWordsRead(ctx, afterReadyCoroutines(ctx)); err != nil {
		return r.cancelled(ctx)
	}
	carried := &api.Progress{Replaced: true, Paused: r.progress.Paused, LastStartAt: r.progress.LastStartAt}
	return api.RolloutResult{}, workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, *r.conv.Replacement, carried)
}

// replacementTakesOver says a pending replacement ends this run whatever else would have
// (a failed canary, a broken metric gate, a listing error) and ends the canary stage's waits.
// Asked only with a replacement pending, so no other history records it.
func (r *rollout) replacementTakesOver(ctx workflow.Context) bool {
	return r.replacing() && workflow.GetVersion(ctx, versionReplacementTakesOver, workflow.DefaultVersion, 1) == 1
}

// convergeStatus is the status query's converge part.
func (r *rollout) convergeStatus() *api.ConvergeStatus {
	c := r.conv
	if c == nil {
		return nil
	}
	return &api.ConvergeStatus{
		AtTemplate: min(c.AtTemplate, r.progress.Selected),
		Pending:    len(r.queue) + len(c.changed) + r.progress.Counts.Running + r.progress.Counts.Waiting,
		LastChange: c.LastChange,
		Replacing:  c.Replacement != nil,
	}
}

// convergeDetails is the converge line of the UI's current details.
func convergeDetails(st api.RolloutStatus) string {
	c := st.Converge
	if c == nil {
		return ""
	}
	last := "never"
	if !c.LastChange.IsZero() {
		last = c.LastChange.UTC().Format("2006-01-02T15:04:05Z")
	}
	return fmt.Sprintf("; converging: %d nodes at template %s, %d pending, last change %s", c.AtTemplate, shortHash(st.TemplateHash), c.Pending, last)
}

// shortHash is the first 12 characters of a template hash, as people read it.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
