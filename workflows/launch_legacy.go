package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// This file keeps how runs from before versionAdmission start their nodes (startNext,
// runNodeBeforeAdmission): each wait checked the rules it waited for itself. Their histories
// must replay as recorded; runs from versionAdmission on go through admission.go instead.

// busyNodeBackoff and busyNodeMaxBackoff pace retries of a node that another rollout holds
// in runs from before the busy node was told when it frees (versionFieldGuarantees).
const (
	busyNodeBackoff    = 5 * time.Second
	busyNodeMaxBackoff = time.Minute
)

// startNext waits until a queued node may start and starts it, or records why it is skipped.
// It reports false once stop() says no node may start any more; an error means cancelled.
func (r *rollout) startNext(ctx workflow.Context, stop func() bool) (bool, error) {
	next, at := r.queue[0], 0
	if next.skip == "" {
		if err := r.awaitMaintenanceWindow(ctx, stop); err != nil {
			return false, err
		}
		err := workflow.Await(ctx, func() bool {
			return stop() || (!r.progress.Paused && r.inFlight < r.launchWindow.size && r.pacer.pick(r.queue) >= 0)
		})
		if err != nil {
			return false, err
		}
		if stop() {
			return false, nil
		}
		if !r.maintenanceWindowOpen(ctx) {
			return true, nil // it closed while every slot was taken: wait for the next opening
		}
		at = r.pacer.pick(r.queue)
		next = r.queue[at]
	}
	if at == 0 {
		r.queue = r.queue[1:]
	} else {
		r.queue = append(r.queue[:at], r.queue[at+1:]...)
	}
	if !r.settings.Pacing.Active() {
		r.progress.Cursor = next.name
	}
	switch next.skip {
	case "done", "missing":
		r.recordSkip(ctx, next)
	default:
		r.pacer.assign(next)
		r.launch(ctx, next.name)
		if r.settings.DelayBetweenNodes > 0 {
			if err := r.delayNext(ctx, stop); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// launch starts the node's child. A node that may start at once is started here and waited on
// by the one childCollector; a node that first waits (for a slot of the cluster-wide budget)
// runs in a coroutine of its own, as every node did before versionChildCollector.
func (r *rollout) launch(ctx workflow.Context, node string) {
	r.inFlight++
	r.progress.Counts.Running++
	r.pacer.take(node)
	r.launchedThisRun++
	if r.children != nil {
		r.children.add(node, r.startChild(ctx, node, false), workflow.Now(ctx), false, false)
		return
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		r.settle(ctx, node, r.runNode(ctx, node, false))
	})
}

// awaitLaunchSlot waits until a node that waited for another rollout may take a slot again:
// a slot in the window and, when pacing, an open window and room in its domain.
func (r *rollout) awaitLaunchSlot(ctx workflow.Context, node string) error {
	free := func() bool { return !r.progress.Paused && r.inFlight < r.launchWindow.size }
	if !r.settings.Pacing.Active() {
		return workflow.Await(ctx, func() bool { return (r.features.guarantees && r.noneMayStart()) || free() })
	}
	for {
		if err := r.awaitMaintenanceWindow(ctx, r.noneMayStart); err != nil {
			return err
		}
		domain := r.pacer.domainOf[node]
		err := workflow.Await(ctx, func() bool { return r.noneMayStart() || (free() && r.pacer.admits(domain)) })
		if err != nil || r.noneMayStart() || r.maintenanceWindowOpen(ctx) {
			return err
		}
	}
}

// runNodeBeforeAdmission is runNode in runs before versionAdmission: each wait checks the
// rules it waits for itself.
func (r *rollout) runNodeBeforeAdmission(ctx workflow.Context, node string, busy bool) nodeEnd {
	backoff, recheck := busyNodeBackoff, busyNodeRecheck
	for {
		if busy {
			// Another rollout holds the node: give the slot back and wait.
			r.inFlight--
			r.progress.Counts.Running--
			r.pacer.release(node)
			r.waiting[node] = true
			r.progress.Counts.Waiting++
			r.showProgress(ctx)
			var waitErr error
			if r.features.guarantees {
				waitErr = r.waitUntilFreed(ctx, node, recheck)
				recheck = min(2*recheck, busyNodeMaxRecheck)
			} else {
				waitErr = workflow.Sleep(ctx, backoff)
				backoff = min(2*backoff, busyNodeMaxBackoff)
			}
			if waitErr == nil {
				waitErr = r.awaitLaunchSlot(ctx, node)
			}
			delete(r.waiting, node)
			delete(r.freed, node)
			r.progress.Counts.Waiting--
			if waitErr != nil {
				return nodeEnd{result: api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
					Message: "aborted while waiting for another rollout to finish on the node"}, started: true}
			}
			if r.handedOver != nil {
				// The next run waits for the node: this one must start no child it would not
				// see end. A api.NodeFreed in the workflow task that hands over wakes the node while
				// continueAsNew reads the pending signals (the SDK's test environment delivers
				// one event per task, so it cannot show this).
				return nodeEnd{}
			}
			if r.features.guarantees && r.noneMayStart() {
				return nodeEnd{}
			}
			r.inFlight++
			r.progress.Counts.Running++
			r.pacer.take(node)
		}
		if err := r.clusterSlots.acquire(ctx, node, func() { r.showProgress(ctx) }, nil); err != nil {
			return nodeEnd{result: api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
				Message: "aborted while waiting for a slot of the cluster-wide budget"}, holdsSlot: true, started: true}
		}
		if end, refused := r.runChild(ctx, node); !refused {
			return end
		}
		busy = true
	}
}
