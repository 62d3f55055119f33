package workflows

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// collectorRounds is what a childCollector handed back in each round, and what it still held.
type collectorRounds struct {
	EndedBefore bool
	AnyEnded    []bool // anyEnded before each round
	Rounds      [][]string
	Pending     []string
}

// TestCollectorTakesEndedChildrenInStartOrder ends children out of order: each round hands back
// only the ended ones, in the order they started, and keeps the rest.
func TestCollectorTakesEndedChildrenInStartOrder(t *testing.T) {
	env, _ := newTestEnv(&testsuite.WorkflowTestSuite{})
	env.ExecuteWorkflow(func(ctx workflow.Context) (collectorRounds, error) {
		c := &childCollector{}
		nodes := []string{"node-a", "node-b", "node-c", "node-d", "node-e"}
		ends := map[string]workflow.Settable{}
		for _, n := range nodes {
			f, s := workflow.NewFuture(ctx)
			c.add(n, f)
			ends[n] = s
		}
		var out collectorRounds
		out.EndedBefore = c.anyEnded()
		take := func(ending ...string) {
			for _, n := range ending {
				ends[n].Set(nil, nil)
			}
			out.AnyEnded = append(out.AnyEnded, c.anyEnded())
			var round []string
			for _, p := range c.takeEnded() {
				round = append(round, p.node)
			}
			out.Rounds = append(out.Rounds, round)
		}
		take("node-d", "node-b")
		take()
		take("node-e", "node-a")
		for _, p := range c.pending {
			out.Pending = append(out.Pending, p.node)
		}
		return out, nil
	})
	require.NoError(t, env.GetWorkflowError())
	var got collectorRounds
	require.NoError(t, env.GetWorkflowResult(&got))
	require.Equal(t, collectorRounds{
		EndedBefore: false,
		AnyEnded:    []bool{true, false, true},
		Rounds:      [][]string{{"node-b", "node-d"}, nil, {"node-a", "node-e"}},
		Pending:     []string{"node-c"},
	}, got)
}
