package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Handing nodes in flight across continue-as-new (versionHandOverInFlight). A run that
// continues as new used to wait for every node in flight first, so the window emptied for a
// Job's length at every continue-as-new: 9 % of a 100,000-node rollout at P = 200. Now the
// run asks each child in flight to tell the rollout (by workflow ID, whichever run is current)
// when it ends, and hands the nodes to the next run, which counts them in its window and
// settles each on the child's word (api.NodeFreed, which carries the result). Children start
// with an abandon close policy, so they outlive the run that started them; an abort of a later
// run cancels them by their run ID. A child terminated by hand sends no word: a worker sends
// it instead (activities.TerminatedNodeNotifier), and the busy-node recheck covers a word that
// still never comes: a child found ended without its word is settled as terminated
// (handedInLost; before versionHandedInLost it ran again).
//
// From version 2 on, a child that may outlive its run is told the rollout at its start
// (NodeRolloutInput.TellWhenFree), so the run hands it over without asking it and without
// waiting for it to age: a run of short Jobs no longer drains its window at continue-as-new.

// childOutlivesRun says whether the child this run starts now is to outlive it, so that the run
// may hand it over: only where it could (no cluster-wide budget, not converging), and only once
// the run may continue as new while the child runs (its launches and a window reach
// continueAsNewAfter). versionHandOverInFlight is asked there, once per run: a run that cannot
// continue as new on its count (most rollouts) records no marker, whose search-attribute upsert
// is an action of its own. A run that continues as new near its history limits before that
// drains its children, as before; so does a rollout terminated by force.
//
// From version 3 on, a child started once the run can no longer reach its count before its
// queue runs out (the last window of the last run) does not outlive it: the run ends rather
// than continuing as new, and such a child, told at its start, would signal a run that waits
// for its end anyway (an extra workflow task and signal for each of the last P nodes).
func (r *rollout) childOutlivesRun(ctx workflow.Context) bool {
	if r.children == nil || r.conv != nil {
		return false
	}
	if !r.features.handOverAsked && r.launchedThisRun+r.launchWindow.ceiling > r.settings.ContinueAsNewAfter {
		r.features.handOverAsked = true
		v := workflow.GetVersion(ctx, versionHandOverInFlight, workflow.DefaultVersion, 3)
		r.features.handOverInFlight = v >= 1
		r.features.tellAtStart = v >= 2
		r.features.outliveOnlyBeforeCount = v >= 3
	}
	if r.features.outliveOnlyBeforeCount && !r.mayContinueOnCount() {
		return false
	}
	return r.features.handOverInFlight
}

// mayContinueOnCount says whether this run may still continue as new on its count: it does so
// at a start with launches at continueAsNewAfter and nodes left to start, and it ends instead
// once its queue is empty and listed to the end. The node just started is in launchedThisRun
// and no longer queued; a queued node to skip counts as a start, which errs toward outliving.
func (r *rollout) mayContinueOnCount() bool {
	return !r.progress.ListingDone || r.launchedThisRun+len(r.queue) > r.settings.ContinueAsNewAfter
}

// mayHandOverInFlight says whether this run may leave its children running when it
// continues as new: only plain launching (no cluster-wide budget, whose slots the children
// hold; not converging; canaries settled), and never when the run will end another way.
func (r *rollout) mayHandOverInFlight() bool {
	return r.features.handOverInFlight && r.children != nil && r.conv == nil && !r.replacing() && !r.gate.broken() && (r.pacer.rules.Canary == nil || r.pacer.canaryStage == canaryStageDone)
}

// handOverAge is how long a child must have run before this run hands it over rather than
// waits for it: past the watch of its first workflow task (RunJob watches a short Job there for
// nodeWatchSeconds), with a margin. A child asked to report while that task runs has the task's
// completion refused for the signal, so its local activity runs again, and a child that young
// may end within the wait anyway: measured at 100,000 nodes with 5 s Jobs, handing every child
// over (about 180 signals each way per continue-as-new) cost the server more than the drain it
// saved (bench/results/NOTES.md). So a run of short Jobs drains as before, and one of long Jobs
// hands its nodes over once the youngest is past its watch, instead of idling its window for a
// Job's length.
func (r *rollout) handOverAge() time.Duration {
	if r.nodeMaintenance() != nil {
		return handOverMargin // a maintained node has no watch in its first task
	}
	return nodeWatchSeconds*time.Second + handOverMargin
}

const handOverMargin = 5 * time.Second

// untilChildrenPastWatch is how long until the youngest child in flight that must be asked is
// handOverAge old (zero or less: every one is). A child told at its start is never asked.
func (r *rollout) untilChildrenPastWatch(ctx workflow.Context) time.Duration {
	var youngest time.Time
	for _, p := range r.children.pending {
		if !p.told && p.startedAt.After(youngest) {
			youngest = p.startedAt
		}
	}
	return youngest.Add(r.handOverAge()).Sub(workflow.Now(ctx))
}

// awaitDrainOrHandOver waits until drained says the run may go on, or until every node in flight
// is a child past its watch (or was handed to this run): a timer wakes the wait when the
// youngest child comes of age.
func (r *rollout) awaitDrainOrHandOver(ctx workflow.Context, drained func() bool) error {
	handOverable := func() bool { return r.inFlightAreChildren() && r.untilChildrenPastWatch(ctx) <= 0 }
	for !drained() && !handOverable() {
		wait := r.untilChildrenPastWatch(ctx)
		if wait <= 0 || !r.inFlightAreChildren() {
			if err := workflow.Await(ctx, func() bool { return drained() || r.inFlightAreChildren() }); err != nil {
				return err
			}
			continue
		}
		if _, err := workflow.AwaitWithTimeout(ctx, wait, func() bool { return drained() || handOverable() }); err != nil {
			return err
		}
	}
	return nil
}

// inFlightAreChildren says that every node holding a launch slot is a child this run can hand
// over: one the collector waits on that was started to outlive the run, or one handed to this
// run and not yet ended.
func (r *rollout) inFlightAreChildren() bool {
	outliving := 0
	for _, p := range r.children.pending {
		if p.outlives {
			outliving++
		}
	}
	return r.inFlight == outliving+len(r.handedIn)
}

// handOverChildren asks each child in flight that was not told at its start to tell the
// rollout when it ends. A child that has already ended cannot be asked: its end comes to this
// run, which waits for it, as it does for a child whose word came here before its end.
func (r *rollout) handOverChildren(ctx workflow.Context) error {
	self := workflow.GetInfo(ctx).WorkflowExecution.ID
	r.handingOver = map[string]string{}
	type asked struct {
		node, runID string
		sent        workflow.Future
	}
	var asks []asked
	// A copy: the collector takes ended children out of its list while this waits.
	for _, p := range slices.Clone(r.children.pending) {
		var started workflow.Execution
		if err := p.child.GetChildWorkflowExecution().Get(ctx, &started); err != nil {
			continue // never started: the collector settles it
		}
		if p.told {
			r.handingOver[p.node] = started.RunID
			continue
		}
		asks = append(asks, asked{node: p.node, runID: started.RunID, sent: workflow.SignalExternalWorkflow(ctx,
			started.ID, started.RunID, SignalNotifyWhenFree, NodeWaiter{WorkflowID: self})})
	}
	for _, a := range asks {
		if a.sent.Get(ctx, nil) == nil {
			r.handingOver[a.node] = a.runID
		}
	}
	// Then every node still holding a slot must be one the next run can take over: a child
	// found ended may have left its node running again from a coroutine (refused as busy and
	// freed), and that one is waited for, as before.
	return workflow.Await(ctx, func() bool {
		for _, p := range r.children.pending {
			if _, ok := r.handingOver[p.node]; !ok {
				return false
			}
		}
		return r.inFlightAreChildren() && !r.awaitsEndAfterWord()
	})
}

// awaitsEndAfterWord says whether a child's word has come to this run before its end did
// (ownChildWord). Only runs that tell their children at the start wait for such an end:
// before, a run continued as new without it, and its histories replay that way.
func (r *rollout) awaitsEndAfterWord() bool {
	return r.features.tellAtStart && len(r.wordsBeforeEnd) > 0
}

// ownChildWord notes the word of a child of this run that ended while this run still runs: it
// was told the rollout at its start (or asked), and its end comes next, to this run. Until that
// end has come the run may not hand the node over, whose word the next run would never hear.
func (r *rollout) ownChildWord(ctx workflow.Context, f api.NodeFreed) {
	if r.children == nil {
		return
	}
	for _, p := range r.children.pending {
		if p.node == f.Node {
			if wordOfAnotherRun(ctx, p, f) {
				return
			}
			if r.wordsBeforeEnd == nil {
				r.wordsBeforeEnd = map[string]bool{}
			}
			r.wordsBeforeEnd[f.Node] = true
			return
		}
	}
}

// wordOfAnotherRun says whether a word names a run of the node other than this run's child: a
// worker's bare word for an earlier run, terminated by hand (activities.TerminatedNodeNotifier
// sends it to every running rollout). Before versionWordOfAnotherRun the run took it as its
// child's, and waited for that child's whole Job before it continued as new. A word without a
// run (an older worker's) may be the child's, and is taken as it.
func wordOfAnotherRun(ctx workflow.Context, p pendingChild, f api.NodeFreed) bool {
	if f.RunID == "" {
		return false
	}
	// A child not yet known started is taken as the word's sender, as before: no word can come
	// from it, but waiting for its end costs only time, where a word lost costs a recheck.
	started := p.child.GetChildWorkflowExecution()
	var child workflow.Execution
	if !started.IsReady() || (started.Get(ctx, &child) == nil && child.RunID == f.RunID) {
		return false
	}
	return workflow.GetVersion(ctx, versionWordOfAnotherRun, workflow.DefaultVersion, 1) >= 1
}

// carriedInFlight is what the next run takes over: this run's children still running, then the
// nodes it was handed and still waits on.
func (r *rollout) carriedInFlight() []api.InFlightNode {
	var carried []api.InFlightNode
	for _, p := range r.children.pending {
		carried = append(carried, api.InFlightNode{Name: p.node, Domain: r.pacer.domainOf[p.node], RunID: r.handingOver[p.node]})
	}
	for _, node := range workflow.DeterministicKeys(r.handedIn) {
		carried = append(carried, api.InFlightNode{Name: node, Domain: r.pacer.domainOf[node], RunID: r.handedIn[node]})
	}
	return carried
}

// takeOverInFlight counts the nodes the previous run handed over in flight as this run's: each
// holds its launch slot and its domain's until its child's word comes. It runs before any
// handler, so no word is missed.
func (r *rollout) takeOverInFlight(carried []api.InFlightNode) {
	r.handedIn = map[string]string{}
	for _, n := range carried {
		r.pacer.assign(queuedNode{name: n.Name, domain: n.Domain})
		r.reserve(n.Name)
		r.started++
		r.pacer.startedByDomain[n.Domain]++
		r.handedIn[n.Name] = n.RunID
	}
	r.progress.InFlightNodes = nil
}

// handedInEnded settles a handed-over node on its child's word, and reports whether the word
// was for one. A word without a result (a worker from before results were sent ran the child)
// leaves the node holding its slot while it runs again: the new child reads the outcome from
// the Job.
func (r *rollout) handedInEnded(ctx workflow.Context, f api.NodeFreed) bool {
	runID, ok := r.handedIn[f.Node]
	if !ok || (f.RunID != "" && f.RunID != runID) {
		return false
	}
	delete(r.handedIn, f.Node)
	r.childStopped(f.Node)
	if f.Result == nil {
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, f.Node, r.runAdmitted(ctx, f.Node, false))
		})
		return true
	}
	result := *f.Result
	result.Node = f.Node
	r.settle(ctx, f.Node, nodeEnd{result: result, holdsSlot: true, started: true})
	return true
}

// recheckHandedIn asks the handed-over children again on the busy-node recheck, in case one
// ended without its word reaching this run (terminated by hand): one that has ended is
// settled by handedInLost.
func (r *rollout) recheckHandedIn(ctx workflow.Context) {
	if len(r.handedIn) == 0 {
		return
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		self := workflow.GetInfo(ctx).WorkflowExecution.ID
		recheck := busyNodeRecheck
		for {
			none, err := workflow.AwaitWithTimeout(ctx, recheck, func() bool { return len(r.handedIn) == 0 })
			if err != nil || none {
				return
			}
			recheck = min(2*recheck, busyNodeMaxRecheck)
			for _, node := range workflow.DeterministicKeys(r.handedIn) {
				runID := r.handedIn[node]
				err := workflow.SignalExternalWorkflow(ctx, r.cluster.NodeWorkflowID(node), runID, SignalNotifyWhenFree, NodeWaiter{WorkflowID: self}).Get(ctx, nil)
				if ctx.Err() != nil {
					return
				}
				if err != nil && r.handedIn[node] == runID {
					r.handedInLost(ctx, node, runID, nil)
				}
			}
		}
	})
}

// handedInLost settles a handed-over node whose workflow was found ended while its word never
// came. A node workflow sends its word before it ends, so the word would have come first:
// only a termination (the UI's Terminate) ends one so. From versionHandedInLost on, the node is
// settled as this run's own terminated child is (settle records a maintained node's failure
// on the Node, where its Job's success stands). Before, the recheck ran the node again and an
// abort counted it as the before result says (aborted). Either way a rollout that stopped
// first left that success on the Node of a node whose maintenance never ended, and a re-run
// skipped it as done (the model test found it).
func (r *rollout) handedInLost(ctx workflow.Context, node, runID string, before *api.NodeResult) {
	if workflow.GetVersion(ctx, versionHandedInLost, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		r.handedInEnded(ctx, api.NodeFreed{Node: node, RunID: runID, Result: before})
		return
	}
	r.handedInEnded(ctx, activities.TerminatedNodeWord(node, runID))
}

// cancelHandedIn asks the handed-over children to stop, as an abort does to this run's own.
// One that has already ended without its word reaching this run is settled by handedInLost,
// so the abort never waits for a word that cannot come. A server accepts the cancel of a run
// that has ended (seen on the dev server: ExternalWorkflowExecutionCancelRequested for a
// terminated node), so from versionHandedInLost on each is then asked for its word too, which
// fails for an ended run; before, such an abort waited for the busy-node recheck (10 minutes
// and more).
func (r *rollout) cancelHandedIn(ctx workflow.Context) {
	nodes := workflow.DeterministicKeys(r.handedIn)
	sent := make([]workflow.Future, len(nodes))
	for i, node := range nodes {
		sent[i] = workflow.RequestCancelExternalWorkflow(ctx, r.cluster.NodeWorkflowID(node), r.handedIn[node])
	}
	for i, node := range nodes {
		runID := r.handedIn[node]
		if sent[i].Get(ctx, nil) != nil && r.handedIn[node] == runID {
			r.handedInLost(ctx, node, runID, &api.NodeResult{Node: node,
				Outcome: api.OutcomeAborted, Reason: api.ReasonAborted, Message: "aborted; its node workflow had already ended"})
		}
	}
	if len(r.handedIn) == 0 || workflow.GetVersion(ctx, versionHandedInLost, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	self := workflow.GetInfo(ctx).WorkflowExecution.ID
	nodes = workflow.DeterministicKeys(r.handedIn)
	asked := make([]workflow.Future, len(nodes))
	for i, node := range nodes {
		asked[i] = workflow.SignalExternalWorkflow(ctx, r.cluster.NodeWorkflowID(node), r.handedIn[node], SignalNotifyWhenFree, NodeWaiter{WorkflowID: self})
	}
	for i, node := range nodes {
		runID := r.handedIn[node]
		if asked[i].Get(ctx, nil) != nil && r.handedIn[node] == runID {
			r.handedInLost(ctx, node, runID, nil)
		}
	}
}
