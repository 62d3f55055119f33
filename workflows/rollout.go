package workflows

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// Tuning of the Rollout workflow that is not part of the request.
const (
	// listPageSize is how many node names one ListNodes call returns to the workflow.
	listPageSize = 1000
	// recentResults is how many of the latest node results the status query shows.
	recentResults = 20
	// busyNodeBackoff and busyNodeMaxBackoff pace retries of a node that another rollout holds
	// in runs from before the busy node was told when it frees.
	busyNodeBackoff    = 5 * time.Second
	busyNodeMaxBackoff = time.Minute
	// busyNodeRecheck is how long a waiting node trusts the holder to tell it when the node
	// frees before it tries again anyway (the holder may run older code, or be terminated);
	// each look doubles the next wait, up to busyNodeMaxRecheck.
	busyNodeRecheck    = 10 * time.Minute
	busyNodeMaxRecheck = 2 * time.Hour

	// Every continue-as-new drains the window, so a run goes on until its history nears the
	// server's warning limits (10,240 events, 10 MiB), not to its earlier suggestion (4,096
	// events or 4 MiB, about 900 nodes). The margin is what the drain itself adds: a few events
	// and at most a result per node in flight.
	historyEventsBeforeContinue = 9000
	historyBytesBeforeContinue  = 8 << 20
	drainEventsPerNode          = 4
	drainBytesPerNode           = 6 << 10
)

// Rollout runs NodeRollout on every selected node, at most a window of them at a time.
// Validation comes first and fails the workflow with a non-retryable InvalidRequest. carried is
// the state a previous run handed over when it continued as new; callers never set it.
func Rollout(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	return rolloutIn(ctx, api.Cluster{}, req, carried)
}

// rolloutIn is Rollout on a worker of the given cluster.
func rolloutIn(ctx workflow.Context, cluster api.Cluster, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	continued := workflow.GetInfo(ctx).ContinuedExecutionRunID != ""
	if legacy := req.TakeCarriedProgress(); carried == nil {
		carried = legacy
	}
	if carried != nil && !continued {
		return api.RolloutResult{}, temporal.NewNonRetryableApplicationError(
			"invalid rollout request: progress: is internal state that only the workflow itself sets when it continues as new; start the rollout with the request alone",
			api.ErrInvalidRequest, nil)
	}
	if problems := req.Problems(); len(problems) > 0 {
		return api.RolloutResult{}, invalidRequest("invalid rollout request: ", problems)
	}
	r := &rollout{req: req, s: req.Settings(), requester: requesterOf(ctx), cluster: cluster}
	r.features = startFeatures(ctx)
	r.restore(ctx, carried)
	// Handlers come before the first blocking call, so status and setParallelism work while
	// the template is being prepared.
	if err := r.registerHandlers(ctx); err != nil {
		return api.RolloutResult{}, err
	}
	if !req.DryRun {
		r.slots = newClusterSlots(ctx, cluster)
		if r.slots != nil {
			r.signals = append(r.signals, r.slots.grants)
		}
		if r.features.collect && r.slots == nil {
			r.children = r.collectChildren(ctx)
		}
	}
	if carried == nil {
		if err := r.prepare(ctx); err != nil {
			return api.RolloutResult{}, err
		}
	}
	r.prepared = true
	if req.DryRun {
		return r.dryRun(ctx)
	}
	return r.run(ctx)
}

// queuedNode is a listed node not yet handled, in name order.
type queuedNode struct {
	name   string
	skip   string // "", "done" or "missing"
	domain string // value of topology.key (pacing only)
	rank   string // value of order.label (pacing only)
}

type rollout struct {
	req api.RolloutRequest
	s   api.Settings
	p   api.Progress
	win window
	// pace is the state of the request's pacing (windows, domains, canaries, order).
	pace pacer

	queue           []queuedNode
	inFlight        int // nodes holding a window slot: started, or reserved while they wait for a cluster slot
	started         int // nodes whose child workflow has started and not yet ended
	waiting         map[string]bool
	recent          []api.NodeResult
	launchedThisRun int
	// features are what this run does by the versions its history recorded (versions.go).
	features features
	// continuing: the run has decided to continue as new; nodes waiting for another rollout
	// stop looking on a timer and wait to be told, so the history stops growing.
	continuing bool
	// prepared: the template and the worker's policy are known (MaxParallelism is the cap).
	prepared bool
	draining bool
	done     bool
	// handedOver holds the waiting nodes this run hands to the next one; once set, none of
	// them starts here.
	handedOver []api.PacedNode

	// freed marks busy nodes whose holder said it finished; signals holds the channels whose
	// pending signals must be read before the run may continue as new.
	freed   map[string]bool
	signals []workflow.ReceiveChannel

	requester string // from the memo, for the Jobs and Node markers

	cluster api.Cluster
	slots   *clusterSlots // the cluster-wide budget; nil without one

	// children waits on the children that started without waiting; nil in runs before
	// versionChildCollector and where a cluster-wide budget makes every node wait for a slot.
	children *childCollector
}

// restore takes over carried progress, or starts it afresh on the first run.
func (r *rollout) restore(ctx workflow.Context, carried *api.Progress) {
	r.waiting = map[string]bool{}
	r.freed = map[string]bool{}
	if carried != nil {
		r.p = *carried
		r.pace = newPacer(r.s.Pacing, carried.Pacing)
		r.queue = restoredQueue(carried.Pacing)
		r.win = resumeWindow(r.s.Batch, r.p.Parallelism, r.p.Window)
		return
	}
	r.p = api.Progress{Parallelism: r.s.Parallelism, StartedAt: workflow.Now(ctx)}
	r.pace = newPacer(r.s.Pacing, nil)
	r.win = newWindow(r.s.Batch, r.s.Parallelism)
}

// prepare loads and checks the template once, before any node starts. From
// versionFieldGuarantees on it is stored by hash in the cluster, and only the hash travels in
// the history, so a large template costs the same per node as a small one.
func (r *rollout) prepare(ctx workflow.Context) error {
	var a *activities.Activities
	var prepared activities.PreparedTemplate
	// A dry run writes nothing to the cluster, so it checks the template without storing it.
	// Only the activity's input changes, not the commands a history records: dry runs running
	// now replay as recorded, with no version.
	store := r.features.guarantees && !r.req.DryRun
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "load and check the Job template"), a.PrepareTemplate, activities.PrepareTemplateInput{
		Namespace:    r.s.Namespace,
		Template:     r.req.JobTemplate,
		TemplateRef:  r.req.JobTemplateRef,
		Store:        store,
		NodeSelector: r.req.NodeSelector,
		Parallelism:  r.s.Parallelism,
		Cordon:       r.s.Maintenance != nil && r.s.Maintenance.Cordon,
		Drain:        r.s.Maintenance != nil && r.s.Maintenance.Drain,
	}).Get(ctx, &prepared)
	if err != nil {
		return asWorkflowError(err)
	}
	r.p.Template = prepared.Template
	r.p.TemplateHash = prepared.Hash
	if r.features.guarantees {
		r.p.Template = ""
	}
	r.p.MaxParallelism = prepared.MaxParallelism
	memo := map[string]any{"templateHash": prepared.Hash, "namespace": r.s.Namespace}
	if r.req.NodeSelector != "" {
		memo["nodeSelector"] = r.req.NodeSelector
	}
	if r.req.FieldSelector != "" {
		memo["fieldSelector"] = r.req.FieldSelector
	}
	if len(r.req.Nodes) > 0 {
		memo["nodes"] = len(r.req.Nodes)
	}
	return workflow.UpsertMemo(ctx, memo)
}

func (r *rollout) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.RolloutStatus, error) { return r.status(), nil }); err != nil {
		return err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateSetParallelism,
		func(ctx workflow.Context, in api.SetParallelismRequest) (api.SetParallelismResult, error) {
			// Before the template is prepared the worker's cap (policy maxParallelism) is not
			// known yet: the update waits for it, so the cap holds from the first instant.
			// versionCapBeforePrepare is asked only on that path.
			if !r.prepared && workflow.GetVersion(ctx, versionCapBeforePrepare, workflow.DefaultVersion, 1) == 1 {
				if err := workflow.Await(ctx, func() bool { return r.prepared }); err != nil {
					return api.SetParallelismResult{}, err
				}
				if limit := r.p.MaxParallelism; limit > 0 && in.Parallelism > limit {
					return api.SetParallelismResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
						"parallelism: the worker's policy (maxParallelism) allows at most %d, got %d", limit, in.Parallelism), api.ErrPolicyDenied, nil)
				}
			}
			previous := r.win.ceiling
			r.win.setCeiling(in.Parallelism)
			r.p.Parallelism = in.Parallelism
			r.showProgress(ctx)
			return api.SetParallelismResult{Previous: previous, Parallelism: in.Parallelism}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(in api.SetParallelismRequest) error {
			if in.Parallelism < 1 || in.Parallelism > api.MaxParallelism {
				return fmt.Errorf("parallelism: must be between 1 and %d, got %d", api.MaxParallelism, in.Parallelism)
			}
			if limit := r.p.MaxParallelism; limit > 0 && in.Parallelism > limit {
				return fmt.Errorf("parallelism: the worker's policy (maxParallelism) allows at most %d, got %d", limit, in.Parallelism)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	if err := r.registerApprove(ctx); err != nil {
		return err
	}
	pause := workflow.GetSignalChannel(ctx, api.SignalPause)
	resume := workflow.GetSignalChannel(ctx, api.SignalResume)
	freed := workflow.GetSignalChannel(ctx, SignalNodeFree)
	r.signals = []workflow.ReceiveChannel{pause, resume, freed}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.p.Paused = true })
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.p.Paused = false })
			sel.AddReceive(freed, func(c workflow.ReceiveChannel, _ bool) {
				var f NodeFreed
				c.Receive(ctx, &f)
				if r.waiting[f.Node] {
					r.freed[f.Node] = true
				}
			})
			sel.Select(ctx)
			if ctx.Err() != nil {
				return
			}
			r.showProgress(ctx)
		}
	})
	return nil
}

// run launches nodes until every one is handled, the failure budget is spent, the run has
// launched its share (continue-as-new), or the rollout is cancelled.
func (r *rollout) run(ctx workflow.Context) (api.RolloutResult, error) {
	r.features.readAtRun(ctx)
	if err := r.checkWindow(ctx); err != nil {
		return api.RolloutResult{}, err
	}
	if stop, res, err := r.runCanaries(ctx); stop {
		return res, err
	}
	r.resumeWaiting(ctx)
	continueAsNew := false
	var listErr error
	for !r.budgetExceeded() {
		if len(r.queue) == 0 && r.p.ListingDone {
			break
		}
		if r.dueToContinueAsNew(ctx) {
			continueAsNew = true
			r.continuing = r.features.admission
			break
		}
		if len(r.queue) == 0 {
			if err := r.listMore(ctx); err != nil {
				if ctx.Err() != nil {
					return r.cancelled(ctx)
				}
				// Nodes in flight still finish and are counted before the rollout fails.
				listErr = err
				break
			}
			continue
		}
		var launching bool
		var err error
		if r.features.admission {
			launching, err = r.nextAdmitted(ctx, func() bool { return r.dueToContinueAsNew(ctx) })
		} else {
			launching, err = r.startNext(ctx, r.budgetExceeded)
		}
		if err != nil {
			return r.cancelled(ctx)
		}
		if !launching {
			break
		}
	}

	r.draining = true
	r.showProgress(ctx)
	handOver, err := r.drain(ctx, continueAsNew, listErr == nil)
	if err != nil {
		return r.cancelled(ctx)
	}
	if listErr != nil {
		return r.listingFailed(ctx, listErr)
	}
	if continueAsNew || handOver {
		return r.continueAsNew(ctx)
	}
	return r.finish(ctx)
}

// drain waits for the nodes in flight and for those waiting for another rollout. From
// versionHandOverWaiting on, once nothing is in flight, it hands the waiting nodes to the next
// run (handOver) when this run continues as new anyway or its history nears the limits: each
// waiting node adds a recheck's events every two hours, so hundreds of nodes held for days
// would otherwise fill one run's history, and a run that continues as new would wait for them
// all before it did.
func (r *rollout) drain(ctx workflow.Context, continuing, mayHandOver bool) (handOver bool, err error) {
	settled := func() bool { return r.inFlight == 0 && len(r.waiting) == 0 }
	if !r.features.guarantees || !mayHandOver {
		return false, workflow.Await(ctx, settled)
	}
	err = workflow.Await(ctx, func() bool {
		return settled() || (r.inFlight == 0 && (continuing || r.historyNearLimits(ctx)))
	})
	if err != nil || settled() {
		return false, err
	}
	if workflow.GetVersion(ctx, versionHandOverWaiting, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false, workflow.Await(ctx, settled)
	}
	for _, node := range workflow.DeterministicKeys(r.waiting) {
		r.handedOver = append(r.handedOver, api.PacedNode{Name: node, Domain: r.pace.domainOf[node]})
	}
	return true, nil
}

// historyNearLimits says whether this run's history, with room for what each waiting node
// may still add, has grown as far as is safe.
func (r *rollout) historyNearLimits(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return continueAsNewDue(historyState{events: info.GetCurrentHistoryLength(), bytes: info.GetCurrentHistorySize()},
		math.MaxInt, len(r.waiting), true)
}

// resumeWaiting goes on waiting for the nodes the previous run handed over, each in a
// coroutine of its own as a node refused as busy does. runNode gives the slot taken here
// back before it waits.
func (r *rollout) resumeWaiting(ctx workflow.Context) {
	for _, n := range r.p.WaitingNodes {
		node := n.Name
		r.pace.assign(queuedNode{name: node, domain: n.Domain})
		r.inFlight++
		r.p.Counts.Running++
		r.pace.take(node)
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, node, r.runNode(ctx, node, true))
		})
	}
	r.p.WaitingNodes = nil
}

// startNext waits until a queued node may start and starts it, or records why it is skipped.
// It reports false once stop() says no node may start any more; an error means cancelled.
func (r *rollout) startNext(ctx workflow.Context, stop func() bool) (bool, error) {
	next, at := r.queue[0], 0
	if next.skip == "" {
		if err := r.awaitWindow(ctx, stop); err != nil {
			return false, err
		}
		err := workflow.Await(ctx, func() bool {
			return stop() || (!r.p.Paused && r.inFlight < r.win.size && r.pace.pick(r.queue) >= 0)
		})
		if err != nil {
			return false, err
		}
		if stop() {
			return false, nil
		}
		if !r.windowOpenNow(ctx) {
			return true, nil // it closed while every slot was taken: wait for the next opening
		}
		at = r.pace.pick(r.queue)
		next = r.queue[at]
	}
	if at == 0 {
		r.queue = r.queue[1:]
	} else {
		r.queue = append(r.queue[:at], r.queue[at+1:]...)
	}
	if !r.s.Pacing.Active() {
		r.p.Cursor = next.name
	}
	switch next.skip {
	case "done", "missing":
		r.recordSkip(ctx, next)
	default:
		r.pace.assign(next)
		r.launch(ctx, next.name)
		if r.s.DelayBetweenNodes > 0 {
			if err := r.delayNext(ctx, stop); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// recordSkip records a listed node that is not run: done for this template, or missing.
func (r *rollout) recordSkip(ctx workflow.Context, n queuedNode) {
	if n.skip == "missing" {
		r.record(ctx, api.NodeResult{Node: n.name, Outcome: api.OutcomeNodeGone, Reason: "NodeNotFound",
			Message: "no Node named " + n.name})
		return
	}
	r.record(ctx, api.NodeResult{Node: n.name, Outcome: api.OutcomeSkipped, Reason: "AlreadyDone"})
}

// delayNext waits delayBetweenNodes before the next node may start. From versionStopWaits on
// the wait ends as soon as stop says no node may start any more; the rollout's drain comes
// next. versionCutDelay is asked only then, so a delay that runs its course adds no marker.
func (r *rollout) delayNext(ctx workflow.Context, stop func() bool) error {
	if !r.features.stopWaits {
		return workflow.Sleep(ctx, r.s.DelayBetweenNodes)
	}
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	timer := workflow.NewTimer(timerCtx, r.s.DelayBetweenNodes)
	if err := workflow.Await(ctx, func() bool { return timer.IsReady() || stop() }); err != nil {
		return err
	}
	if timer.IsReady() || workflow.GetVersion(ctx, versionCutDelay, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return timer.Get(ctx, nil)
	}
	cancelTimer()
	return nil
}

// listingFailed ends a rollout whose node listing failed for good, after every node in flight
// has finished, with what was done so far.
func (r *rollout) listingFailed(ctx workflow.Context, err error) (api.RolloutResult, error) {
	r.done = true
	result := r.result(ctx)
	var appErr *temporal.ApplicationError
	errType := api.ErrRolloutFailed
	msg := err.Error()
	if errors.As(err, &appErr) {
		errType, msg = appErr.Type(), appErr.Message()
	}
	return result, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("rollout %s stopped: listing nodes after %s failed: %s (%d nodes finished before)",
			r.req.Name, quoteOrStart(r.p.Cursor), msg, result.Counts.Finished()), errType, nil, result)
}

// dueToContinueAsNew says whether this run has launched its share of nodes or its history
// has grown as far as is safe.
func (r *rollout) dueToContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return continueAsNewDue(historyState{
		launched:  r.launchedThisRun,
		events:    info.GetCurrentHistoryLength(),
		bytes:     info.GetCurrentHistorySize(),
		suggested: info.GetContinueAsNewSuggested(),
	}, r.s.ContinueAsNewAfter, r.drainingNodes(), r.features.atHistoryLimits)
}

// drainingNodes is how many nodes can still add to the history once the run decides to
// continue as new: the window, and (counted from versionFieldGuarantees on) the nodes waiting
// for another rollout.
func (r *rollout) drainingNodes() int {
	if r.features.guarantees {
		return r.win.ceiling + len(r.waiting)
	}
	return r.win.ceiling
}

// historyState is what a run knows of its own size.
type historyState struct {
	launched, events, bytes int
	suggested               bool
}

// continueAsNewDue leaves room for a full window to drain after the decision.
func continueAsNewDue(h historyState, launchLimit, window int, atLimits bool) bool {
	if h.launched >= launchLimit {
		return true
	}
	if !atLimits {
		return h.suggested
	}
	return h.events+drainEventsPerNode*window >= historyEventsBeforeContinue ||
		h.bytes+drainBytesPerNode*window >= historyBytesBeforeContinue
}

// listMore fetches the next slice of selected nodes after the cursor.
func (r *rollout) listMore(ctx workflow.Context) error {
	var a *activities.Activities
	var page activities.ListNodesResult
	err := workflow.ExecuteActivity(withAPIActivity(ctx, "list nodes after "+quoteOrStart(r.p.Cursor)), a.ListNodes, activities.ListNodesInput{
		Rollout:       r.req.Name,
		Names:         r.req.Nodes,
		Selector:      r.req.NodeSelector,
		FieldSelector: r.req.FieldSelector,
		TemplateHash:  r.p.TemplateHash,
		Rerun:         r.req.Rerun,
		After:         r.p.Cursor,
		Limit:         listPageSize,
		Labels:        r.s.Pacing.LabelKeys(),
	}).Get(ctx, &page)
	if err != nil {
		return asWorkflowError(err)
	}
	r.queue = r.queuePage(page)
	r.p.ListingDone = !page.More
	if page.Total > r.p.Selected {
		r.p.Selected = page.Total
	}
	if handled := r.p.Counts.Finished() + r.p.Counts.Running + r.p.Counts.Waiting + len(r.queue); handled > r.p.Selected {
		r.p.Selected = handled
	}
	r.showProgress(ctx)
	return nil
}

func quoteOrStart(cursor string) string {
	if cursor == "" {
		return "the start"
	}
	return cursor
}

// mergeListed puts one ListNodes slice back into a single name-ordered queue.
func mergeListed(page activities.ListNodesResult) []queuedNode {
	q := make([]queuedNode, 0, len(page.Nodes)+len(page.Done)+len(page.Missing))
	for _, n := range page.Nodes {
		q = append(q, queuedNode{name: n})
	}
	for _, n := range page.Done {
		q = append(q, queuedNode{name: n, skip: "done"})
	}
	for _, n := range page.Missing {
		q = append(q, queuedNode{name: n, skip: "missing"})
	}
	sort.Slice(q, func(i, j int) bool { return q[i].name < q[j].name })
	return q
}

// launch starts the node's child. A node that may start at once is started here and waited on
// by the one childCollector; a node that first waits (for a slot of the cluster-wide budget)
// runs in a coroutine of its own, as every node did before versionChildCollector.
func (r *rollout) launch(ctx workflow.Context, node string) {
	r.inFlight++
	r.p.Counts.Running++
	r.pace.take(node)
	r.launchedThisRun++
	if r.children != nil {
		r.children.add(node, r.startChild(ctx, node))
		return
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		r.settle(ctx, node, r.runNode(ctx, node, false))
	})
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
	if end.holdsSlot {
		r.inFlight--
		r.p.Counts.Running--
		r.pace.release(node)
	}
	r.pace.forget(node)
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
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		workflow.Go(ctx, func(ctx workflow.Context) {
			r.settle(ctx, node, r.runNode(ctx, node, true))
		})
		return
	}
	r.settle(ctx, node, nodeEnd{result: nodeResult(node, err, result), holdsSlot: true, started: true})
}

// startChild starts the node's child workflow.
func (r *rollout) startChild(ctx workflow.Context, node string) workflow.ChildWorkflowFuture {
	in := NodeRolloutInput{
		Rollout:           r.req.Name,
		Namespace:         r.s.Namespace,
		Node:              node,
		Template:          r.p.Template,
		TemplateHash:      r.p.TemplateHash,
		Owner:             r.req.Owner,
		JobTimeoutSeconds: int64(r.s.JobTimeout / time.Second),
		JobTTLSeconds:     int32(r.s.JobTTL / time.Second),
		KeepJobs:          r.s.KeepJobs,
		Requester:         r.requester,
		Maintenance:       r.s.Maintenance,
	}
	nodeWorkflow := any(NodeRollout)
	if r.features.nodeVersion >= 1 {
		nodeWorkflow = NodeRolloutV2
		if r.features.nodeVersion >= 2 {
			nodeWorkflow = NodeRolloutV3
		}
		if in.Maintenance == nil {
			in.WatchSeconds = nodeWatchSeconds
		}
	}
	r.started++
	r.pace.started[r.pace.domainOf[node]]++
	return workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, r.req.Name, node, r.cluster.NodeWorkflowID(node)), nodeWorkflow, in)
}

// runNode runs the child, waiting while another rollout holds the node; busy says the node
// was already refused as busy, so the wait comes first. While it waits it gives its window
// slot back, so a busy node never holds up the others.
func (r *rollout) runNode(ctx workflow.Context, node string, busy bool) nodeEnd {
	if r.features.admission {
		return r.runAdmitted(ctx, node, busy)
	}
	backoff, recheck := busyNodeBackoff, busyNodeRecheck
	for {
		if busy {
			// Another rollout holds the node: give the slot back and wait.
			r.inFlight--
			r.p.Counts.Running--
			r.pace.release(node)
			r.waiting[node] = true
			r.p.Counts.Waiting++
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
				waitErr = r.awaitSlotFor(ctx, node)
			}
			delete(r.waiting, node)
			delete(r.freed, node)
			r.p.Counts.Waiting--
			if waitErr != nil {
				return nodeEnd{result: api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
					Message: "aborted while waiting for another rollout to finish on the node"}, started: true}
			}
			if r.handedOver != nil {
				// The next run waits for the node: this one must start no child it would not
				// see end. A NodeFreed in the workflow task that hands over wakes the node while
				// continueAsNew reads the pending signals (the SDK's test environment delivers
				// one event per task, so it cannot show this).
				return nodeEnd{}
			}
			if r.features.guarantees && r.noneMayStart() {
				return nodeEnd{}
			}
			r.inFlight++
			r.p.Counts.Running++
			r.pace.take(node)
		}
		if err := r.slots.acquire(ctx, node, func() { r.showProgress(ctx) }, nil); err != nil {
			return nodeEnd{result: api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted,
				Message: "aborted while waiting for a slot of the cluster-wide budget"}, holdsSlot: true, started: true}
		}
		child := r.startChild(ctx, node)
		err := child.GetChildWorkflowExecution().Get(ctx, nil)
		if err == nil {
			var result api.NodeResult
			err = child.Get(ctx, &result)
			r.childStopped(node)
			r.slots.release(ctx, node)
			return nodeEnd{result: nodeResult(node, err, result), holdsSlot: true, started: true}
		}
		r.childStopped(node)
		r.slots.release(ctx, node)
		if !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			return nodeEnd{result: nodeResult(node, err, api.NodeResult{}), holdsSlot: true, started: true}
		}
		busy = true
	}
}

// waitUntilFreed asks the node's current holder to say when it finishes, and waits for that
// or, should the word never come (a holder that was terminated, or runs older code), for
// recheck: a handful of events per waiting node however long the other rollout's Job runs.
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
		return result
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == api.ErrNodeFailed && appErr.HasDetails() {
		var carried api.NodeResult
		if appErr.Details(&carried) == nil {
			return carried
		}
	}
	if temporal.IsCanceledError(err) {
		return api.NodeResult{Node: node, Outcome: api.OutcomeAborted, Reason: api.ReasonAborted, Message: err.Error()}
	}
	return api.NodeResult{Node: node, Outcome: api.OutcomeFailed, Reason: "NodeRolloutFailed", Message: err.Error()}
}

// record counts a node's final outcome.
func (r *rollout) record(ctx workflow.Context, result api.NodeResult) {
	r.p.Counts.Add(result.Outcome)
	switch result.Outcome {
	case api.OutcomeSucceeded:
		r.win.succeeded()
	case api.OutcomeFailed, api.OutcomeTimedOut, api.OutcomeDrainTimedOut, api.OutcomeUnhealthy:
		r.win.failed()
		if len(r.p.Failures) < api.MaxReportedFailures {
			r.p.Failures = append(r.p.Failures, result)
		}
	}
	r.recent = append(r.recent, result)
	if len(r.recent) > recentResults {
		r.recent = r.recent[len(r.recent)-recentResults:]
	}
	r.showProgress(ctx)
}

func (r *rollout) budgetExceeded() bool {
	return !r.s.FailureBudget.Allows(r.p.Counts.Failures(), r.p.Selected)
}

// noneMayStart says that no node may start any more, not even one that waited for another
// rollout: the failure budget is spent or (from versionStopWaits on) a canary failed.
func (r *rollout) noneMayStart() bool {
	if r.budgetExceeded() {
		return true
	}
	return r.features.stopWaits && r.pace.canaryStage == canaryStageRunning && r.p.Counts.Failures() > 0
}

// cancelled waits for every child to delete its Job, then ends the workflow as cancelled.
func (r *rollout) cancelled(ctx workflow.Context) (api.RolloutResult, error) {
	r.draining = true
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(cleanup, func() bool { return r.inFlight == 0 && len(r.waiting) == 0 })
	return r.result(cleanup), temporal.NewCanceledError(r.result(cleanup))
}

func (r *rollout) continueAsNew(ctx workflow.Context) (api.RolloutResult, error) {
	// A signal or update that arrived in the same workflow task as the decision is handled
	// first: the root coroutine runs before the one that reads the signals, and the state is
	// copied below.
	err := workflow.Await(ctx, func() bool {
		for _, c := range r.signals {
			if c.Len() > 0 {
				return false
			}
		}
		return workflow.AllHandlersFinished(ctx)
	})
	if err != nil {
		return r.cancelled(ctx)
	}
	progress := r.p
	progress.Window = r.win.size
	progress.Parallelism = r.win.ceiling
	progress.ContinuedAsNew++
	// Listed but unlaunched nodes are listed again after the cursor by the next run, or
	// (pacing) carried as they are.
	progress.ListingDone = r.p.ListingDone && len(r.queue) == 0
	if r.s.Pacing.Active() {
		progress.ListingDone = r.p.ListingDone
		progress.Pacing = r.pace.carried(r.queue)
	}
	if r.handedOver != nil {
		progress.WaitingNodes = r.handedOver
		progress.Counts.Waiting = 0 // nothing else is in flight: every waiting node is handed over
	}
	progress.Failures = make([]api.NodeResult, len(r.p.Failures))
	for i, f := range r.p.Failures {
		progress.Failures[i] = carriedFailure(f)
	}
	return api.RolloutResult{}, workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, r.req, &progress)
}

func (r *rollout) finish(ctx workflow.Context) (api.RolloutResult, error) {
	r.done = true
	result := r.result(ctx)
	if !r.budgetExceeded() {
		return result, nil
	}
	names := make([]string, 0, len(result.Failures))
	for _, f := range result.Failures {
		names = append(names, f.Node+" ("+string(f.Outcome)+" "+f.Reason+")")
	}
	msg := fmt.Sprintf("rollout %s stopped: %d of %d selected nodes failed, over the budget of %s; failed: %s",
		r.req.Name, result.Counts.Failures(), result.Selected, r.s.FailureBudget, strings.Join(names, ", "))
	return result, temporal.NewNonRetryableApplicationError(msg, api.ErrFailureBudgetExceeded, nil, result)
}

func (r *rollout) result(ctx workflow.Context) api.RolloutResult {
	return api.RolloutResult{
		Name:           r.req.Name,
		TemplateHash:   r.p.TemplateHash,
		Selected:       r.p.Selected,
		Counts:         r.p.Counts,
		Failures:       r.p.Failures,
		ContinuedAsNew: r.p.ContinuedAsNew,
		StartedAt:      r.p.StartedAt,
		FinishedAt:     workflow.Now(ctx),
	}
}

// dryRun lists every selected node and says what would happen to it, starting nothing.
func (r *rollout) dryRun(ctx workflow.Context) (api.RolloutResult, error) {
	var planned []api.PlannedNode
	for !r.p.ListingDone {
		if err := r.listMore(ctx); err != nil {
			return api.RolloutResult{}, err // nothing was started: there is nothing to drain
		}
		for _, n := range r.queue {
			r.p.Cursor = n.name
			switch n.skip {
			case "done":
				r.p.Counts.Skipped++
			case "missing":
				r.p.Counts.NodeGone++
			default:
				r.p.Counts.Pending++
			}
			if len(planned) < api.MaxExplicitNodes {
				p := api.PlannedNode{Node: n.name, Skip: n.skip}
				if n.skip == "" {
					p.JobPrefix = jobspec.JobNamePrefix(r.req.Name, n.name)
				}
				planned = append(planned, p)
			}
		}
		r.queue = nil
	}
	if err := planDrains(ctx, r.s.Maintenance, planned); err != nil {
		return api.RolloutResult{}, err
	}
	result := r.result(ctx)
	result.Planned = planned
	return result, nil
}

// status answers the status query.
func (r *rollout) status() api.RolloutStatus {
	c := r.p.Counts
	c.Pending = max(0, r.p.Selected-c.Finished()-c.Running-c.Waiting)
	phase := "running"
	switch {
	case r.done:
		phase = "done"
	case r.draining:
		phase = "draining"
	case r.p.Paused:
		phase = "paused"
	case r.pace.phaseWord() != "":
		phase = r.pace.phaseWord()
	}
	waiting := workflow.DeterministicKeys(r.waiting)
	var pacing *api.PacingStatus
	if r.s.Pacing.Active() {
		pacing = r.pace.status()
	}
	return api.RolloutStatus{
		Pacing:                pacing,
		Name:                  r.req.Name,
		Phase:                 phase,
		Paused:                r.p.Paused,
		Parallelism:           r.win.ceiling,
		Window:                r.win.size,
		Selected:              r.p.Selected,
		ListingDone:           r.p.ListingDone,
		Counts:                c,
		Waiting:               waiting,
		WaitingForClusterSlot: r.slots.waitingNodes(),
		Recent:                append([]api.NodeResult(nil), r.recent...),
		Failures:              append([]api.NodeResult(nil), r.p.Failures...),
		ContinuedAsNew:        r.p.ContinuedAsNew,
		TemplateHash:          r.p.TemplateHash,
		StartedAt:             r.p.StartedAt,
	}
}

// showProgress updates the workflow's current details shown in the Temporal UI.
func (r *rollout) showProgress(ctx workflow.Context) {
	st := r.status()
	c := st.Counts
	workflow.SetCurrentDetails(ctx, fmt.Sprintf(
		"**%s** %d/%d done: %d succeeded, %d failed, %d timed out, %d skipped, %d gone, %d aborted; %d running, %d waiting; window %d of %d",
		st.Phase, c.Finished(), st.Selected, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone, c.Aborted,
		c.Running, c.Waiting, st.Window, st.Parallelism)+r.slots.describeWaits()+r.pace.details())
}

// asWorkflowError lifts a non-retryable activity error to the workflow's own failure, so the
// caller sees e.g. InvalidRequest at the top instead of behind an ActivityError.
func asWorkflowError(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return temporal.NewNonRetryableApplicationError(appErr.Message(), appErr.Type(), nil)
	}
	return err
}
