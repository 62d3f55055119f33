package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
)

// The node tables and the in-flight table cut a message past 100 bytes, marking the cut; one of
// 100 bytes is shown whole.
func TestTablesClipLongMessagesAt100Bytes(t *testing.T) {
	whole, long := strings.Repeat("w", 100), strings.Repeat("l", 100)+"z"
	now := time.Now()
	var b bytes.Buffer
	printNodes(&b, "FAILED NODES", []api.NodeResult{{Node: "a", Message: whole}, {Node: "b", Message: long}})
	printInFlight(&b, []nodeStep{{Node: "c", Step: "job", Since: now, LastFailure: long}}, nil, now)
	out := b.String()
	require.Contains(t, out, whole+"\n")
	require.NotContains(t, out, "z", "the 101st byte is cut")
	require.Equal(t, 2, strings.Count(out, strings.Repeat("l", 100)+"…"), out)
}
