package workflows

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// The Rollout workflow's life: it validates the request, prepares the template, then runs its
// nodes (launching: queue.go, admission.go, launch.go; pacing: pacing.go and pacer.go) until
// every one is handled, the failure budget is spent, it continues as new (history.go), or it
// is aborted; steering.go answers its signals, updates and queries.

// Tuning of the Rollout workflow that is not part of the request.
const (
	// listPageSize is how many node names one ListNodes call returns to the workflow.
	listPageSize = 1000
	// recentResults is how many of the latest node results the status query shows.
	recentResults = 20
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
	// The run of a replacing request starts afresh but for what its predecessor handed on.
	var replaced *api.Progress
	if carried != nil && carried.Replaced {
		replaced, carried = carried, nil
	}
	r := &rollout{req: req, settings: req.Settings(), requester: requesterOf(ctx), cluster: cluster}
	r.features = startFeatures(ctx)
	r.restore(ctx, carried)
	if replaced != nil {
		r.progress.Paused, r.progress.LastStartAt = replaced.Paused, replaced.LastStartAt
	}
	// Handlers come before the first blocking call, so status and setParallelism work while
	// the template is being prepared.
	if err := r.registerHandlers(ctx); err != nil {
		return api.RolloutResult{}, err
	}
	if err := r.startConverge(ctx, carried); err != nil {
		return api.RolloutResult{}, err
	}
	if !req.DryRun {
		r.clusterSlots = newClusterSlots(ctx, cluster)
		if r.clusterSlots != nil {
			r.signals = append(r.signals, r.clusterSlots.grants)
		}
		if r.features.collect && r.clusterSlots == nil {
			r.children = r.collectChildren(ctx)
		}
	}
	if carried == nil {
		if err := r.prepare(ctx); err != nil {
			return api.RolloutResult{}, err
		}
		if err := r.prepareConverge(ctx); err != nil {
			return api.RolloutResult{}, err
		}
	}
	r.prepared = true
	if req.DryRun {
		return r.dryRun(ctx)
	}
	return r.run(ctx)
}

type rollout struct {
	req          api.RolloutRequest
	settings     api.Settings
	progress     api.Progress
	launchWindow launchWindow
	// pacer is the state of the request's pacing (maintenance window, domains, canaries, order).
	pacer pacer

	queue           []queuedNode
	inFlight        int // nodes holding a launch slot: started, or reserved while they wait for a cluster slot
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
	// handingOver is, once this run hands its children in flight to the next
	// (versionHandOverInFlight), each asked child's run ID by node; handedIn, the nodes the
	// previous run handed to this one and not yet ended (handover.go).
	handingOver map[string]string
	handedIn    map[string]string
	// wordsBeforeEnd marks this run's children whose word that they ended came before their
	// end did (handover.go, ownChildWord).
	wordsBeforeEnd map[string]bool

	// freed marks busy nodes whose holder said it finished; signals holds the channels whose
	// pending signals must be read before the run may continue as new.
	freed   map[string]bool
	signals []workflow.ReceiveChannel

	requester string // from the memo, for the Jobs and Node markers

	cluster      api.Cluster
	clusterSlots *clusterSlots // the cluster-wide budget's slots; nil without one
	gate         *metricGate   // gates.prometheus; nil without one

	// undoPlan is what PlanUndo found for an undo (undoOf) in this run, by node: the dry
	// run shows it.
	undoPlan map[string]*api.UndoNode
	// givenPlace is each node's place in the request's nodes list (order given).
	givenPlace map[string]int

	// children waits on the children that started without waiting; nil in runs before
	// versionChildCollector and where a cluster-wide budget makes every node wait for a slot.
	children *childCollector

	// conv is a converging rollout's state (converge.go); nil for one that runs once.
	conv *convergeState
}

// restore takes over carried progress, or starts it afresh on the first run.
func (r *rollout) restore(ctx workflow.Context, carried *api.Progress) {
	r.waiting = map[string]bool{}
	r.freed = map[string]bool{}
	var carriedGate *api.GateState
	if carried != nil {
		carriedGate = carried.Gate
	}
	r.gate = newMetricGate(ctx, r.settings.MetricGate, carriedGate)
	if carried != nil {
		r.progress = *carried
		r.pacer = newPacer(r.settings.Pacing, carried.Pacing)
		r.queue = restoredQueue(carried.Pacing)
		r.launchWindow = resumeLaunchWindow(r.settings.Batch, r.progress.Parallelism, r.progress.Window)
		r.takeOverInFlight(carried.InFlightNodes)
		return
	}
	r.progress = api.Progress{Parallelism: r.settings.Parallelism, StartedAt: workflow.Now(ctx)}
	r.pacer = newPacer(r.settings.Pacing, nil)
	r.launchWindow = newLaunchWindow(r.settings.Batch, r.settings.Parallelism)
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
		Namespace:    r.settings.Namespace,
		Template:     r.req.JobTemplate,
		TemplateRef:  r.req.JobTemplateRef,
		Store:        store,
		NodeSelector: r.req.NodeSelector,
		Parallelism:  r.settings.Parallelism,
		Cordon:       r.settings.Maintenance != nil && r.settings.Maintenance.Cordon,
		Drain:        r.settings.Maintenance != nil && r.settings.Maintenance.Drain,
		OnSuccess:    onSuccessOf(r.settings.Maintenance),
	}).Get(ctx, &prepared)
	if err != nil {
		return asWorkflowError(err)
	}
	if err := r.prepareStepTemplates(ctx); err != nil {
		return err
	}
	r.progress.Template = prepared.Template
	r.progress.TemplateHash = prepared.Hash
	if r.features.guarantees {
		r.progress.Template = ""
	}
	r.progress.MaxParallelism = prepared.MaxParallelism
	r.progress.TaintCheck = r.taintCheck(prepared)
	if err := r.prepareUndo(ctx, store); err != nil {
		return err
	}
	memo := map[string]any{"templateHash": prepared.Hash, "namespace": r.settings.Namespace}
	if steps := r.stepTemplateHashes(); len(steps) > 0 {
		memo["stepTemplateHashes"] = steps // what Lineage lets the nodes' step Jobs run
	}
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

// run launches nodes until every one is handled, the failure budget is spent, the run has
// launched its share (continue-as-new), or the rollout is cancelled.
func (r *rollout) run(ctx workflow.Context) (api.RolloutResult, error) {
	r.features.readAtRun(ctx)
	r.recheckHandedIn(ctx)
	if err := r.checkMaintenanceWindow(ctx); err != nil {
		return api.RolloutResult{}, err
	}
	r.watchMetricGate(ctx)
	defer r.stopMetricGate()
	if stop, res, err := r.runCanaries(ctx); stop {
		return res, err
	}
	r.resumeWaiting(ctx)
	continueAsNew := false
	var listErr error
	for !r.failureBudgetSpent() {
		if len(r.queue) == 0 && r.progress.ListingDone {
			if !r.converging() {
				break
			}
			// Converging: wait to be told of changed nodes, unless the history is full.
			if r.dueToContinueAsNew(ctx) {
				continueAsNew = true
				r.continuing = r.features.admission
				break
			}
			stop, err := r.awaitChanges(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return r.cancelled(ctx)
				}
				listErr = err
				break
			}
			if stop {
				break
			}
			continue
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
			launching, err = r.startNext(ctx, r.failureBudgetSpent)
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
	if r.handingOver != nil {
		// Its nodes in flight are the next run's: whatever else ends this rollout (the metric
		// gate, the failure budget) the next run sees once it has them.
		return r.continueAsNew(ctx)
	}
	r.stopMetricGate()
	if (r.gate.broken() || listErr != nil) && r.replacementTakesOver(ctx) {
		return r.handOver(ctx) // the replacing request's run lists and gates afresh
	}
	if r.gate.broken() {
		return r.metricGateFailed(ctx)
	}
	if listErr != nil {
		return r.listingFailed(ctx, listErr)
	}
	if r.replacing() {
		return r.handOver(ctx)
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
	drained := func() bool { return settled() || (r.inFlight == 0 && (continuing || r.historyNearLimits(ctx))) }
	if continuing && r.mayHandOverInFlight() {
		err = r.awaitDrainOrHandOver(ctx, drained)
	} else {
		err = workflow.Await(ctx, drained)
	}
	if err != nil || settled() {
		return false, err
	}
	if r.inFlight > 0 {
		// A child that ends meanwhile may leave its node waiting for another rollout: the
		// waiting nodes are handed over after the children.
		if err := r.handOverChildren(ctx); err != nil {
			return false, err
		}
	}
	if len(r.waiting) > 0 {
		if workflow.GetVersion(ctx, versionHandOverWaiting, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return false, workflow.Await(ctx, settled)
		}
		for _, node := range workflow.DeterministicKeys(r.waiting) {
			r.handedOver = append(r.handedOver, api.PacedNode{Name: node, Domain: r.pacer.domainOf[node]})
		}
	}
	return true, nil
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
			r.req.Name, quoteOrStart(r.progress.Cursor), msg, result.Counts.Finished()), errType, nil, result)
}

// cancelled waits for every child to delete its Job, then ends the workflow as cancelled.
func (r *rollout) cancelled(ctx workflow.Context) (api.RolloutResult, error) {
	r.draining = true
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	r.cancelHandedIn(cleanup)
	_ = workflow.Await(cleanup, func() bool { return r.inFlight == 0 && len(r.waiting) == 0 })
	return r.result(cleanup), temporal.NewCanceledError(r.result(cleanup))
}

func (r *rollout) continueAsNew(ctx workflow.Context) (api.RolloutResult, error) {
	// A signal or update that arrived in the same workflow task as the decision is handled
	// first: the root coroutine runs before the one that reads the signals, and the state is
	// copied below. A signal is in its channel only if no coroutine waited on it: one handed
	// straight to the waiting reader is not counted by Len, so the run also lets every
	// coroutine ready in this task run first (versionReadWordsBeforeCAN).
	readyRan := func() bool { return true }
	if workflow.GetVersion(ctx, versionReadWordsBeforeCAN, workflow.DefaultVersion, 1) == 1 {
		readyRan = afterReadyCoroutines(ctx)
	}
	if err := r.awaitWordsRead(ctx, readyRan); err != nil {
		return r.cancelled(ctx)
	}
	progress := r.progress
	progress.Window = r.launchWindow.size
	progress.Parallelism = r.launchWindow.ceiling
	progress.ContinuedAsNew++
	progress.Gate = r.gate.carried()
	// Listed but unlaunched nodes are listed again after the cursor by the next run, or
	// (pacing) carried as they are.
	progress.ListingDone = r.progress.ListingDone && len(r.queue) == 0
	if r.settings.Pacing.Active() {
		progress.ListingDone = r.progress.ListingDone
		progress.Pacing = r.pacer.carried(r.queue)
	}
	if r.handedOver != nil {
		progress.WaitingNodes = r.handedOver
		progress.Counts.Waiting = 0 // nothing else is in flight: every waiting node is handed over
	}
	if r.handingOver != nil {
		progress.InFlightNodes = r.carriedInFlight()
		progress.Counts.Running -= len(progress.InFlightNodes) // the next run counts them again
	}
	r.carryConverge(&progress)
	progress.Failures = make([]api.NodeResult, len(r.progress.Failures))
	for i, f := range r.progress.Failures {
		progress.Failures[i] = carriedFailure(f)
	}
	return api.RolloutResult{}, workflow.NewContinueAsNewError(ctx, api.RolloutWorkflow, r.req, &progress)
}

// awaitWordsRead returns once every signal and update that reached the run has been applied:
// readyRan says the coroutines ready in this task have run.
func (r *rollout) awaitWordsRead(ctx workflow.Context, readyRan func() bool) error {
	return workflow.Await(ctx, func() bool {
		if !readyRan() {
			return false
		}
		for _, c := range r.signals {
			if c.Len() > 0 {
				return false
			}
		}
		return workflow.AllHandlersFinished(ctx) && !r.awaitsEndAfterWord()
	})
}

func (r *rollout) finish(ctx workflow.Context) (api.RolloutResult, error) {
	r.done = true
	result := r.result(ctx)
	if !r.failureBudgetSpent() {
		return result, nil
	}
	names := make([]string, 0, len(result.Failures))
	for _, f := range result.Failures {
		names = append(names, f.Node+" ("+string(f.Outcome)+" "+f.Reason+")")
	}
	msg := fmt.Sprintf("rollout %s stopped: %d of %d selected nodes failed, over the budget of %s; failed: %s",
		r.req.Name, result.Counts.Failures(), result.Selected, r.settings.FailureBudget, strings.Join(names, ", "))
	return result, temporal.NewNonRetryableApplicationError(msg, api.ErrFailureBudgetExceeded, nil, result)
}

func (r *rollout) result(ctx workflow.Context) api.RolloutResult {
	return api.RolloutResult{
		Name:           r.req.Name,
		TemplateHash:   r.progress.TemplateHash,
		Selected:       r.progress.Selected,
		Counts:         r.counts(),
		Failures:       r.progress.Failures,
		ContinuedAsNew: r.progress.ContinuedAsNew,
		StartedAt:      r.progress.StartedAt,
		FinishedAt:     workflow.Now(ctx),
	}
}

// dryRun lists every selected node and says what would happen to it, starting nothing.
func (r *rollout) dryRun(ctx workflow.Context) (api.RolloutResult, error) {
	var planned []api.PlannedNode
	for !r.progress.ListingDone {
		if err := r.listMore(ctx); err != nil {
			return api.RolloutResult{}, err // nothing was started: there is nothing to drain
		}
		for _, n := range r.queue {
			r.progress.Cursor = n.name
			switch n.skip {
			case "done":
				r.progress.Counts.Skipped++
			case "missing":
				r.progress.Counts.NodeGone++
			case api.SkipUntoleratedTaint:
				r.progress.Counts.Skipped++
			default:
				r.progress.Counts.Pending++
			}
			if len(planned) < api.MaxExplicitNodes {
				p := api.PlannedNode{Node: n.name, Skip: n.skip, Reason: n.reason, Undo: r.undoPlan[n.name]}
				if n.skip == "" {
					p.JobPrefix = jobspec.JobNamePrefix(r.req.Name, n.name)
				}
				planned = append(planned, p)
			}
		}
		r.queue = nil
	}
	if err := planDrains(ctx, r.settings.Maintenance, planned); err != nil {
		return api.RolloutResult{}, err
	}
	result := r.result(ctx)
	result.Planned = planned
	return result, nil
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

// Carried failures keep what identifies the failure; the log tail stays in the node's own
// result and Event, so the state handed across continue-as-new stays small.
const (
	maxCarriedMessage     = 512
	maxCarriedTermination = 256
)

// carriedFailure is a failed node's result trimmed for continue-as-new.
func carriedFailure(r api.NodeResult) api.NodeResult {
	r.LogTail = ""
	r.Message = truncateUTF8(r.Message, maxCarriedMessage)
	r.TerminationMessage = truncateUTF8(r.TerminationMessage, maxCarriedTermination)
	return r
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
