package workflows

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReplayRecordedHistories replays every history in testdata, recorded from real runs on
// the local stack (test/e2e TestRecordReplayFixtures: continue-as-new, pause/resume and
// setParallelism, an abort with Jobs running, a node busy with another rollout, a paced rollout
// whose canary was approved by the update, a rollout on a cluster with a disruption budget and its
// budget coordinator, a fleet rollout in two waves, and NodeRollout children that succeeded,
// were cancelled mid-Job, or were cordoned, drained, soaked and uncordoned around their Job). A change to workflow code that would
// break running workflows fails here; such a change belongs behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			require.NoError(t, ReplayFixture(file))
		})
	}
}
