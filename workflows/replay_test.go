package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"
)

// TestReplayRecordedHistories replays every history in testdata, recorded from real runs on
// the local stack (test/e2e TestRecordReplayFixtures: continue-as-new, pause/resume and
// setParallelism, an abort with Jobs running, a node busy with another rollout, a paced rollout
// whose canary was approved by the update, and NodeRollout children that succeeded, were
// cancelled mid-Job, or were cordoned, drained, soaked and uncordoned around their Job). A change to workflow code that would
// break running workflows fails here; such a change belongs behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflow(Rollout)
			replayer.RegisterWorkflow(NodeRollout)
			replayer.RegisterWorkflow(NodeRolloutV2)
			replayer.RegisterWorkflow(NodeRolloutV3)
			require.NoError(t, replayer.ReplayWorkflowHistoryFromJSONFile(nil, file))
		})
	}
}
