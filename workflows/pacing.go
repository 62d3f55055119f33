package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// Pacing within one rollout, as the workflow waits for it: the maintenance window read and
// waited for, the canaries run first, soaked and approved (pacer.go holds the state and the
// decisions). A request that sets none of them runs exactly as before (no extra commands),
// which keeps every recorded history replaying; the branches below test fields that no
// history recorded before they existed could carry, so they need no GetVersion.

// maintenanceWindowReading is what the recorded side effect returns.
type maintenanceWindowReading struct {
	Open    bool      `json:"open"`
	Until   time.Time `json:"until"`
	Problem string    `json:"problem,omitempty"`
}

// readMaintenanceWindow reads the window's state at now. Loading a time zone reads the zone database
// (the worker embeds one, but the system's may differ between workers), so the answer is
// recorded as a side effect and replays identically.
func readMaintenanceWindow(ctx workflow.Context, w api.WindowSpec, now time.Time) (maintenanceWindowReading, error) {
	var reading maintenanceWindowReading
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		loc, err := time.LoadLocation(w.Zone)
		if err != nil {
			return maintenanceWindowReading{Problem: fmt.Sprintf("maintenanceWindow.timeZone: %q is not a known time zone (%v); use an IANA name such as Europe/Berlin", w.Zone, err)}
		}
		open, until := api.WindowState(w, loc, now)
		if !open && until.IsZero() {
			return maintenanceWindowReading{Problem: "maintenanceWindow: the window never opens again; give a schedule with openings to come"}
		}
		return maintenanceWindowReading{Open: open, Until: until}
	}).Get(&reading)
	if err == nil && reading.Problem != "" {
		err = temporal.NewNonRetryableApplicationError("invalid rollout request: "+reading.Problem, api.ErrInvalidRequest, nil)
	}
	return reading, err
}

// checkMaintenanceWindow reads the window once before any node starts, so an unknown time zone fails
// the rollout at once.
func (r *rollout) checkMaintenanceWindow(ctx workflow.Context) error {
	if r.settings.Pacing.Window == nil {
		return nil
	}
	return r.rereadMaintenanceWindow(ctx)
}

func (r *rollout) rereadMaintenanceWindow(ctx workflow.Context) error {
	reading, err := readMaintenanceWindow(ctx, *r.settings.Pacing.Window, workflow.Now(ctx))
	if err != nil {
		return err
	}
	r.pacer.maintenanceOpen, r.pacer.maintenanceUntil = reading.Open, reading.Until
	return nil
}

// maintenanceWindowOpen says whether the last reading still says open (no window: always).
func (r *rollout) maintenanceWindowOpen(ctx workflow.Context) bool {
	return r.pacer.windowOpenAt(workflow.Now(ctx))
}

// awaitMaintenanceWindow returns once the maintenance window is open, sleeping on a durable timer until
// its next opening while it is closed. From versionStopWaits on it also returns as soon as
// stop says no node may start any more; the caller checks stop again.
func (r *rollout) awaitMaintenanceWindow(ctx workflow.Context, stop func() bool) error {
	if r.settings.Pacing.Window == nil {
		return nil
	}
	for !r.maintenanceWindowOpen(ctx) {
		if r.features.stopWaits && stop() {
			return nil
		}
		now := workflow.Now(ctx)
		if !now.Before(r.pacer.maintenanceUntil) {
			if err := r.rereadMaintenanceWindow(ctx); err != nil {
				return err
			}
			continue
		}
		r.pacer.waitingForWindow = true
		r.showProgress(ctx)
		var err error
		if r.features.stopWaits {
			_, err = workflow.AwaitWithTimeout(ctx, r.pacer.maintenanceUntil.Sub(now), stop)
		} else {
			err = workflow.Sleep(ctx, r.pacer.maintenanceUntil.Sub(now))
		}
		r.pacer.waitingForWindow = false
		if err != nil {
			return err
		}
	}
	r.showProgress(ctx)
	return nil
}

// canaryPassedOver says a canary did not run in the canary stage (from
// versionPassedOverCanaryStops): blocked by its Pods, or carrying a taint the Job does not
// tolerate. It proved nothing, so the rollout stops as for a failed canary rather than going
// on to every node on the word of fewer canaries than the request named. Asked only when a
// canary was passed over, so no other history records it.
func (r *rollout) canaryPassedOver(ctx workflow.Context) bool {
	return len(r.pacer.passedOverCanaries) > 0 && workflow.GetVersion(ctx, versionPassedOverCanaryStops, workflow.DefaultVersion, 1) == 1
}

// passedOver says a node's result is one of a node that a gate of ours kept from running:
// blocked by its Pods, or skipped for an untolerated taint (not one done already).
func passedOver(result api.NodeResult) bool {
	return result.Outcome == api.OutcomeBlocked || result.Reason == api.ReasonUntoleratedTaint
}

// runCanaries runs the canary nodes first, waits for their soak and approval, and fails the
// rollout if any canary failed. stop says the rollout ended here.
func (r *rollout) runCanaries(ctx workflow.Context) (stop bool, res api.RolloutResult, err error) {
	c := r.settings.Pacing.Canary
	if c == nil || r.pacer.canaryStage == canaryStageDone {
		return false, api.RolloutResult{}, nil
	}
	// From versionAdmission on a run can continue as new in its canary stage; the next run
	// goes on with the canaries it was handed instead of listing them again.
	resumed := r.features.admission && r.pacer.canaryStage == canaryStageRunning
	r.pacer.canaryStage = canaryStageRunning
	if !resumed {
		if err := r.listCanaries(ctx); err != nil {
			if ctx.Err() != nil {
				res, err := r.cancelled(ctx)
				return true, res, err
			}
			return true, api.RolloutResult{}, err
		}
	}
	if r.features.admission {
		r.resumeWaiting(ctx)
	}
	failed := func() bool { return r.progress.Counts.Failures() > 0 }
	historyFull := func() bool { return r.features.admission && r.historyNearLimits(ctx) }
	settled := func() bool { return r.inFlight == 0 && len(r.waiting) == 0 }
	continuing := false
	for len(r.queue) > 0 && !continuing {
		var ok bool
		var err error
		if r.features.admission {
			ok, err = r.nextAdmitted(ctx, historyFull)
		} else {
			ok, err = r.startNext(ctx, failed)
		}
		if err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
		if !ok {
			break
		}
		continuing = historyFull()
	}
	// Canaries held by another rollout for days must not fill the history: once it is near
	// its limits, nothing is in flight and no canary failed, the run continues as new with
	// them (the waiting ones handed over, the rest still queued).
	if err := workflow.Await(ctx, func() bool { return settled() || (historyFull() && r.inFlight == 0) }); err != nil {
		res, err := r.cancelled(ctx)
		return true, res, err
	}
	if !settled() && !failed() || continuing && !failed() {
		r.continuing = true
		if _, err := r.drain(ctx, true, true); err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
		res, err := r.continueAsNew(ctx)
		return true, res, err
	}
	if err := workflow.Await(ctx, settled); err != nil {
		res, err := r.cancelled(ctx)
		return true, res, err
	}
	if r.replacementTakesOver(ctx) {
		// The canaries judged the request being replaced; the replacement runs its own.
		res, err := r.handOver(ctx)
		return true, res, err
	}
	if failed() || r.canaryPassedOver(ctx) {
		r.done = true
		result := r.result(ctx)
		var names []string
		for _, f := range result.Failures {
			names = append(names, f.Node+" ("+string(f.Outcome)+" "+f.Reason+")")
		}
		msg := fmt.Sprintf("rollout %s stopped after its canaries: %d of %d canary nodes failed, no other node was started; failed: %s",
			r.req.Name, result.Counts.Failures(), len(r.pacer.canaries), strings.Join(names, ", "))
		if !failed() {
			msg = fmt.Sprintf("rollout %s stopped after its canaries: %d of %d canary nodes did not run, so they proved nothing, and no other node was started; not run: %s; run it again once they can run (their blocking Pods gone, a toleration for their taint), or name other canaries",
				r.req.Name, len(r.pacer.passedOverCanaries), len(r.pacer.canaries), strings.Join(r.pacer.passedOverCanaries, ", "))
		}
		return true, result, temporal.NewNonRetryableApplicationError(msg, api.ErrCanaryFailed, nil, result)
	}
	if r.settings.Pacing.Soak > 0 {
		r.pacer.canaryStage = canaryStageSoaking
		r.pacer.soakUntil = workflow.Now(ctx).Add(r.settings.Pacing.Soak)
		r.showProgress(ctx)
		soakCtx, endSoak := workflow.WithCancel(ctx)
		soak := workflow.NewTimer(soakCtx, r.settings.Pacing.Soak)
		if replaced, err := r.awaitUnlessReplaced(ctx, soak.IsReady); err != nil || replaced {
			endSoak()
			res, err := r.endCanaryStage(ctx, err)
			return true, res, err
		}
		if err := soak.Get(ctx, nil); err != nil {
			res, err := r.cancelled(ctx)
			return true, res, err
		}
	}
	if c.Approval {
		r.pacer.canaryStage = canaryStageApproval
		r.showProgress(ctx)
		if replaced, err := r.awaitUnlessReplaced(ctx, func() bool { return r.pacer.approved }); err != nil || replaced {
			res, err := r.endCanaryStage(ctx, err)
			return true, res, err
		}
	}
	r.pacer.canaryStage = canaryStageDone
	r.queue, r.progress.Cursor, r.progress.ListingDone, r.progress.Listing = nil, "", false, nil
	r.showProgress(ctx)
	return false, api.RolloutResult{}, nil
}

// awaitUnlessReplaced waits for done, or (versionReplacementTakesOver) until a replacement is
// pending, which it reports: no node of the request being replaced starts any more, so its
// canaries' soak and approval no longer matter.
func (r *rollout) awaitUnlessReplaced(ctx workflow.Context, done func() bool) (replaced bool, err error) {
	if err := workflow.Await(ctx, func() bool { return done() || r.replacing() }); err != nil {
		return false, err
	}
	if done() || !r.replacementTakesOver(ctx) {
		return false, workflow.Await(ctx, done)
	}
	return true, nil
}

// endCanaryStage ends the run in its canary stage: cancelled (err), or handed over to the
// replacing request.
func (r *rollout) endCanaryStage(ctx workflow.Context, err error) (api.RolloutResult, error) {
	if err != nil {
		return r.cancelled(ctx)
	}
	return r.handOver(ctx)
}
