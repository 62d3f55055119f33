//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// settledActions reads the server's action counter once it has settled (10 s without a
// change). The server reports its counters with a delay: a reading taken at once may lack the
// last tasks of whatever ran just before, which would then land in the next measurement.
func settledActions(t *testing.T) map[string]float64 {
	t.Helper()
	prev, changedAt := temporalActions(t), time.Now()
	waitFor(t, 2*time.Minute, "the server's action counter to settle", func() bool {
		if cur := temporalActions(t); !maps.Equal(cur, prev) {
			prev, changedAt = cur, time.Now()
		}
		return time.Since(changedAt) >= 10*time.Second
	})
	return prev
}

// temporalActions reads the dev server's own action counter (what Temporal Cloud bills), summed
// by action_type over namespaces and operations. E2E_TEMPORAL_METRICS is the server's metrics
// address (dev/e2e.sh sets it).
func temporalActions(t *testing.T) map[string]float64 {
	t.Helper()
	addr := os.Getenv("E2E_TEMPORAL_METRICS")
	if addr == "" {
		addr = "127.0.0.1:7244"
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err, "the dev server's metrics (E2E_TEMPORAL_METRICS)")
	defer resp.Body.Close()
	out, err := parseActionCounter(resp.Body)
	require.NoError(t, err)
	return out
}

// parseActionCounter sums the samples of the "action" counter in Prometheus text by their
// action_type label.
func parseActionCounter(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "action{") {
			continue
		}
		closing := strings.LastIndexByte(line, '}')
		value, err := strconv.ParseFloat(strings.TrimSpace(line[closing+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("action sample %q: %w", line, err)
		}
		kind := ""
		for _, label := range strings.Split(line[len("action{"):closing], ",") {
			if k, v, ok := strings.Cut(label, "="); ok && k == "action_type" {
				kind = strings.Trim(v, `"`)
			}
		}
		out[kind] += value
	}
	return out, sc.Err()
}

// actionsBetween is what was counted from before to after, by type, and the total without the
// queries (whoever followed the rollout).
func actionsBetween(before, after map[string]float64) (map[string]float64, float64) {
	delta := map[string]float64{}
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			delta[k] = d
			if k != "grpc_QueryWorkflow" {
				total += d
			}
		}
	}
	return delta, total
}

// describeActions is the delta per node, by type, largest first.
func describeActions(delta map[string]float64, nodes int) string {
	kinds := make([]string, 0, len(delta))
	for k := range delta {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return delta[kinds[i]] > delta[kinds[j]] })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %.2f", k, delta[k]/float64(nodes))
	}
	return strings.Join(parts, ", ")
}

func TestParseActionCounterSumsByType(t *testing.T) {
	text := `# TYPE action counter
action{action_type="command_ScheduleActivityTask",namespace="default",operation="RespondWorkflowTaskCompleted"} 3
action{action_type="command_ScheduleActivityTask",namespace="other",operation="RespondWorkflowTaskCompleted"} 2
action{action_type="grpc_QueryWorkflow",namespace="default",operation="QueryWorkflow"} 7
actions_other{action_type="x"} 9
`
	got, err := parseActionCounter(strings.NewReader(text))
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"command_ScheduleActivityTask": 5, "grpc_QueryWorkflow": 7}, got)
	delta, total := actionsBetween(map[string]float64{"command_ScheduleActivityTask": 1}, got)
	require.Equal(t, 4.0, total, "queries are left out")
	require.Equal(t, 7.0, delta["grpc_QueryWorkflow"])
}
