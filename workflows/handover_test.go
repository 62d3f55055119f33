package workflows

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// A run that continues as new waits for children of short Jobs, which end within their first
// task's watch, and hands over children of long Jobs once the youngest is past that watch.
func TestShortJobsDrainAndLongJobsAreHandedOver(t *testing.T) {
	for name, tc := range map[string]struct {
		job            time.Duration
		handedOver     []string
		succeeded      int
		continuedAfter time.Duration // at most
	}{
		"10 s Jobs drain":       {job: 10 * time.Second, succeeded: 2, continuedAfter: 15 * time.Second},
		"10 min Jobs go on":     {job: 10 * time.Minute, handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
		"a Job past the margin": {job: nodeWatchSeconds*time.Second + handOverMargin + time.Second, handedOver: []string{"node-00000", "node-00001"}, continuedAfter: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			env, a := rolloutEnv(t)         // real node workflows, whose Jobs outlast the watch
			env.SetDetachedChildWait(false) // the run's end is the continue-as-new, as on a server
			env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
				return activities.JobRef{Namespace: "jobs", Name: "demo-" + in.Node, UID: "u-" + in.Node, Node: in.Node}, nil
			})
			env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).After(tc.job).Return(activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil)
			env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(activities.FinalizeResult{}, nil)
			req := request(nodeNames(4)...)
			req.Parallelism = 2
			req.ContinueAsNewAfter = 2
			start := env.Now()
			env.ExecuteWorkflow(api.RolloutWorkflow, req)
			carried := handedOver(t, env)
			require.Equal(t, tc.handedOver, inFlightNames(carried))
			require.Equal(t, tc.succeeded, carried.Counts.Succeeded)
			require.Zero(t, carried.Counts.Running, "the next run counts the handed-over nodes itself")
			require.LessOrEqual(t, env.Now().Sub(start), tc.continuedAfter)
		})
	}
}
