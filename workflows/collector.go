package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// childCollector waits on many children from one coroutine. The SDK resumes every coroutine of
// a workflow on every pass of each workflow task, blocked or not, so a coroutine per node in
// flight made the parent's worker spend more on switching coroutines than on the rollout.
type childCollector struct {
	pending []pendingChild // in the order they started
}

type pendingChild struct {
	node  string
	child workflow.Future // the child's result
}

// collectChildren starts the collector's coroutine. Each child that ends is settled in the
// order the children started, which keeps replays deterministic. The coroutine waits on a
// disconnected context: an aborted rollout still collects its children as they finish their
// cleanup, as it did when each had its own coroutine.
func (r *rollout) collectChildren(ctx workflow.Context) *childCollector {
	c := &childCollector{}
	workflow.Go(ctx, func(ctx workflow.Context) {
		wait, _ := workflow.NewDisconnectedContext(ctx)
		for {
			if err := workflow.Await(wait, c.anyEnded); err != nil {
				return
			}
			for _, p := range c.takeEnded() {
				r.childEnded(ctx, p.node, p.child)
			}
		}
	})
	return c
}

func (c *childCollector) add(node string, child workflow.Future) {
	c.pending = append(c.pending, pendingChild{node: node, child: child})
}

func (c *childCollector) anyEnded() bool {
	for _, p := range c.pending {
		if p.child.IsReady() {
			return true
		}
	}
	return false
}

// takeEnded removes the children that have ended from the pending ones and returns them.
func (c *childCollector) takeEnded() []pendingChild {
	var ended []pendingChild
	still := c.pending[:0]
	for _, p := range c.pending {
		if p.child.IsReady() {
			ended = append(ended, p)
		} else {
			still = append(still, p)
		}
	}
	clear(c.pending[len(still):])
	c.pending = still
	return ended
}
