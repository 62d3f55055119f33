package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays histories recorded from real runs on the local stack
// (a 5-node Rollout and one of its NodeRollout children). A change to workflow code that
// would break running workflows fails here; such a change belongs behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	for _, file := range []string{"testdata/rollout-history.json", "testdata/node-history.json"} {
		t.Run(file, func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflow(Rollout)
			replayer.RegisterWorkflow(NodeRollout)
			require.NoError(t, replayer.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}
