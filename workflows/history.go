package workflows

import (
	"math"

	"go.temporal.io/sdk/workflow"
)

// How long a run goes on before it continues as new: its share of nodes, or its history near
// the server's limits with room left for what its drain adds.

// When a run continues as new. A continue-as-new drained the launch window before
// versionHandOverInFlight (and still does with a cluster-wide budget or when converging), so a
// run goes on until its history nears the server's warning limits (10,240 events, 10 MiB), not
// to its earlier suggestion (4,096 events or 4 MiB, about 900 nodes). The margin is what the
// end of a run adds per node in flight: a result, or the two events of asking its child to
// report to the next run.
const (
	historyEventsBeforeContinue = 9000
	historyBytesBeforeContinue  = 8 << 20
	drainEventsPerNode          = 4
	drainBytesPerNode           = 6 << 10
)

// historyNearLimits says whether this run's history, with room for what each waiting node
// may still add, has grown as far as is safe.
func (r *rollout) historyNearLimits(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return continueAsNewDue(historyState{events: info.GetCurrentHistoryLength(), bytes: info.GetCurrentHistorySize()},
		math.MaxInt, len(r.waiting), true)
}

// dueToContinueAsNew says whether this run has launched its share of nodes or its history
// has grown as far as is safe.
func (r *rollout) dueToContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return continueAsNewDue(historyState{
		launched:  r.launchedThisRun,
		events:    info.GetCurrentHistoryLength(),
		bytes:     info.GetCurrentHistorySize(),
		suggested: info.GetContinueAsNewSuggested(),
	}, r.settings.ContinueAsNewAfter, r.drainingNodes(), r.features.atHistoryLimits)
}

// drainingNodes is how many nodes can still add to the history once the run decides to
// continue as new: the window, and (counted from versionFieldGuarantees on) the nodes waiting
// for another rollout.
func (r *rollout) drainingNodes() int {
	if r.features.guarantees {
		return r.launchWindow.ceiling + len(r.waiting)
	}
	return r.launchWindow.ceiling
}

// historyState is what a run knows of its own size.
type historyState struct {
	launched, events, bytes int
	suggested               bool
}

// continueAsNewDue leaves room for a full window to drain after the decision.
func continueAsNewDue(h historyState, launchLimit, window int, atLimits bool) bool {
	if h.launched >= launchLimit {
		return true
	}
	if !atLimits {
		return h.suggested
	}
	return h.events+drainEventsPerNode*window >= historyEventsBeforeContinue ||
		h.bytes+drainBytesPerNode*window >= historyBytesBeforeContinue
}
