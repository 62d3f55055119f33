package main

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/api"
)

// Starting a running rollout's name with a new template replaces it only when it converges:
// a one-pass rollout has no replace update, and the SDK's rejection ("unknown update …") is
// said as what to do instead.
func TestReplacingARolloutThatDoesNotConvergeSaysWhatToDo(t *testing.T) {
	refused := errors.New("unknown update " + api.UpdateReplace + ". KnownUpdates=[setParallelism]")
	err := notReplaced("gpu", refused)
	require.ErrorContains(t, err, "rollout gpu is running and does not converge")
	require.ErrorContains(t, err, "starter abort gpu --wait")

	other := errors.New("context deadline exceeded")
	err = notReplaced("gpu", other)
	require.ErrorIs(t, err, other, "any other failure is kept as it came")
	require.NotContains(t, err.Error(), "does not converge")
}

func TestConvergeLineShowsWhatTheRolloutKeeps(t *testing.T) {
	c := &api.ConvergeStatus{AtTemplate: 12, Pending: 3, LastChange: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	require.Equal(t, "12 nodes at template 0123456789ab, 3 pending, last change 2026-12-03T09:00:00Z",
		convergeLine(c, "0123456789abcdef"))
	c = &api.ConvergeStatus{Replacing: true}
	require.Equal(t, "0 nodes at template h, 0 pending, last change none yet (being replaced)", convergeLine(c, "h"))
}
