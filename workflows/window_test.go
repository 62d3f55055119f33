package workflows

import (
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
)

func TestWindowGrowthRules(t *testing.T) {
	grow := func(b api.Batch, ceiling, successes int) []int {
		w := newLaunchWindow(b, ceiling)
		sizes := []int{w.size}
		for i := 0; i < successes; i++ {
			before := w.size
			w.succeeded()
			if w.size != before {
				sizes = append(sizes, w.size)
			}
		}
		return sizes
	}
	require.Equal(t, []int{2, 4, 6, 8, 9}, grow(api.Batch{Initial: 2, Growth: api.GrowthLinear, Step: 2}, 9, 100))
	require.Equal(t, []int{1, 3, 9, 20}, grow(api.Batch{Initial: 1, Growth: api.GrowthExponential, Step: 3}, 20, 100))
	require.Equal(t, []int{5}, grow(api.Batch{Initial: 5, Growth: api.GrowthFixed}, 20, 100))
}

func TestWindowFailureRestartsTheStreak(t *testing.T) {
	w := newLaunchWindow(api.Batch{Initial: 2, Growth: api.GrowthLinear, Step: 1}, 10)
	w.succeeded()
	w.failed()
	w.succeeded()
	require.Equal(t, 2, w.size, "a failure in between: not a whole window of successes yet")
	w.succeeded()
	require.Equal(t, 3, w.size)
}

func TestWindowCeilingChanges(t *testing.T) {
	fixed := newLaunchWindow(api.Batch{Initial: 4, Growth: api.GrowthFixed}, 4)
	fixed.setCeiling(8)
	require.Equal(t, 8, fixed.size, "a fixed window follows parallelism")
	growing := newLaunchWindow(api.Batch{Initial: 1, Growth: api.GrowthExponential, Step: 2}, 8)
	growing.setCeiling(3)
	require.Equal(t, 1, growing.size, "a growing window is only capped")
	growing.succeeded()
	growing.succeeded()
	growing.succeeded()
	require.Equal(t, 3, growing.size)
}

func (s *RolloutSuite) TestDelayBetweenNodesSpacesLaunches() {
	req := request(nodeNames(4)...)
	req.DelayBetweenNodes = "30s"
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	s.Equal(4, s.result().Counts.Succeeded)
	for i, run := range s.runs {
		s.Equal(time.Duration(i)*30*time.Second, run.start.Sub(s.runs[0].start))
	}
}

func TestContinueAsNewNearTheHistoryLimitsNotAtTheSuggestion(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        historyState
		window   int
		atLimits bool
		want     bool
	}{
		{"launched its share", historyState{launched: 2000}, 100, true, true},
		{"suggested, but far from the limits", historyState{launched: 900, events: 4100, bytes: 4 << 20, suggested: true}, 100, true, false},
		{"events near the warning limit", historyState{launched: 1900, events: 8700, bytes: 3 << 20}, 100, true, true},
		{"bytes near the warning limit", historyState{launched: 1500, events: 6000, bytes: 7800 << 10}, 100, true, true},
		{"a wide window leaves room for its drain", historyState{launched: 1000, events: 5000, bytes: 2 << 20}, 1000, true, true},
		{"runs from before the change follow the suggestion", historyState{launched: 900, events: 4100, suggested: true}, 100, false, true},
		{"and go on without it", historyState{launched: 900, events: 8700}, 100, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, continueAsNewDue(tc.h, 2000, tc.window, tc.atLimits))
		})
	}
}
