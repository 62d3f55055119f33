package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"
)

// QueryNodeStep asks a node workflow (NodeRollout, V2, V3 from versionFieldGuarantees on)
// which step it is at; it answers a NodeStep. Older node workflows do not know it.
const QueryNodeStep = "step"

// The steps a node workflow reports, in the order they come.
const (
	NodeStepCordon   = "cordon"
	NodeStepDrain    = "drain"
	NodeStepJob      = "job"      // the Job being created, or running
	NodeStepRelease  = "delete"   // the Job being deleted, its Pods awaited (abort, failure)
	NodeStepFinalize = "finalize" // the outcome being recorded on the Node, the Job tidied
	NodeStepHealth   = "health"
	NodeStepSoak     = "soak"
	NodeStepUncordon = "uncordon"
)

// NodeStep is what a node workflow is doing now.
type NodeStep struct {
	Step  string    `json:"step"`
	Since time.Time `json:"since"`
	// Seconds is the step's length where it has one: the soak's hold, the drain's and the
	// health gate's timeout, the Job's timeout.
	Seconds int64 `json:"seconds,omitempty"`
	// Job is namespace/name of the node's Job, once it has one.
	Job string `json:"job,omitempty"`
}

// nodeStepKey holds, in a node workflow's context, the step its query answers.
type nodeStepKey struct{}

// withStepQuery makes the node workflow answer QueryNodeStep from the step its code sets
// with setStep. A query handler adds no command to the history, so running histories replay
// as they were recorded.
func withStepQuery(ctx workflow.Context) (workflow.Context, error) {
	step := &NodeStep{Since: workflow.Now(ctx)}
	ctx = workflow.WithValue(ctx, nodeStepKey{}, step)
	return ctx, workflow.SetQueryHandler(ctx, QueryNodeStep, func() (NodeStep, error) { return *step, nil })
}

// setStep records the step the node workflow is at, from now; seconds as in NodeStep, job ""
// keeps the Job already known.
func setStep(ctx workflow.Context, step string, seconds int64, job string) {
	s, ok := ctx.Value(nodeStepKey{}).(*NodeStep)
	if !ok {
		return // a node workflow from before the query
	}
	if job == "" {
		job = s.Job
	}
	*s = NodeStep{Step: step, Since: workflow.Now(ctx), Seconds: seconds, Job: job}
}

// setStepJob names the node's Job, once CreateJob said which it is, keeping the step.
func setStepJob(ctx workflow.Context, job string) {
	if s, ok := ctx.Value(nodeStepKey{}).(*NodeStep); ok {
		s.Job = job
	}
}
