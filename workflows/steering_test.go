package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// handOff runs what a run that continues as new meets: a reader coroutine waits on a channel in
// a selector, as the rollout's signal reader does, and a value is sent to it in the same pass in
// which the root decides. The channel hands the value straight to the waiting reader, so Len
// does not count it. It returns whether the value was read when the root went on, and the
// channel's Len when the value was sent.
func handOff(t *testing.T, yield bool) (readWhenDecided bool, lenAtSend int) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.ExecuteWorkflow(func(ctx workflow.Context) (bool, error) {
		words := workflow.NewBufferedChannel(ctx, 1)
		read := false
		workflow.Go(ctx, func(ctx workflow.Context) {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(words, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil); read = true })
			sel.Select(ctx)
		})
		// Let the reader block on its selector, as the signal reader does between signals.
		_ = workflow.Await(ctx, afterReadyCoroutines(ctx))
		words.SendAsync("word")
		lenAtSend = words.Len()
		ready := func() bool { return true }
		if yield {
			ready = afterReadyCoroutines(ctx)
		}
		_ = workflow.Await(ctx, func() bool { return ready() && words.Len() == 0 })
		return read, nil
	})
	require.NoError(t, env.GetWorkflowError())
	require.NoError(t, env.GetWorkflowResult(&readWhenDecided))
	return readWhenDecided, lenAtSend
}

// The hand-off that lost a child's word on a real server (the fixture
// v13-rollout-word-in-the-decision-task.json): checked by the channel alone, the root goes on
// before the reader has read the word; after afterReadyCoroutines, it has.
func TestAWordHandedToTheWaitingReaderIsReadBeforeTheRunGoesOn(t *testing.T) {
	read, lenAtSend := handOff(t, false)
	require.Zero(t, lenAtSend, "the word went straight to the waiting reader, not into the channel")
	require.False(t, read, "the channel's Len alone lets the root go on before the word is read")

	read, _ = handOff(t, true)
	require.True(t, read, "the root goes on only once the reader has read the word")
}
