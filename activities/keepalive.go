package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// apiKeepAlive is how often an API activity that has no interval of its own heartbeats: well
// under the workflows' 30 s heartbeat timeout for these calls.
const apiKeepAlive = 10 * time.Second

// keepAlive heartbeats every interval until the returned stop is called. The API activities
// (listing, templates, plans) are short, but when the worker running one dies the server
// notices only by the activity's heartbeat timeout: without beats, only its StartToClose
// (minutes) would tell, and the rollout would stall that long. A call shorter than interval
// sends no beat, so costs no Temporal action. Local activities need none (their workflow task
// times out instead).
func keepAlive(ctx context.Context, interval time.Duration) (stop func()) {
	if !activity.IsActivity(ctx) || activity.GetInfo(ctx).IsLocalActivity || interval <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
