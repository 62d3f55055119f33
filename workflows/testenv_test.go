package workflows

import (
	"time"

	"github.com/stretchr/testify/mock"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/noderollout/noderollout/activities"
)

// newTestEnv is a test environment whose deadlock detector tolerates a starved CPU: the SDK's
// 1 s default fails a workflow task that a loaded machine merely descheduled ("deadlock
// detected"), which none of these tests is about.
func newTestEnv(ts *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := ts.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 30 * time.Second})
	return env
}

// jobsOutlastTheWatch makes every node's local watch see its Job still running, so that the
// test's WaitJob mock decides how each Job ends (watch_test.go tests the watch itself).
func jobsOutlastTheWatch(env *testsuite.TestWorkflowEnvironment) {
	var a *activities.Activities
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{Running: true}, nil).Maybe()
}
