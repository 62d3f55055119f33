package workflows

import (
	"cmp"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// Launching: a node's child workflow started, waited on (one childCollector, or a coroutine
// for a node that waits first), and its outcome counted; a node that another rollout holds
// waits to be told it is free; the launch window of nodes in flight. Whether a node may start
// now is admission.go's to say.

// How a node that another rollout holds waits for it.
const (
	// busyNodeRecheck is how long a waiting node trusts the holder to tell it when the node
	// frees before it tries again anyway (the holder may run older code, or be terminated);
	// each look doubles the next wait, up to busyNodeMaxRecheck.
	busyNodeRecheck    = 10 * time.Minute
	busyNodeMaxRecheck = 2 * time.Hour
)

// resumeWaiting goes on waiting for the nodes the previous run handed over, each in a
// coroutine of its own as a node refused as busy does. runNode gives the slot taken here
// back before it waits.
func (r *rollout) resumeWaiting(ctx workflow.Context) {
	for _, n := range r.progress.WaitingNodes {
		node := n.Name
		r.pacer.assign(queuedNode{name: node, domain: n.Domain})
		r.inFlight++
		r.progress.Counts.Running++
		r.pacer.take(node)
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, node, r.runNode(ctx, node, true))
		})
	}
	r.progress.WaitingNodes = nil
}

// delayNext waits delayBetweenNodes before the next node may start. From versionStopWaits on
// the wait ends as soon as stop says no node may start any more; the rollout's drain comes
// next. versionCutDelay is asked only then, so a delay that runs its course adds no marker.
func (r *rollout) delayNext(ctx workflow.Context, stop func() bool) error {
	if !r.features.stopWaits {
		return workflow.Sleep(ctx, r.settings.DelayBetweenNodes)
	}
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	timer := workflow.NewTimer(timerCtx, r.settings.DelayBetweenNodes)
	if err := workflow.Await(ctx, func() bool { return timer.IsReady() || stop() }); err != nil {
		return err
	}
	if timer.IsReady() || workflow.GetVersion(ctx, versionCutDelay, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return timer.Get(ctx, nil)
	}
	cancelTimer()
	return nil
}

// nodeEnd is how a node's turn in this run ended.
type nodeEnd struct {
	result api.NodeResult
	// holdsSlot says the node still holds its window slot; started, that it ran at all (a
	// waiting node is not started once the failure budget is spent).
	holdsSlot, started bool
}

// settle frees the node's slot and counts its outcome.
func (r *rollout) settle(ctx workflow.Context, node string, end nodeEnd) {
	if end.started && end.result.Reason == api.ReasonNodeWorkflowTerminated {
		// While the node still holds its slot: the run must not end before the write does.
		r.recordTerminated(ctx, node, end.result)
	}
	if end.holdsSlot {
		r.inFlight--
		r.progress.Counts.Running--
		r.pacer.release(node)
	}
	r.pacer.forget(node)
	// Said in the result only: the counts and the failure budget take the turn like any other.
	end.result.OnDeselect = end.started && r.deselecting(node)
	r.convergeSettled(ctx, node, end)
	if end.started {
		r.record(ctx, end.result)
	} else {
		r.showProgress(ctx) // back to pending: a later rollout or rerun covers it
	}
}

// childEnded settles a child that the collector saw end. A child refused because another
// rollout holds the node goes on in a coroutine of its own, which waits for the node.
func (r *rollout) childEnded(ctx workflow.Context, node string, child workflow.Future) {
	var result api.NodeResult
	err := child.Get(ctx, &result)
	r.childStopped(node)
	delete(r.wordsBeforeEnd, node)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, node, r.runNode(ctx, node, true))
		})
		return
	}
	r.settle(ctx, node, nodeEnd{result: nodeResult(node, err, result), holdsSlot: true, started: true})
}

// startChild starts the node's child workflow; outlivesRun lets it go on when this run
// continues as new (handover.go).
func (r *rollout) startChild(ctx workflow.Context, node string, outlivesRun bool) workflow.ChildWorkflowFuture {
	in := NodeRolloutInput{
		Rollout:           r.req.Name,
		Namespace:         r.settings.Namespace,
		Node:              node,
		Template:          r.progress.Template,
		TemplateHash:      r.templateHashOf(node),
		Owner:             r.req.Owner,
		JobTimeoutSeconds: int64(r.settings.JobTimeout / time.Second),
		JobTTLSeconds:     int32(r.settings.JobTTL / time.Second),
		KeepJobs:          r.settings.KeepJobs,
		Requester:         r.requester,
		Maintenance:       r.nodeMaintenance(),
		UndoTemplateHash:  r.progress.UndoTemplateHash,
	}
	in.RecordNodeEnd = in.Maintenance != nil
	if r.req.UndoOf != nil {
		in.UndoOf = r.req.UndoOf.Rollout
	}
	if outlivesRun && r.features.tellAtStart {
		in.TellWhenFree = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	nodeWorkflow := any(NodeRollout)
	if r.features.nodeVersion >= 1 {
		nodeWorkflow = NodeRolloutV2
		if r.features.nodeVersion >= 2 {
			nodeWorkflow = NodeRolloutV3
		}
		if r.features.nodeVersion >= 3 {
			nodeWorkflow = NodeRolloutV4
		}
		if in.Maintenance == nil {
			in.WatchSeconds = nodeWatchSeconds
		}
	}
	summary := "rollout " + r.req.Name + " on node " + node
	if r.features.nodeVersion >= 4 {
		// The child's workflow ID names the node, and it watches unless maintained: its input
		// and summary need not say so.
		nodeWorkflow = NodeRolloutV5
		in.Node, in.WatchSeconds = "", 0
		summary = "rollout " + r.req.Name
	}
	r.started++
	r.pacer.startedByDomain[r.pacer.domainOf[node]]++
	if r.features.spaceStarts {
		// A start that another rollout's hold refuses counts too: the rollout learns of the
		// hold only by trying, after the next node may already have passed the rule.
		now := workflow.Now(ctx)
		r.progress.LastStartAt = &now
	}
	return workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, r.cluster.NodeWorkflowID(node), summary, outlivesRun), nodeWorkflow, in)
}

// runNode runs the child, waiting while another rollout holds the node; busy says the node
// was already refused as busy, so the wait comes first. While it waits it gives its window
// slot back, so a busy node never holds up the others.
func (r *rollout) runNode(ctx workflow.Context, node string, busy bool) nodeEnd {
	if r.features.admission {
		return r.runAdmitted(ctx, node, busy)
	}
	return r.runNodeBeforeAdmission(ctx, node, busy)
}

// runChild starts the node's child and waits for it to end, then gives back what the node
// held while it ran (its cluster slot). refused says another rollout holds the node, so the
// child never ran: the caller waits for the node and tries again.
func (r *rollout) runChild(ctx workflow.Context, node string) (end nodeEnd, refused bool) {
	child := r.startChild(ctx, node, false) // a child started here is never handed over
	err := child.GetChildWorkflowExecution().Get(ctx, nil)
	if err == nil {
		var result api.NodeResult
		err = child.Get(ctx, &result)
		r.childStopped(node)
		r.clusterSlots.release(ctx, node)
		return nodeEnd{result: nodeResult(node, err, result), holdsSlot: true, started: true}, false
	}
	r.childStopped(node)
	r.clusterSlots.release(ctx, node)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return nodeEnd{}, true
	}
	return nodeEnd{result: nodeResult(node, err, api.NodeResult{}), holdsSlot: true, started: true}, false
}

// waitUntilFreed asks the node's current holder to say when it finishes, and waits for that
// or, should the word never come (a holder that was terminated and no worker's
// TerminatedNodeNotifier spoke for it, or a holder running older code), for recheck: a handful of events per waiting node however long the other rollout's Job runs.
// From versionStopWaits on the wait ends as soon as no node may start (noneMayStart): the node
// will not start, and the rollout's drain waits for it.
//
// From versionAdmission on, once the run has decided to continue as new or its history is
// near the limits, the node stops looking on a timer and waits only to be told (or for no
// node to be allowed to start, a hand-over included): a run whose window drains for days
// stops growing its history, and the next run looks again at once.
func (r *rollout) waitUntilFreed(ctx workflow.Context, node string, recheck time.Duration) error {
	if r.features.stopWaits && r.noneMayStart() {
		return nil
	}
	if r.features.admission && r.rolloutRefusal(ctx).final {
		return nil
	}
	self := workflow.GetInfo(ctx).WorkflowExecution.ID
	err := workflow.SignalExternalWorkflow(ctx, r.cluster.NodeWorkflowID(node), "", SignalNotifyWhenFree, NodeWaiter{WorkflowID: self}).Get(ctx, nil)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return nil // the holder has already finished: try again at once
	}
	if r.features.admission {
		woken := func() bool { return r.freed[node] || r.rolloutRefusal(ctx).final }
		if r.continuing || r.historyNearLimits(ctx) {
			return workflow.Await(ctx, woken)
		}
		_, err = workflow.AwaitWithTimeout(ctx, recheck, woken)
		return err
	}
	_, err = workflow.AwaitWithTimeout(ctx, recheck, func() bool {
		return r.freed[node] || (r.features.stopWaits && r.noneMayStart())
	})
	return err
}

// nodeResult reads a child's outcome: its result, the NodeResult carried by ErrNodeFailed, or
// a failure made from any other error.
func nodeResult(node string, err error, result api.NodeResult) api.NodeResult {
	if err == nil {
		result.Node = cmp.Or(result.Node, node) // a NodeRolloutV5 leaves it out
		return result
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == api.ErrNodeFailed && appErr.HasDetails() {
		var carried api.NodeResult
		if appErr.Details(&carried) == nil {
			carried.Node = cmp.Or(carried.Node, node)
			return carried
		}
	}
	if temporal.IsCanceledError(err) {
		return api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted, Message: err.Error()}
	}
	if temporal.IsTerminatedError(err) {
		return api.NodeResult{Node: node, Outcome: api.OutcomeFailed, Reason: api.ReasonNodeWorkflowTerminated,
			Message: "the node's workflow was terminated, so none of its clean-up ran (its Job may still run, a cordon stays): " + err.Error()}
	}
	return api.NodeResult{Node: node, Outcome: api.OutcomeFailed, Reason: "NodeRolloutFailed", Message: err.Error()}
}

// record counts a node's final outcome.
func (r *rollout) record(ctx workflow.Context, result api.NodeResult) {
	r.progress.Counts.Add(result.Outcome)
	if passedOver(result) && r.pacer.canaryStage == canaryStageRunning && r.pacer.isCanary[result.Node] {
		r.pacer.passedOverCanaries = append(r.pacer.passedOverCanaries, result.Node+" ("+string(result.Outcome)+" "+result.Reason+")")
	}
	switch result.Outcome {
	case api.OutcomeSucceeded:
		r.launchWindow.succeeded()
	case api.OutcomeFailed, api.OutcomeTimedOut, api.OutcomeDrainTimedOut, api.OutcomeUnhealthy, api.OutcomeRebootTimedOut, api.OutcomeCheckFailed:
		r.launchWindow.failed()
		if len(r.progress.Failures) < api.MaxReportedFailures {
			r.progress.Failures = append(r.progress.Failures, result)
		}
	}
	r.recent = append(r.recent, result)
	if len(r.recent) > recentResults {
		r.recent = r.recent[len(r.recent)-recentResults:]
	}
	r.showProgress(ctx)
}

func (r *rollout) failureBudgetSpent() bool {
	return !r.settings.FailureBudget.Allows(r.progress.Counts.Failures(), r.progress.Selected)
}

// noneMayStart says that no node may start any more, not even one that waited for another
// rollout: the failure budget is spent or (from versionStopWaits on) a canary failed.
func (r *rollout) noneMayStart() bool {
	if r.failureBudgetSpent() {
		return true
	}
	return r.features.stopWaits && r.pacer.canaryStage == canaryStageRunning && r.progress.Counts.Failures() > 0
}

// childCollector waits on many children from one coroutine. The SDK resumes every coroutine of
// a workflow on every pass of each workflow task, blocked or not, so a coroutine per node in
// flight made the parent's worker spend more on switching coroutines than on the rollout.
type childCollector struct {
	pending []pendingChild // in the order they started
}

type pendingChild struct {
	node      string
	child     workflow.ChildWorkflowFuture
	startedAt time.Time // when the run started it (handover.go hands over only children past their watch)
	outlives  bool      // started to outlive the run, so it may be handed over
	told      bool      // told the rollout at its start (NodeRolloutInput.TellWhenFree)
}

// collectChildren starts the collector's coroutine. Each child that ends is settled in the
// order the children started, which keeps replays deterministic. The coroutine waits on a
// disconnected context: an aborted rollout still collects its children as they finish their
// cleanup, as it did when each had its own coroutine.
func (r *rollout) collectChildren(ctx workflow.Context) *childCollector {
	c := &childCollector{}
	workflow.Go(ctx, func(ctx workflow.Context) {
		wait, _ := workflow.NewDisconnectedContext(ctx)
		for {
			if err := workflow.Await(wait, c.anyEnded); err != nil {
				return
			}
			for _, p := range c.takeEnded() {
				r.childEnded(ctx, p.node, p.child)
			}
		}
	})
	return c
}

func (c *childCollector) add(node string, child workflow.ChildWorkflowFuture, startedAt time.Time, outlives, told bool) {
	c.pending = append(c.pending, pendingChild{node: node, child: child, startedAt: startedAt, outlives: outlives, told: told})
}

func (c *childCollector) anyEnded() bool {
	for _, p := range c.pending {
		if p.child.IsReady() {
			return true
		}
	}
	return false
}

// takeEnded removes the children that have ended from the pending ones and returns them.
func (c *childCollector) takeEnded() []pendingChild {
	var ended []pendingChild
	still := c.pending[:0]
	for _, p := range c.pending {
		if p.child.IsReady() {
			ended = append(ended, p)
		} else {
			still = append(still, p)
		}
	}
	clear(c.pending[len(still):])
	c.pending = still
	return ended
}

// launchWindow is the number of nodes allowed in flight: it starts at the batch's initial size,
// grows each time a whole window of nodes has succeeded in a row, and never exceeds the
// parallelism ceiling (which an update may change at any time).
type launchWindow struct {
	size    int
	ceiling int
	growth  string
	step    int
	streak  int // successes since the window last grew or a node failed
}

func newLaunchWindow(b api.Batch, ceiling int) launchWindow {
	w := launchWindow{size: b.Initial, ceiling: ceiling, growth: b.Growth, step: b.Step}
	w.clamp()
	return w
}

// resumeLaunchWindow restores a window carried across continue-as-new.
func resumeLaunchWindow(b api.Batch, ceiling, size int) launchWindow {
	w := newLaunchWindow(b, ceiling)
	if size > 0 {
		w.size = size
		w.clamp()
	}
	return w
}

func (w *launchWindow) clamp() {
	if w.size > w.ceiling {
		w.size = w.ceiling
	}
	if w.size < 1 {
		w.size = 1
	}
}

// setCeiling applies a new parallelism. A fixed window follows it; a growing one is only capped.
func (w *launchWindow) setCeiling(c int) {
	if w.growth == api.GrowthFixed || w.size == w.ceiling {
		w.size = c
	}
	w.ceiling = c
	w.clamp()
}

// succeeded counts a success and grows the window once a whole window has succeeded.
func (w *launchWindow) succeeded() {
	w.streak++
	if w.streak < w.size {
		return
	}
	w.streak = 0
	switch w.growth {
	case api.GrowthLinear:
		w.size += w.step
	case api.GrowthExponential:
		w.size *= w.step
	}
	w.clamp()
}

// failed holds the window where it is: growth resumes only after a fresh run of successes.
func (w *launchWindow) failed() { w.streak = 0 }
