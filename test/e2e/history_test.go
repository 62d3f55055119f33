//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
)

// A short Job costs its node one workflow task on the real server: one local activity creates,
// watches and finalizes the Job, so its history holds one marker, no activity, no version
// marker and no search-attribute upsert: six events. A Job that outlasts the watch is handed
// to the WaitJob activity.
func TestShortJobCostsItsNodeOneWorkflowTask(t *testing.T) {
	short, long := NewFleet(t, 3), NewFleet(t, 1)
	shortReq := short.Request("one-task", time.Second)
	longReq := long.Request("outlasts-watch", 30*time.Second)
	shortRun, longRun := Start(t, shortReq), Start(t, longReq)
	Succeeded(t, shortRun)
	Succeeded(t, longRun)

	for _, node := range short.Nodes {
		counts := nodeHistoryCounts(t, node)
		require.Equal(t, 1, counts[enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED], "node %s: %v", node, counts)
		require.Zero(t, counts[enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED], "node %s: %v", node, counts)
		require.Zero(t, counts[enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES], "node %s: %v", node, counts)
		// Create, watch and finalize: one local-activity marker and no version marker.
		require.Equal(t, 1, counts[enumspb.EVENT_TYPE_MARKER_RECORDED], "node %s: %v", node, counts)
		total := 0
		for _, n := range counts {
			total += n
		}
		require.Equal(t, 6, total, "node %s: %v", node, counts)
	}
	counts := nodeHistoryCounts(t, long.Nodes[0])
	require.Equal(t, 1, counts[enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED], "the long Job's wait went to WaitJob: %v", counts)

	// The node's task timeout sets how often a watching task heartbeats (80 % of it): 12 s, past
	// a short Job's usual span under load, instead of the server default's 8 s.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := stack.Temporal.GetWorkflowHistory(ctx, api.NodeWorkflowID(short.Nodes[0]), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	first, err := it.Next()
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, first.GetWorkflowExecutionStartedEventAttributes().GetWorkflowTaskTimeout().AsDuration())
}

// nodeHistoryCounts counts the events of the node's latest NodeRollout by type.
func nodeHistoryCounts(t *testing.T, node string) map[enumspb.EventType]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := stack.Temporal.GetWorkflowHistory(ctx, api.NodeWorkflowID(node), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	counts := map[enumspb.EventType]int{}
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		counts[e.GetEventType()]++
	}
	return counts
}
