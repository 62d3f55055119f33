package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// Names of the fleet rollout: one Rollout per cluster, wave after wave.
const (
	FleetRolloutWorkflow = "FleetRollout"
	// FleetTaskQueue is served by every cluster's worker, so a fleet rollout does not depend
	// on any one cluster's worker being up.
	FleetTaskQueue = "noderollout-fleet"
	// FleetIDPrefix + request name is the FleetRollout workflow ID.
	FleetIDPrefix = "fleet-"

	ErrFleetFailureBudgetExceeded = "FleetFailureBudgetExceeded"

	// versionFleetUnknownFields marks fleet runs that fail with InvalidRequest when their
	// request has unknown fields (at any depth) or a rollout field of the wrong type, which
	// earlier runs dropped silently (a misspelt maxFailedClusters left the budget at 0).
	versionFleetUnknownFields = "fleet-refuses-unknown-fields"
	// versionFleetChecksRollout marks fleet runs that fail with InvalidRequest when the rollout
	// every cluster runs is statically invalid, which earlier runs started in wave 1's clusters
	// to fail there one by one (and an explicit rollout.parallelism 0, lost when the request
	// was passed on to the clusters, ran with the default of 10).
	versionFleetChecksRollout = "fleet-checks-nested-rollout"
	// versionFleetCountsUnrolledClusters marks fleet runs that count a cluster whose rollout
	// was aborted on its own, or selected no node, against maxFailedClusters.
	versionFleetCountsUnrolledClusters = "fleet-counts-aborted-and-empty-clusters"
)

// FleetID is the workflow ID of the fleet rollout with this name.
func FleetID(name string) string { return FleetIDPrefix + name }

// FleetRequest is the input of FleetRollout.
type FleetRequest struct {
	Name string `json:"name"`
	// Waves are the clusters, by the `cluster` name of their worker: each wave starts when the
	// one before it has ended, its clusters all at once (e.g. [["staging"], ["eu", "us"]]).
	Waves [][]string `json:"waves"`
	// MaxFailedClusters is the fleet's failure budget: once more clusters than this have
	// failed, no further wave starts.
	MaxFailedClusters int `json:"maxFailedClusters,omitempty"`
	// TaskQueue is the clusters' workers' task queue before the cluster qualifies it.
	TaskQueue string `json:"taskQueue,omitempty"`
	// Rollout is what every cluster runs; its name defaults to the fleet's.
	Rollout RolloutRequest `json:"rollout"`

	// decodeProblems are what UnmarshalJSON found wrong, for validation to report as
	// RolloutRequest's are; decodeFailed says the fleet's own fields did not decode.
	decodeProblems []string
	decodeFailed   bool
}

type fleetRequestFields FleetRequest

// OnlyLenientDecodingFailed says the request has problems that only the lenient decoding
// finds (unknown fields, a rollout field of the wrong type), which encoding/json alone, as
// fleets decoded before versionFleetUnknownFields, let through.
func (r FleetRequest) OnlyLenientDecodingFailed() bool {
	return len(r.decodeProblems) > 0 && !r.decodeFailed
}

// ForgetDecodeProblems drops the decoding's problems, as runs before versionFleetUnknownFields
// did not see them.
func (r *FleetRequest) ForgetDecodeProblems() { r.decodeProblems = nil }

// UnmarshalJSON decodes leniently like RolloutRequest's, naming unknown fields at any depth
// and the nested rollout's fields by their full path (rollout.batch.inital).
func (r *FleetRequest) UnmarshalJSON(b []byte) error {
	raw, problems := jsonObject(b, "")
	rollout, hasRollout := raw["rollout"]
	// Decoded on its own below, so that its problems are named once, under rollout.
	delete(raw, "rollout")
	var fields fleetRequestFields
	problems = append(problems, decodeFields(raw, &fields, "")...)
	if hasRollout {
		fields.Rollout = decodeRolloutRequest(rollout, "rollout.")
		problems = append(problems, fields.Rollout.decodeProblems...)
		fields.Rollout.decodeProblems = nil
	}
	fields.decodeProblems = problems
	// Before this decoder, encoding/json alone failed the run at once on a request that is no
	// object or has a fleet field of the wrong type; FleetRollout needs no version for those.
	fields.decodeFailed = json.Unmarshal(b, &fleetRequestFields{}) != nil
	*r = FleetRequest(fields)
	return nil
}

// Cluster states in a fleet rollout.
const (
	ClusterPending   = "pending"
	ClusterRunning   = "running"
	ClusterSucceeded = "succeeded"
	ClusterFailed    = "failed"
	ClusterAborted   = "aborted"
	ClusterNotRun    = "notRun" // a later wave, not started once the fleet stopped
)

// ClusterRollout is one cluster's part of a fleet rollout.
type ClusterRollout struct {
	Cluster    string  `json:"cluster"`
	Wave       int     `json:"wave"` // from 1
	WorkflowID string  `json:"workflowID"`
	TaskQueue  string  `json:"taskQueue"`
	State      string  `json:"state"`
	Counts     *Counts `json:"counts,omitempty"`
	Message    string  `json:"message,omitempty"`
}

// FleetStatus answers the fleet's status query; FleetResult is what it returns.
type FleetStatus struct {
	Name              string           `json:"name"`
	Phase             string           `json:"phase"` // running | paused | draining | done
	Paused            bool             `json:"paused"`
	Wave              int              `json:"wave"` // the wave running or last run, from 1
	Waves             int              `json:"waves"`
	FailedClusters    int              `json:"failedClusters"`
	MaxFailedClusters int              `json:"maxFailedClusters"`
	Clusters          []ClusterRollout `json:"clusters"`
}

type FleetResult = FleetStatus

// FleetRollout runs req.Rollout on every cluster, wave after wave, on each cluster's own task
// queue. Pause holds the next wave and pauses the clusters' rollouts; resume undoes both;
// cancelling it (abort) cancels every cluster's rollout, whose nodes delete their Jobs.
func FleetRollout(ctx workflow.Context, req FleetRequest) (FleetResult, error) {
	// Runs from before the check went on without the fields that did not decode. Only a
	// request with such fields asks which run this is, so no other history gets a marker.
	if req.OnlyLenientDecodingFailed() &&
		workflow.GetVersion(ctx, versionFleetUnknownFields, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		req.ForgetDecodeProblems()
	}
	// Likewise runs from before the nested check started their clusters with the rollout; only
	// a fleet whose rollout has problems asks, so valid fleets' histories get no marker.
	nested := nestedRolloutProblems(req.Rollout)
	if len(nested) > 0 &&
		workflow.GetVersion(ctx, versionFleetChecksRollout, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		nested = nil
	}
	if err := validateFleet(&req, nested); err != nil {
		return FleetResult{}, err
	}
	f := &fleet{req: req, running: map[string]workflow.ChildWorkflowFuture{}, memo: requestMemo(ctx)}
	for w, wave := range req.Waves {
		for _, c := range wave {
			cl := Cluster{Name: c}
			f.clusters = append(f.clusters, ClusterRollout{Cluster: c, Wave: w + 1, State: ClusterPending,
				WorkflowID: cl.RolloutID(req.Rollout.Name), TaskQueue: ClusterTaskQueue(req.TaskQueue, c)})
		}
	}
	if err := f.registerHandlers(ctx); err != nil {
		return FleetResult{}, err
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
		if f.clusters[i].State == ClusterPending {
			f.clusters[i].State = ClusterNotRun
		}
	}
	f.showProgress(ctx)
	st := f.status()
	if f.failed > req.MaxFailedClusters {
		var failed []string
		for _, c := range f.clusters {
			if c.State == ClusterFailed || (c.State == ClusterAborted && f.countUnrolled) {
				failed = append(failed, c.Cluster+" ("+c.Message+")")
			}
		}
		return st, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"fleet rollout %s stopped after wave %d of %d: %d clusters failed, over the budget of %d; failed: %s",
			req.Name, f.wave, len(req.Waves), f.failed, req.MaxFailedClusters, strings.Join(failed, "; ")),
			ErrFleetFailureBudgetExceeded, nil, st)
	}
	return st, nil
}

type fleet struct {
	req      FleetRequest
	clusters []ClusterRollout
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
	child := workflow.ExecuteChildWorkflow(cctx, RolloutWorkflow, f.req.Rollout)
	f.running[c.Cluster] = child
	c.State = ClusterRunning
	workflow.Go(ctx, func(ctx workflow.Context) {
		var result RolloutResult
		err := child.Get(ctx, &result)
		delete(f.running, c.Cluster)
		f.finished(c, result, err, ctx.Err() != nil)
		f.showProgress(ctx)
	})
}

// finished records how a cluster's rollout ended. A failed rollout's counts travel in the
// error's details. fleetAborted says the fleet itself was aborted, which aborted the cluster.
func (f *fleet) finished(c *ClusterRollout, result RolloutResult, err error, fleetAborted bool) {
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
		c.State = ClusterFailed
		c.Message = "selected no node: check the rollout's nodes or nodeSelector against this cluster's nodes"
		f.failed++
	case err == nil:
		c.State = ClusterSucceeded
	case temporal.IsCanceledError(err):
		c.State = ClusterAborted
		c.Message = "aborted"
		if f.countUnrolled && !fleetAborted {
			c.Message = "aborted on its own (not by the fleet): counted against maxFailedClusters"
			f.failed++
		}
	default:
		c.State = ClusterFailed
		c.Message = err.Error()
		if appErr != nil {
			c.Message = appErr.Message()
		}
		f.failed++
	}
}

func (f *fleet) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (FleetStatus, error) { return f.status(), nil }); err != nil {
		return err
	}
	pause := workflow.GetSignalChannel(ctx, SignalPause)
	resume := workflow.GetSignalChannel(ctx, SignalResume)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			signal := ""
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(pause, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); signal = SignalPause })
			sel.AddReceive(resume, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); signal = SignalResume })
			sel.Select(ctx)
			if ctx.Err() != nil {
				return
			}
			f.paused = signal == SignalPause
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
func (f *fleet) aborted(ctx workflow.Context) (FleetResult, error) {
	f.draining = true
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(cleanup, func() bool { return len(f.running) == 0 })
	for i := range f.clusters {
		if f.clusters[i].State == ClusterPending {
			f.clusters[i].State = ClusterNotRun
		}
	}
	f.done = true
	st := f.status()
	return st, temporal.NewCanceledError(st)
}

func (f *fleet) status() FleetStatus {
	phase := "running"
	switch {
	case f.done:
		phase = "done"
	case f.draining:
		phase = "draining"
	case f.paused:
		phase = "paused"
	}
	return FleetStatus{
		Name: f.req.Name, Phase: phase, Paused: f.paused, Wave: f.wave, Waves: len(f.req.Waves),
		FailedClusters: f.failed, MaxFailedClusters: f.req.MaxFailedClusters,
		Clusters: append([]ClusterRollout(nil), f.clusters...),
	}
}

func (f *fleet) showProgress(ctx workflow.Context) {
	st := f.status()
	done := 0
	for _, c := range st.Clusters {
		if c.State != ClusterPending && c.State != ClusterRunning {
			done++
		}
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** wave %d of %d; %d/%d clusters done, %d running, %d failed (budget %d)",
		st.Phase, st.Wave, st.Waves, done, len(st.Clusters), len(f.running), st.FailedClusters, st.MaxFailedClusters))
}

// validateFleet checks the fleet's own fields and fills defaults, and fails with every problem,
// the fleet's own and those of the rollout it runs (nested, see nestedRolloutProblems), in one
// InvalidRequest.
func validateFleet(req *FleetRequest, nested []*jobspec.FieldError) error {
	ps := fleetProblems(req, nested)
	if len(ps) == 0 {
		return nil
	}
	return invalidRequestError("invalid fleet rollout request: ", ps)
}

// fleetProblems checks the fleet's own fields and fills defaults; nested are the problems of
// the rollout it runs.
func fleetProblems(req *FleetRequest, nested []*jobspec.FieldError) []*jobspec.FieldError {
	ps := decodeFieldErrors(req.decodeProblems)
	add := func(field, what, fix string) { ps = append(ps, problem(field, what, fix)) }
	if errs := validation.IsDNS1123Label(req.Name); len(errs) > 0 {
		add("name", fmt.Sprintf("%q is not a DNS-1123 label", req.Name), "name the fleet rollout like \"kata-deploy\"")
	}
	if req.Rollout.Name == "" {
		req.Rollout.Name = req.Name
	}
	if req.TaskQueue == "" {
		req.TaskQueue = TaskQueue
	}
	if len(req.Waves) == 0 {
		add("waves", "is empty", `list the clusters in waves, e.g. [["staging"], ["eu", "us"]]`)
	}
	seen := map[string]bool{}
	for w, wave := range req.Waves {
		if len(wave) == 0 {
			add(fmt.Sprintf("waves[%d]", w), "is empty", "remove the empty wave")
		}
		for i, c := range wave {
			field := fmt.Sprintf("waves[%d][%d]", w, i)
			switch {
			case len(validation.IsDNS1123Label(c)) > 0:
				add(field, fmt.Sprintf("%q is not a cluster name", c), "use the `cluster` its worker is configured with (a DNS-1123 label)")
			case seen[c]:
				add(field, fmt.Sprintf("cluster %q is listed twice", c), "list each cluster in one wave only")
			}
			seen[c] = true
		}
	}
	if req.MaxFailedClusters < 0 {
		add("maxFailedClusters", "is negative", "use 0 (stop at the first failed cluster) or more")
	}
	return append(ps, nested...)
}

// nestedRolloutProblems is Rollout's static check (check) of the rollout every cluster runs,
// each problem named by its path in the fleet's request (rollout.parallelism).
//
// All of check applies at fleet level: what depends on the cluster (the namespace and the
// template's ConfigMap existing, the template itself, the worker's maxParallelism, the time
// zone, the nodes a selector matches) only each cluster's Rollout can check, with I/O, and
// check leaves it out. An empty name is no problem: the fleet fills in its own, checked as
// name. A cluster's first run is never continued as new, hence continued=false.
func nestedRolloutProblems(r RolloutRequest) []*jobspec.FieldError {
	_, ps := check(r, false)
	var out []*jobspec.FieldError
	for _, p := range ps {
		if p.Field == "name" && r.Name == "" {
			continue
		}
		out = append(out, problem("rollout."+p.Field, p.Problem, p.Fix))
	}
	return out
}

// ValidateFleet checks a fleet request as FleetRollout does, the rollout every cluster will
// run included, so a bad file is refused before anything starts.
func ValidateFleet(req FleetRequest) error {
	return validateFleet(&req, nestedRolloutProblems(req.Rollout))
}
