package floor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: RolloutWorkflow})
	env.RegisterWorkflowWithOptions(Node, workflow.RegisterOptions{Name: NodeWorkflow})
	env.RegisterActivityWithOptions(Wait, activity.RegisterOptions{Name: WaitActivity})
	t.Cleanup(func() { env.AssertExpectations(t) })
	return env
}

func TestRolloutRunsOneChildPerNodeAndAtMostPAtOnce(t *testing.T) {
	env := newEnv(t)
	var started []string
	inFlight, most := 0, 0
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		started = append(started, info.WorkflowExecution.ID)
		inFlight++
		most = max(most, inFlight)
	})
	env.SetOnChildWorkflowCompletedListener(func(*workflow.Info, converter.EncodedValue, error) { inFlight-- })

	env.ExecuteWorkflow(RolloutWorkflow, Request{Name: "f", Nodes: []string{"a", "b", "c", "d", "e"}, Parallelism: 2, JobSeconds: 0.01})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res Result
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, Result{Succeeded: 5}, res)
	assert.Equal(t, []string{"f-a", "f-b", "f-c", "f-d", "f-e"}, started)
	assert.Equal(t, 2, most, "children in flight at once")
}

func TestRolloutRefusesParallelismBelowOne(t *testing.T) {
	env := newEnv(t)
	env.ExecuteWorkflow(RolloutWorkflow, Request{Name: "f", Nodes: []string{"a"}, Parallelism: 0, JobSeconds: 0.01})
	require.Error(t, env.GetWorkflowError())
	assert.Contains(t, env.GetWorkflowError().Error(), "parallelism 0")
}

func TestWaitEndsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, Wait(ctx, time.Hour), context.Canceled)
}
