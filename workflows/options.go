package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
)

// apiRetry retries Kubernetes calls that failed for passing reasons (API server down, 5xx,
// throttling, conflicts) for as long as it takes, backing off to one try every 30 s; the
// activities mark everything that retrying cannot fix as non-retryable.
var apiRetry = &temporal.RetryPolicy{
	InitialInterval:        time.Second,
	BackoffCoefficient:     2,
	MaximumInterval:        30 * time.Second,
	NonRetryableErrorTypes: activities.NonRetryableErrors,
}

// withAPIActivity is for short Kubernetes calls made as regular activities.
func withAPIActivity(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		// The activity heartbeats only once it has run for 10 s (activities.keepAlive): a
		// worker that dies in it is noticed in 30 s, not after the StartToClose.
		HeartbeatTimeout: waitHeartbeatTimeout,
		RetryPolicy:      apiRetry,
		Summary:          summary,
	})
}

// withLocalAPIActivity is for the single-object writes of a node's rollout (create, finalize).
// Local activities record one marker event instead of three activity events and a workflow
// task, which keeps a node's history short at fleet scale; they are idempotent, so re-running
// one after a worker crash is safe. Without a ScheduleToClose the SDK would stop retrying after
// one StartToClose (a minute): writes retry until the node's own deadline instead.
func withLocalAPIActivity(ctx workflow.Context, retryFor time.Duration, summary string) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    time.Minute,
		ScheduleToCloseTimeout: retryFor,
		RetryPolicy:            apiRetry,
		Summary:                summary,
	})
}

// withLegacyLocalAPIActivity is withLocalAPIActivity as children from before
// versionFieldGuarantees ran it (retries end after a minute).
func withLegacyLocalAPIActivity(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         apiRetry,
		Summary:             summary,
	})
}

// writeDeadlineMargin is how long a node's writes retry past its jobTimeout.
const writeDeadlineMargin = 10 * time.Minute

// releaseBackoff and releaseMaxBackoff pace the tries of a Job delete that was refused.
const (
	releaseBackoff    = 10 * time.Second
	releaseMaxBackoff = 5 * time.Minute
)

// withReleaseActivity is for DeleteJob when the node must not be handed on before its Job and
// Pods are gone: passing errors retry within the call, backing off to once a minute; a Pod's
// termination grace is waited out with heartbeats.
func withReleaseActivity(ctx workflow.Context, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 15 * time.Minute,
		HeartbeatTimeout:    waitHeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
		Summary: summary,
	})
}

// nodeWatchSeconds is how long a node watches its Job from a local activity before handing the
// wait to WaitJob. The node's workflow task heartbeats every 12 s meanwhile (three events each),
// so a Job that ends within it costs at most as many events as the activity would, and most
// short Jobs (seconds) cost none.
const nodeWatchSeconds = 20

// withLocalWatchActivity is for WatchJob: its attempt may also delete a Job past its deadline
// and wait for the Pods to go, so it gets the watch plus a Pod's longest usual grace; a retry
// resumes on the same Job, until the node's write deadline.
func withLocalWatchActivity(ctx workflow.Context, watch, retryFor time.Duration, summary string) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    watch + 15*time.Minute,
		ScheduleToCloseTimeout: retryFor,
		RetryPolicy:            apiRetry,
		Summary:                summary,
	})
}

// waitHeartbeatTimeout bounds how long a crashed worker's WaitJob goes unnoticed before another
// attempt resumes waiting on the same Job.
const waitHeartbeatTimeout = 30 * time.Second

func withWaitActivity(ctx workflow.Context, jobTimeout time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// WaitJob enforces jobTimeout itself, from the Job's creation time, and then waits for
		// the Pods to go (a FailureTarget gets a grace); this is a backstop, after which the
		// next attempt resumes on the same Job.
		StartToCloseTimeout: jobTimeout + 30*time.Minute,
		HeartbeatTimeout:    waitHeartbeatTimeout,
		RetryPolicy:         apiRetry,
		WaitForCancellation: true,
		Summary:             summary,
	})
}

// withAwaitEndActivity is for AwaitJobEnd: one attempt that lasts until the Job's deadline
// (plus awaitEndSlack, so the watch after it finds the deadline passed), with no heartbeat: a
// worker that dies while it waits loses nothing, as any worker's informer completes the
// activity by its ID, and a worker that starts tells every end it finds in its first list.
// An abort does not wait for the activity to hear of it.
func withAwaitEndActivity(ctx workflow.Context, untilDeadline time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		ActivityID:          activities.AwaitJobEndActivityID,
		StartToCloseTimeout: max(untilDeadline, 0) + awaitEndSlack,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             summary,
	})
}

// awaitEndSlack puts the end of AwaitJobEnd past the Job's deadline.
const awaitEndSlack = 5 * time.Second

// nodeTaskTimeout is a node's workflow-task timeout. The SDK heartbeats a task that runs a
// local activity at 80 % of it, three events and a task round trip each, so it sets how often
// a watching node heartbeats (12 s) and how soon an abort reaches it; and how long a crashed
// worker's task waits before another worker takes it. The 10 s default put the heartbeat at
// 8 s, inside a short Job's usual span under load (bench/results/NOTES.md).
const nodeTaskTimeout = 15 * time.Second

// nodeChildOptions are a node child's options. outlivesRun (versionHandOverInFlight) lets the
// child go on when its run continues as new and hands it to the next run; an abort still
// cancels it (through its context here, or by the run it was handed to), and only a rollout
// terminated outright leaves it to finish its node alone.
func nodeChildOptions(ctx workflow.Context, workflowID, summary string, outlivesRun bool) workflow.Context {
	closePolicy := enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL
	if outlivesRun {
		closePolicy = enumspb.PARENT_CLOSE_POLICY_ABANDON
	}
	return workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID:            workflowID,
		WorkflowTaskTimeout:   nodeTaskTimeout,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		ParentClosePolicy:     closePolicy,
		// An aborted rollout waits until each child has deleted its running Job.
		WaitForCancellation: true,
		StaticSummary:       summary,
	})
}
