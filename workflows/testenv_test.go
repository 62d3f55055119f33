package workflows

import (
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
)

// newTestEnv is a test environment whose deadlock detector tolerates a starved CPU: the SDK's
// 1 s default fails a workflow task that a loaded machine merely descheduled ("deadlock
// detected"), which none of these tests is about.
func newTestEnv(ts *testsuite.WorkflowTestSuite) *testsuite.TestWorkflowEnvironment {
	env := ts.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 30 * time.Second})
	return env
}
