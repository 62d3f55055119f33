package workflows

import (
	"errors"
	"fmt"
	"strings"

	"github.com/noderollout/noderollout/api"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// FleetRollout runs req.Rollout on every cluster, wave after wave, on each cluster's own task
// queue. Pause holds the next wave and pauses the clusters' rollouts; resume undoes both;
// cancelling it (abort) cancels every cluster's rollout, whose nodes delete their Jobs.
func FleetRollout(ctx workflow.Context, req api.FleetRequest) (api.FleetResult, error) {
	// Runs from before the check went on without the fields that did not decode. Only a
	// request with such fields asks which run this is, so no other history gets a marker.
	if req.OnlyLenientDecodingFailed() &&
		workflow.GetVersion(ctx, versionFleetUnknownFields, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		req.ForgetDecodeProblems()
	}
	// Likewise runs from before the nested check started their clusters with the rollout; only
	// a fleet whose rollout has problems asks, so valid fleets' histories get no marker.
	nested := req.RolloutProblems()
	if len(nested) > 0 &&
		workflow.GetVersion(ctx, versionFleetChecksRollout, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		nested = nil
	}
	if problems := append(req.OwnProblems(), nested...); len(problems) > 0 {
		return api.FleetResult{}, invalidRequest("invalid fleet rollout request: ", problems)
	}
	req = req.WithDefaults()
	f := &fleet{req: req, running: map[string]workflow.ChildWorkflowFuture{}, memo: requestMemo(ctx)}
	for w, wave := range req.Waves {
		for _, c := range wave {
			cl := api.Cluster{Name: c}
			f.clusters = append(f.clusters, api.ClusterRollout{Cluster: c, Wave: w + 1, State: api.ClusterPending,
				WorkflowID: cl.RolloutID(req.Rollout.Name), TaskQueue: api.ClusterTaskQueue(req.TaskQueue, c)})
		}
	}
	if err := f.registerHandlers(ctx); err != nil {
		return api.FleetResult{}, err
	}
	f.countUnrolled = workflow.GetVersion(ctx, versionFleetCountsUnrolledClusters, workflow.DefaultVersion, 1) == 1
	for w := range req.Waves {
		if err := workflow.Await(ctx, func() bool { return !f.paused }); err != nil {
			return f.aborted(ctx)
		}
		if f.failed > req.MaxFailedClusters {
			break
		}
		f.wave = w + 1
		for i := range f.clusters {
			if f.clusters[i].Wave == f.wave {
				f.start(ctx, i)
			}
		}
		f.showProgress(ctx)
		if err := workflow.Await(ctx, func() bool { return len(f.running) == 0 }); err != nil {
			return f.aborted(ctx)
		}
	}
	f.done = true
	for i := range f.clusters {
		if f.clusters[i].State == api.ClusterPending {
			f.clusters[i].State = api.ClusterNotRun
		}
	}
	f.showProgress(ctx)
	st := f.status()
	if f.failed > req.MaxFailedClusters {
		var failed []string
		for _, c := range f.clusters {
			if c.State == api.ClusterFailed || (c.State == api.ClusterAborted && f.countUnrolled) {
				failed = append(failed, c.Cluster+" ("+c.Message+")")
			}
		}
		return st, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"fleet rollout %s stopped after wave %d of %d: %d clusters failed, over the budget of %d; failed: %s",
			req.Name, f.wave, len(req.Waves), f.failed, req.MaxFailedClusters, strings.Join(failed, "; ")),
			api.ErrFleetFailureBudgetExceeded, nil, st)
	}
	return st, nil
}

type fleet struct {
	req      api.FleetRequest
	clusters []api.ClusterRollout
	running  map[string]workflow.ChildWorkflowFuture // by cluster
	wave     int
	failed   int
	paused   bool
	draining bool
	done     bool
	// countUnrolled: versionFleetCountsUnrolledClusters applies to this run.
	countUnrolled bool
	// memo is the fleet's requester and reason, which every cluster's rollout records.
	memo map[string]any
}

// start runs one cluster's Rollout as a child on that cluster's task queue.
func (f *fleet) start(ctx workflow.Context, i int) {
	c := &f.clusters[i]
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:        c.WorkflowID,
		TaskQueue:         c.TaskQueue,
		ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		// An aborted fleet ends once every cluster's nodes have deleted their Jobs.
		WaitForCancellation: true,
		StaticSummary:       fmt.Sprintf("rollout %s on cluster %s (wave %d)", f.req.Rollout.Name, c.Cluster, c.Wave),
		// The memo is not part of the commands replay compares: running fleets replay as
		// recorded, and their clusters started from now on record the requester.
		Memo: f.memo,
	})
	child := workflow.ExecuteChildWorkflow(cctx, api.RolloutWorkflow, f.req.Rollout)
	f.running[c.Cluster] = child
	c.State = api.ClusterRunning
	workflow.Go(ctx, func(ctx workflow.Context) {
		var result api.RolloutResult
		err := child.Get(ctx, &result)
		delete(f.running, c.Cluster)
		f.finished(c, result, err, ctx.Err() != nil)
		f.showProgress(ctx)
	})
}

// finished records how a cluster's rollout ended. A failed rollout's counts travel in the
// error's details. fleetAborted says the fleet itself was aborted, which aborted the cluster.
func (f *fleet) finished(c *api.ClusterRollout, result api.RolloutResult, err error, fleetAborted bool) {
	var appErr *temporal.ApplicationError
	if err != nil && errors.As(err, &appErr) && appErr.HasDetails() {
		_ = appErr.Details(&result)
	}
	if result.Name != "" {
		counts := result.Counts
		c.Counts = &counts
	}
	switch {
	case err == nil && f.countUnrolled && result.Selected == 0 && result.Counts.Finished() == 0:
		// A cluster where the rollout selected nothing was not rolled out: most likely its
		// nodes are labelled differently, which the next wave's clusters would share.
		c.State = api.ClusterFailed
		c.Message = "selected no node: check the rollout's nodes or nodeSelector against this cluster's nodes"
		f.failed++
	case err == nil:
		c.State = api.ClusterSucceeded
	case temporal.IsCanceledError(err):
		c.State = api.ClusterAborted
		c.Message = "aborted"
		if f.countUnrolled && !fleetAborted {
			c.Message = "aborted on its own (not by the fleet): counted against maxFailedClusters"
			f.failed++
		}
	default:
		c.State = api.ClusterFailed
		c.Message = err.Error()
		if appErr != nil {
			c.Message = appErr.Message()
		}
		f.failed++
	}
}

func (f *fleet) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.FleetStatus, error) { return f.status(), nil }); err != nil {
		return err
	}
	pause := workflow.GetSignalChannel(ctx, api.SignalPause)
	resume := workflow.GetSignalChannel(ctx, api.SignalResume)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			signal := ""
			// Words that wait together while the loop passes one on lost their order: the
			// fleet stays paused, as a rollout does (wordsCameTogether).
			if wordsCameTogether(pause, resume) && workflow.GetVersion(ctx, versionFleetPauseWinsTogether, workflow.DefaultVersion, 1) == 1 {
				takeWords(pause, resume)
				signal = api.SignalPause
			} else {
				sel := workflow.NewSelector(ctx)
				sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); signal = api.SignalPause })
				sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); signal = api.SignalResume })
				sel.Select(ctx)
				if ctx.Err() != nil {
					return
				}
			}
			f.paused = signal == api.SignalPause
			f.forward(ctx, signal)
			f.showProgress(ctx)
		}
	})
	return nil
}

// forward passes pause or resume on to every cluster's running rollout.
func (f *fleet) forward(ctx workflow.Context, signal string) {
	var sent []workflow.Future
	for _, c := range workflow.DeterministicKeys(f.running) {
		sent = append(sent, f.running[c].SignalChildWorkflow(ctx, signal, nil))
	}
	for _, s := range sent {
		// A rollout that ended meanwhile has nothing to pause.
		_ = s.Get(ctx, nil)
	}
}

// aborted waits for every cluster's rollout to end after the cancellation reached it.
func (f *fleet) aborted(ctx workflow.Context) (api.FleetResult, error) {
	f.draining = true
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(cleanup, func() bool { return len(f.running) == 0 })
	for i := range f.clusters {
		if f.clusters[i].State == api.ClusterPending {
			f.clusters[i].State = api.ClusterNotRun
		}
	}
	f.done = true
	st := f.status()
	return st, temporal.NewCanceledError(st)
}

func (f *fleet) status() api.FleetStatus {
	phase := "running"
	switch {
	case f.done:
		phase = "done"
	case f.draining:
		phase = "draining"
	case f.paused:
		phase = "paused"
	}
	return api.FleetStatus{
		Name: f.req.Name, Phase: phase, Paused: f.paused, Wave: f.wave, Waves: len(f.req.Waves),
		FailedClusters: f.failed, MaxFailedClusters: f.req.MaxFailedClusters,
		Clusters: append([]api.ClusterRollout(nil), f.clusters...),
	}
}

func (f *fleet) showProgress(ctx workflow.Context) {
	st := f.status()
	done := 0
	for _, c := range st.Clusters {
		if c.State != api.ClusterPending && c.State != api.ClusterRunning {
			done++
		}
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** wave %d of %d; %d/%d clusters done, %d running, %d failed (budget %d)",
		st.Phase, st.Wave, st.Waves, done, len(st.Clusters), len(f.running), st.FailedClusters, st.MaxFailedClusters))
}
