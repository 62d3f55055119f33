package workflows

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func queueOf(n int) []queuedNode {
	q := make([]queuedNode, n)
	for i := range q {
		q[i] = queuedNode{name: fmt.Sprintf("node-%04d", i)}
	}
	return q
}

func queuedNames(q []queuedNode) []string {
	names := make([]string, len(q))
	for i, n := range q {
		names[i] = n.name
	}
	return names
}

// An unpaced rollout takes a page's nodes from its front, one per start: that must not copy
// the rest of the page each time, which made a page of 1,000 nodes cost half a million copies.
func TestTakingTheFirstQueuedNodeCopiesNothing(t *testing.T) {
	const page = 1000
	r := &rollout{queue: queueOf(page)}
	var taken []string
	// AllocsPerRun calls once more than asked, to warm up: 999 nodes taken in all.
	allocs := testing.AllocsPerRun(page-2, func() { taken = append(taken[:0], r.takeQueued(0).name) })
	require.Zero(t, allocs, "taking the first node allocated")
	require.Equal(t, []string{"node-0999"}, queuedNames(r.queue))
	require.Equal(t, []string{"node-0998"}, taken)
}

// A node held back by its own rule (its domain, the canaries) lets a later one pass: the
// queue keeps the others in their order.
func TestTakingALaterQueuedNodeKeepsTheOthersInOrder(t *testing.T) {
	r := &rollout{queue: queueOf(5)}
	require.Equal(t, "node-0002", r.takeQueued(2).name)
	require.Equal(t, []string{"node-0000", "node-0001", "node-0003", "node-0004"}, queuedNames(r.queue))
	require.Equal(t, "node-0000", r.takeQueued(0).name)
	require.Equal(t, "node-0004", r.takeQueued(2).name)
	require.Equal(t, []string{"node-0001", "node-0003"}, queuedNames(r.queue))
}
