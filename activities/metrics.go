package activities

import (
	"context"

	"go.temporal.io/sdk/activity"
)

// Metrics the activities emit through the worker's SDK metrics handler, next to the SDK's own.
const (
	MetricNodes       = "noderollout_nodes"        // counter, tag outcome: nodes finalized
	MetricJobsRunning = "noderollout_jobs_running" // gauge: Jobs this worker is waiting on
	MetricJobDuration = "noderollout_job_duration" // timer: Job creation to end
)

// countWaiting updates the running-Jobs gauge for one WaitJob; call the result when it ends.
func (a *Activities) countWaiting(ctx context.Context) func() {
	gauge := activity.GetMetricsHandler(ctx).Gauge(MetricJobsRunning)
	gauge.Update(float64(a.waiting.Add(1)))
	return func() { gauge.Update(float64(a.waiting.Add(-1))) }
}

func recordOutcome(ctx context.Context, in FinalizeInput) {
	h := activity.GetMetricsHandler(ctx)
	if !jobOnly(in) { // a maintained node is counted once, when its maintenance ends
		h.WithTags(map[string]string{"outcome": string(in.End.Outcome)}).Counter(MetricNodes).Inc(1)
	}
	if in.Job != nil && !in.Job.CreatedAt.IsZero() && in.End.FinishedAt.After(in.Job.CreatedAt) {
		h.Timer(MetricJobDuration).Record(in.End.FinishedAt.Sub(in.Job.CreatedAt))
	}
}
