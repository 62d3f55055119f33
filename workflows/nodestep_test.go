package workflows

import (
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
)

// A node workflow answers the step query with the step it is at, since when, and the step's
// length where it has one (the soak's hold, the drain's and health gate's timeouts), so
// starter status can say "soak 12s/40s" instead of "health or soak".
func TestNodeAnswersWhichStepItIsAt(t *testing.T) {
	for _, c := range []struct {
		block   string
		want    string
		seconds int64
	}{
		// The wire words, spelled out: starter status reads them.
		{"drain", "drain", 20},
		{"health", "health", 60},
		{"soak", "soak", 5},
		{"wait", "job", 600},
	} {
		r := newMaintenanceRun(t)
		r.block = c.block
		var got struct {
			Step    string    `json:"step"`
			Since   time.Time `json:"since"`
			Seconds int64     `json:"seconds"`
			Job     string    `json:"job"`
		}
		var queryErr error
		r.env.RegisterDelayedCallback(func() {
			// The node runs as a rollout's child, under the node's workflow ID.
			v, err := r.env.QueryWorkflowByID(api.NodeWorkflowID("node-a"), "step")
			if queryErr = err; err == nil {
				queryErr = v.Get(&got)
			}
			r.env.CancelWorkflow()
		}, 2*time.Second)
		_, _ = r.run(maintainedInput(""))
		require.NoError(t, queryErr, c.block)
		require.Equal(t, c.want, got.Step, c.block)
		require.Equal(t, c.seconds, got.Seconds, c.block)
		require.False(t, got.Since.IsZero(), c.block)
		if c.want == "job" {
			require.Equal(t, "jobs/job-node-a", got.Job)
		}
	}
}
