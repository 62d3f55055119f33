package workflows

import (
	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/workflow"
)

// The one admission point of a rollout. Every feature that bounds when a node may start (abort,
// hand-over, the failure budget, canaries, pause, the metric gate, the maintenance window,
// parallelism, the per-domain limit, the spacing of delayBetweenNodes, the cluster-wide budget)
// has its rule in startRefusal and nowhere else, and every path that starts a node calls it
// immediately before the node's child workflow starts, after whatever the node waited for: a
// wait for one rule never returns into a start that skips another (versionAdmission).

// refusal says why a node may not start now; the zero value admits it.
type refusal struct {
	rule string
	// final: no node of this run may start any more, whatever it waits for.
	final bool
}

func (f refusal) admits() bool { return f.rule == "" }

// The rules, in the order startRefusal checks them; the words appear in node details.
const (
	refusedAborted       = "the rollout was aborted"
	refusedHandingOver   = "this run hands its waiting nodes to the next"
	refusedReplaced      = "a new request replaces this converging rollout"
	refusedFailureBudget = "the failure budget is spent"
	refusedCanaryFailed  = "a canary failed"
	refusedCanariesFirst = "the canaries go first"
	refusedPaused        = "the rollout is paused"
	refusedWindowClosed  = "the maintenance window is closed"
	refusedParallelism   = "parallelism is reached"
	refusedDomainFull    = "its domain is at maxPerDomain"
	refusedTooSoon       = "the last node started less than delayBetweenNodes ago"
	refusedClusterSlot   = "it holds no slot of the cluster-wide budget"
)

// rolloutRefusal is the part of startRefusal that is the same for every node.
func (r *rollout) rolloutRefusal(ctx workflow.Context) refusal {
	switch {
	case ctx.Err() != nil:
		return refusal{rule: refusedAborted, final: true}
	case r.handedOver != nil:
		return refusal{rule: refusedHandingOver, final: true}
	case r.replacing():
		return refusal{rule: refusedReplaced, final: true}
	case r.failureBudgetSpent():
		return refusal{rule: refusedFailureBudget, final: true}
	case r.pacer.canaryFailed(r.progress.Counts.Failures()):
		return refusal{rule: refusedCanaryFailed, final: true}
	case r.gate.broken():
		return refusal{rule: refusedGateBroken, final: true}
	case r.progress.Paused:
		return refusal{rule: refusedPaused}
	case r.gate.closed():
		return refusal{rule: refusedMetricGate}
	case !r.maintenanceWindowOpen(ctx):
		return refusal{rule: refusedWindowClosed}
	}
	return refusal{}
}

// startRefusal answers "may this node start now?". reserved says the node already holds a
// launch slot and its domain's (taken when it was picked, kept while it waits for a cluster
// slot): its own reservation is then not counted against it, the nodes already started are.
func (r *rollout) startRefusal(ctx workflow.Context, node, domain string, reserved bool) refusal {
	if why := r.rolloutRefusal(ctx); !why.admits() {
		return why
	}
	if r.pacer.holdsBackForCanaries(node) {
		return refusal{rule: refusedCanariesFirst}
	}
	taken, takenInDomain := r.inFlight, r.pacer.inFlightByDomain[domain]
	if reserved {
		taken, takenInDomain = r.started, r.pacer.startedByDomain[domain]
	}
	if taken >= r.launchWindow.size {
		return refusal{rule: refusedParallelism}
	}
	if r.settings.Pacing.MaxPerDomain > 0 && takenInDomain >= r.settings.Pacing.MaxPerDomain {
		return refusal{rule: refusedDomainFull}
	}
	if r.tooSoon(ctx) {
		return refusal{rule: refusedTooSoon}
	}
	if r.clusterSlots != nil && !r.clusterSlots.holds(node) {
		return refusal{rule: refusedClusterSlot}
	}
	return refusal{}
}

// tooSoon says the last node started less than delayBetweenNodes ago (versionAdmission 3).
// The launch loop waits the delay after each launch; this rule spaces the starts too, where a
// node that waited (for a cluster slot, for a node another rollout held, in the previous run)
// would otherwise start together with a later one.
func (r *rollout) tooSoon(ctx workflow.Context) bool {
	last := r.progress.LastStartAt
	return r.features.spaceStarts && r.settings.DelayBetweenNodes > 0 && last != nil &&
		workflow.Now(ctx).Before(last.Add(r.settings.DelayBetweenNodes))
}

// awaitSpacing waits until delayBetweenNodes has passed since the last start, or until the
// node's refusal is another (a pause, an abort). A cluster slot the node holds is kept: the
// wait is short, and giving the slot back would send the node to the end of the cluster's queue.
func (r *rollout) awaitSpacing(ctx workflow.Context, node, domain string, reserved bool) error {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, r.progress.LastStartAt.Add(r.settings.DelayBetweenNodes).Sub(workflow.Now(ctx)))
	return workflow.Await(ctx, func() bool {
		return timer.IsReady() || r.startRefusal(ctx, node, domain, reserved).rule != refusedTooSoon
	})
}

// reserve and unreserve take and give back a node's launch slot and its domain's.
func (r *rollout) reserve(node string) {
	r.inFlight++
	r.progress.Counts.Running++
	r.pacer.take(node)
}

func (r *rollout) unreserve(node string) {
	r.inFlight--
	r.progress.Counts.Running--
	r.pacer.release(node)
}

// admit waits until node may start and reports whether it may start now: true means every
// rule holds at this instant, with the node reserved and holding its cluster slot, and the
// caller starts the child before it yields; false means no node of this run may start any
// more (what the node held is given back). A cluster slot is taken last, once every other rule
// holds, and never kept while the node waits for another rule. *reserved says on entry and on
// return whether the node holds its reservation; an error means the rollout was cancelled.
func (r *rollout) admit(ctx workflow.Context, node string, reserved *bool) (bool, error) {
	domain := r.pacer.domainOf[node]
	final := func() bool { return r.rolloutRefusal(ctx).final }
	for {
		why := r.startRefusal(ctx, node, domain, *reserved)
		switch {
		case why.admits():
			if !*reserved {
				r.reserve(node)
				*reserved = true
			}
			return true, nil
		case why.rule == refusedAborted:
			if r.features.admitAfterReady {
				// A grant can come in the abort's task: acquire takes it, the abort ends the wait.
				r.clusterSlots.giveBack(ctx, node)
			}
			return false, ctx.Err()
		case why.final:
			r.clusterSlots.giveBack(ctx, node)
			if *reserved {
				r.unreserve(node)
				*reserved = false
			}
			return false, nil
		case why.rule == refusedClusterSlot:
			if !*reserved {
				r.reserve(node)
				*reserved = true
			}
			if err := r.clusterSlots.acquire(ctx, node, func() { r.showProgress(ctx) }, final); err != nil {
				return false, err
			}
			continue
		case why.rule == refusedTooSoon:
			if !*reserved {
				r.reserve(node)
				*reserved = true
			}
			if err := r.awaitSpacing(ctx, node, domain, *reserved); err != nil {
				return false, err
			}
			continue
		}
		r.clusterSlots.giveBack(ctx, node)
		var err error
		if why.rule == refusedWindowClosed {
			err = r.awaitMaintenanceWindow(ctx, final)
		} else {
			err = workflow.Await(ctx, func() bool { return r.startRefusal(ctx, node, domain, *reserved).rule != why.rule })
		}
		if err != nil {
			return false, err
		}
	}
}

// pickNext is the index in the queue of the first node that may go now (a node to skip
// always may; one that lacks only a cluster slot or the spacing of delayBetweenNodes may go
// and wait for it), or -1 with the refusal that holds the queue back. Nodes go in queue
// order: only a node held back by a rule of its own (its domain, the canaries) lets a later one
// pass, so an unpaced rollout's cursor (the last name taken) never skips a node.
func (r *rollout) pickNext(ctx workflow.Context) (int, refusal) {
	rollout := r.rolloutRefusal(ctx)
	var first refusal
	for i, n := range r.queue {
		if n.skip != "" {
			return i, refusal{}
		}
		if !rollout.admits() {
			return -1, rollout
		}
		why := r.startRefusal(ctx, n.name, n.domain, false)
		switch why.rule {
		case "", refusedClusterSlot, refusedTooSoon:
			return i, why
		case refusedDomainFull, refusedCanariesFirst:
			if first.admits() {
				first = why
			}
			continue
		}
		return -1, why
	}
	return -1, first
}

// nextAdmitted waits until a queued node may go and starts it (or records why it is skipped).
// It reports false once no node may start any more; true with nothing started when the run's
// history has grown as far as is safe, for the caller to continue as new. An error means the
// rollout was cancelled.
func (r *rollout) nextAdmitted(ctx workflow.Context, historyFull func() bool) (bool, error) {
	var at int
	for {
		if r.features.admitAfterReady {
			// The root runs first in each workflow task, before the coroutines that apply what
			// the task brought (signals, children's ends, slot grants): a wait it wakes from may
			// share its task with a pause or a failure that must count before a node starts.
			_ = workflow.Await(ctx, afterReadyCoroutines(ctx)) // an abort is seen just below
		}
		var why refusal
		at, why = r.pickNext(ctx)
		switch {
		case at >= 0:
		case why.rule == refusedAborted:
			return false, ctx.Err()
		case why.final:
			return false, nil
		case historyFull():
			return true, nil
		case why.rule == refusedWindowClosed:
			if err := r.awaitMaintenanceWindow(ctx, func() bool { return r.rolloutRefusal(ctx).final || historyFull() }); err != nil {
				return false, err
			}
			continue
		default:
			err := workflow.Await(ctx, func() bool {
				next, now := r.pickNext(ctx)
				return next >= 0 || now.final || now.rule != why.rule || historyFull()
			})
			if err != nil {
				return false, err
			}
			continue
		}
		break
	}
	next := r.takeQueued(at)
	if !r.settings.Pacing.Active() {
		r.progress.Cursor = next.name
	}
	if next.skip != "" {
		r.recordSkip(ctx, next)
		return true, nil
	}
	r.pacer.assign(next)
	r.reserve(next.name)
	r.launchedThisRun++
	if r.children != nil && r.startRefusal(ctx, next.name, next.domain, true).admits() {
		outlives := r.childOutlivesRun(ctx)
		r.children.add(next.name, r.startChild(ctx, next.name, outlives), workflow.Now(ctx), outlives, outlives && r.features.tellAtStart)
	} else {
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, next.name, r.runAdmitted(ctx, next.name, false))
		})
	}
	if r.settings.DelayBetweenNodes > 0 {
		if err := r.delayNext(ctx, func() bool { return r.rolloutRefusal(ctx).final }); err != nil {
			return false, err
		}
	}
	return true, nil
}

// runAdmitted runs a node's child once admit lets it start, waiting while another rollout
// holds the node (busy: it was already refused as busy, so the wait comes first). The node
// arrives reserved; while it waits for the other rollout it gives its reservation back, so a
// busy node never holds up the others.
func (r *rollout) runAdmitted(ctx workflow.Context, node string, busy bool) nodeEnd {
	reserved := true
	recheck := busyNodeRecheck
	for {
		var ok bool
		var err error
		if busy {
			if reserved {
				r.unreserve(node)
				reserved = false
			}
			// The node stays among the waiting until it may start again (its turn may be days
			// away, in the next window): the run neither ends nor continues as new without it.
			// Counted, it is waiting only while the other rollout holds it, so it is never
			// counted twice (waiting and reserved, for a cluster slot).
			r.waiting[node] = true
			r.progress.Counts.Waiting++
			r.showProgress(ctx)
			err = r.waitUntilFreed(ctx, node, recheck)
			recheck = min(2*recheck, busyNodeMaxRecheck)
			delete(r.freed, node)
			r.progress.Counts.Waiting--
			if err == nil {
				ok, err = r.admit(ctx, node, &reserved)
			}
			delete(r.waiting, node)
		} else {
			ok, err = r.admit(ctx, node, &reserved)
		}
		if err != nil {
			return nodeEnd{result: abortedWaiting(node, "its turn to start"), holdsSlot: reserved, started: true}
		}
		if !ok {
			return nodeEnd{} // back to pending: a later run, rollout or rerun covers it
		}
		if end, refused := r.runChild(ctx, node); !refused {
			return end
		}
		busy = true
	}
}

// childStopped counts a node's child as no longer running (it ended, or was refused because
// another rollout holds the node).
func (r *rollout) childStopped(node string) {
	r.started--
	d := r.pacer.domainOf[node]
	if r.pacer.startedByDomain[d]--; r.pacer.startedByDomain[d] <= 0 {
		delete(r.pacer.startedByDomain, d)
	}
}

// abortedWaiting is the result of a node the abort found waiting for something before it started.
func abortedWaiting(node, what string) api.NodeResult {
	return api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
		Message: "aborted while waiting for " + what}
}
