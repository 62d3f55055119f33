package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// Steering a running rollout: the pause, resume and nodeFree signals, the setParallelism and
// approve updates, the status query and the details the UI shows.

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
				if limit := r.progress.MaxParallelism; limit > 0 && in.Parallelism > limit {
					return api.SetParallelismResult{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
						"parallelism: the worker's policy (maxParallelism) allows at most %d, got %d", limit, in.Parallelism), api.ErrPolicyDenied, nil)
				}
			}
			previous := r.launchWindow.ceiling
			r.launchWindow.setCeiling(in.Parallelism)
			r.progress.Parallelism = in.Parallelism
			if r.replacing() {
				// The operator's latest word on the pace holds in the replacing run too. Only
				// the continue-as-new input changes, which replay does not compare.
				r.conv.Replacement.Parallelism = in.Parallelism
			}
			r.showProgress(ctx)
			return api.SetParallelismResult{Previous: previous, Parallelism: in.Parallelism}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(in api.SetParallelismRequest) error {
			if in.Parallelism < 1 || in.Parallelism > api.MaxParallelism {
				return fmt.Errorf("parallelism: must be between 1 and %d, got %d", api.MaxParallelism, in.Parallelism)
			}
			if limit := r.progress.MaxParallelism; limit > 0 && in.Parallelism > limit {
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
	freed := workflow.GetSignalChannel(ctx, api.SignalNodeFree)
	r.signals = []workflow.ReceiveChannel{pause, resume, freed}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			if wordsCameTogether(pause, resume) && workflow.GetVersion(ctx, versionPauseWinsTogether, workflow.DefaultVersion, 1) == 1 {
				takeWords(pause, resume)
				r.progress.Paused = true
				r.showProgress(ctx)
				continue
			}
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.progress.Paused = true })
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); r.progress.Paused = false })
			sel.AddReceive(freed, func(c workflow.ReceiveChannel, _ bool) {
				var f api.NodeFreed
				c.Receive(ctx, &f)
				switch {
				case r.handedInEnded(ctx, f):
				case r.waiting[f.Node]:
					r.freed[f.Node] = true
				default:
					r.ownChildWord(ctx, f)
				}
			})
			sel.Select(ctx)
			// An aborted run still hears the nodes it was handed in flight end their cleanup.
			if ctx.Err() != nil && len(r.handedIn) == 0 {
				return
			}
			r.showProgress(ctx)
		}
	})
	return nil
}

// wordsCameTogether says whether a pause and a resume are both waiting to be read. The loop that
// reads them waits for the next word whenever it has nothing else to do, so the first word of a
// workflow task reaches it alone, in order; words that come after it in the same task (after a
// worker's absence, or several operators at once) wait in one channel per signal name, and
// which of them was sent last is lost. Then the run stays paused: the side that starts nothing
// an operator may not want, and that the status shows.
func wordsCameTogether(pause, resume workflow.ReceiveChannel) bool {
	return pause.Len() > 0 && resume.Len() > 0
}

// takeWords reads every waiting pause and resume.
func takeWords(pause, resume workflow.ReceiveChannel) {
	for pause.ReceiveAsync(nil) {
	}
	for resume.ReceiveAsync(nil) {
	}
}

// afterReadyCoroutines returns a condition that holds once every coroutine ready now has run
// until it blocked: a coroutine started now runs after them, in the same pass of the
// workflow's dispatcher, which runs its coroutines in the order they were started.
func afterReadyCoroutines(ctx workflow.Context) func() bool {
	ran := false
	workflow.Go(ctx, func(workflow.Context) { ran = true })
	return func() bool { return ran }
}

// counts are the rollout's counts with the nodes not started yet as pending: in a status, and
// in the result of a rollout that stopped early (aborted, over its failure budget).
func (r *rollout) counts() api.Counts {
	c := r.progress.Counts
	c.Pending = max(0, r.progress.Selected-c.Finished()-c.Running-c.Waiting)
	return c
}

// status answers the status query.
func (r *rollout) status() api.RolloutStatus {
	c := r.counts()
	phase := "running"
	switch {
	case r.done:
		phase = "done"
	case r.replacing():
		phase = "replacing"
	case r.draining:
		phase = "draining"
	case r.progress.Paused || r.gate.pausing():
		phase = "paused"
	case r.conv != nil && r.progress.ListingDone:
		phase = "converging"
	case r.pacer.phaseWord() != "":
		phase = r.pacer.phaseWord()
	}
	waiting := workflow.DeterministicKeys(r.waiting)
	var pacing *api.PacingStatus
	if r.settings.Pacing.Active() {
		pacing = r.pacer.status()
	}
	return api.RolloutStatus{
		Pacing:                pacing,
		Name:                  r.req.Name,
		Phase:                 phase,
		Paused:                r.progress.Paused || r.gate.pausing(),
		Gate:                  r.gate.status(),
		Parallelism:           r.launchWindow.ceiling,
		Window:                r.launchWindow.size,
		Selected:              r.progress.Selected,
		ListingDone:           r.progress.ListingDone,
		Counts:                c,
		Waiting:               waiting,
		WaitingForClusterSlot: r.clusterSlots.waitingNodes(),
		Recent:                append([]api.NodeResult(nil), r.recent...),
		Failures:              append([]api.NodeResult(nil), r.progress.Failures...),
		ContinuedAsNew:        r.progress.ContinuedAsNew,
		TemplateHash:          r.progress.TemplateHash,
		StartedAt:             r.progress.StartedAt,
		Converge:              r.convergeStatus(),
	}
}

// showProgress updates the workflow's current details shown in the Temporal UI.
func (r *rollout) showProgress(ctx workflow.Context) {
	st := r.status()
	c := st.Counts
	workflow.SetCurrentDetails(ctx, fmt.Sprintf(
		"**%s** %d/%d done: %d succeeded, %d failed, %d timed out, %d skipped, %d gone, %d aborted; %d running, %d waiting; window %d of %d",
		st.Phase, c.Finished(), st.Selected, c.Succeeded, c.Failed, c.TimedOut, c.Skipped, c.NodeGone, c.Aborted,
		c.Running, c.Waiting, st.Window, st.Parallelism)+r.clusterSlots.describeWaits()+r.pacer.details()+r.gate.details()+convergeDetails(st))
}

// registerApprove lets an operator go on after the canaries (update approve).
func (r *rollout) registerApprove(ctx workflow.Context) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateApprove,
		func(ctx workflow.Context, _ api.ApproveRequest) (api.ApproveResult, error) {
			r.pacer.approved = true
			r.showProgress(ctx)
			return api.ApproveResult{Canaries: len(r.pacer.canaries)}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(api.ApproveRequest) error {
			switch {
			case r.settings.Pacing.Canary == nil || !r.settings.Pacing.Canary.Approval:
				return errors.New("approve: this rollout has no approval gate (its request sets no canary.approval)")
			case r.pacer.approved || r.pacer.canaryStage == canaryStageDone:
				return errors.New("approve: already approved")
			case r.pacer.canaryStage != canaryStageApproval:
				return fmt.Errorf("approve: the canaries have not finished yet (%s); approve when status says waiting for approval", r.pacer.phaseWord())
			}
			return nil
		}})
}
