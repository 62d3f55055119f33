package workflows

import (
	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/workflow"
)

// nodeStepKey holds, in a node workflow's context, the step its query answers.
type nodeStepKey struct{}

// withStepQuery makes the node workflow answer QueryNodeStep from the step its code sets
// with setStep. A query handler adds no command to the history, so running histories replay
// as they were recorded.
func withStepQuery(ctx workflow.Context) (workflow.Context, error) {
	step := &api.NodeStep{Since: workflow.Now(ctx)}
	ctx = workflow.WithValue(ctx, nodeStepKey{}, step)
	return ctx, workflow.SetQueryHandler(ctx, api.QueryNodeStep, func() (api.NodeStep, error) { return *step, nil })
}

// setStep records the step the node workflow is at, from now; seconds as in NodeStep, job ""
// keeps the Job already known.
func setStep(ctx workflow.Context, step string, seconds int64, job string) {
	s, ok := ctx.Value(nodeStepKey{}).(*api.NodeStep)
	if !ok {
		return // a node workflow from before the query
	}
	if job == "" {
		job = s.Job
	}
	*s = api.NodeStep{Step: step, Since: workflow.Now(ctx), Seconds: seconds, Job: job}
}

// setStepJob names the node's Job, once CreateJob said which it is, keeping the step.
func setStepJob(ctx workflow.Context, job string) {
	if s, ok := ctx.Value(nodeStepKey{}).(*api.NodeStep); ok {
		s.Job = job
	}
}
