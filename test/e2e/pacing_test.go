//go:build e2e

package e2e

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
)

const zoneLabel = "topology.kubernetes.io/zone"

// TestPacingWindowClosesDuringRolloutAndReopens runs 6 nodes of 15 s, two at a time, in a
// window that opens every minute for 25 s: the rollout waits while it is closed (status says
// so), Jobs start only while it is open, and it goes on at the next opening. About 2 minutes.
func TestPacingWindowClosesDuringRolloutAndReopens(t *testing.T) {
	f := NewFleet(t, 6)
	req := f.Request("window", 15*time.Second)
	req.Parallelism = 2
	req.MaintenanceWindow = &api.MaintenanceWindow{Cron: "* * * * *", Duration: "25s", TimeZone: "Europe/Berlin"}
	run := Start(t, req)

	var waiting api.RolloutStatus
	waitFor(t, 90*time.Second, "the rollout to wait for its window", func() bool {
		st, err := status(run.GetID())
		waiting = st
		return err == nil && strings.HasPrefix(st.Phase, "waiting for window (opens ")
	})
	require.Positive(t, waiting.Counts.Pending, "nodes are left for the next opening")
	out, code := runStarter(t, "status", req.Name)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "WINDOW")
	require.Contains(t, out, "waiting for window (opens ")
	t.Logf("starter status while the window is closed:\n%s", out)

	res := Succeeded(t, run)
	require.Equal(t, 6, res.Counts.Succeeded)
	minutes := map[time.Time]int{}
	for node, js := range f.Jobs(t, req.Name) {
		require.Len(t, js, 1, node)
		created := js[0].CreationTimestamp.Time
		// Decided inside the window; the create itself may follow the decision by a moment.
		require.Less(t, created.Second(), 25+3, "Job of %s created at %s, outside the window", node, created.Format(time.RFC3339))
		minutes[created.Truncate(time.Minute)]++
	}
	require.GreaterOrEqual(t, len(minutes), 2, "the window closed during the rollout and it went on at a later opening: %v", minutes)
	for m, n := range minutes {
		require.LessOrEqual(t, n, 4, "at most two rounds of two fit in one 25 s opening (minute %s)", m.Format(time.TimeOnly))
	}
}

// TestPacingMaxPerDomainPeakFromJobs spreads 18 nodes over three zones (8, 6, 4) with
// parallelism 6 and maxPerDomain 2, and measures each zone's peak from the Jobs' creation and
// completion times.
func TestPacingMaxPerDomainPeakFromJobs(t *testing.T) {
	f := NewFleet(t, 0)
	zones := map[string]string{}
	for zone, n := range map[string]int{"zone-a": 8, "zone-b": 6, "zone-c": 4} {
		for _, node := range f.AddNodes(t, n, map[string]string{zoneLabel: zone}) {
			zones[node] = zone
		}
	}
	req := f.Request("per-zone", 3*time.Second)
	req.Parallelism = 6
	req.Topology = &api.Topology{Key: zoneLabel, MaxPerDomain: 2}
	run := Start(t, req)
	var shown string
	waitFor(t, 60*time.Second, "starter status to show the zones in flight", func() bool {
		out, code := runStarter(t, "status", req.Name)
		if code == 0 && strings.Contains(out, "IN FLIGHT BY DOMAIN") && strings.Contains(out, zoneLabel+": ") && strings.Contains(out, "zone-a=") {
			shown = out
		}
		return shown != "" || code != 0
	})
	t.Logf("starter status mid-rollout:\n%s", shown)
	res := Succeeded(t, run)
	require.Equal(t, 18, res.Counts.Succeeded)

	byZone := map[string][]batchv1.Job{}
	var all []batchv1.Job
	for node, js := range f.Jobs(t, req.Name) {
		require.Len(t, js, 1, node)
		byZone[zones[node]] = append(byZone[zones[node]], js...)
		all = append(all, js...)
	}
	peaks := map[string]int{}
	for zone, js := range byZone {
		peaks[zone] = peakConcurrency(t, js)
	}
	t.Logf("peak in flight per zone (from Job creation/completion times): %v; overall %d", peaks, peakConcurrency(t, all))
	for zone, p := range peaks {
		require.LessOrEqual(t, p, 2, "zone %s", zone)
	}
	require.Equal(t, 2, peaks["zone-a"], "the largest zone should use its limit")
	require.GreaterOrEqual(t, peakConcurrency(t, all), 4, "the other zones fill the window meanwhile")
}

// TestPacingCanaryThenStarterApprove runs one canary node first, waits for `starter approve`,
// then the rest.
func TestPacingCanaryThenStarterApprove(t *testing.T) {
	f := NewFleet(t, 4)
	canary := f.Nodes[2]
	req := f.Request("canary", time.Second)
	req.Canary = &api.Canary{Nodes: []string{canary}, Approval: true}
	run := Start(t, req)

	waitFor(t, 60*time.Second, "the rollout to wait for approval", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Pacing != nil && st.Pacing.WaitingFor == "approval"
	})
	out, code := runStarter(t, "status", req.Name)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "waiting for approval")
	t.Logf("starter status before approval:\n%s", out)
	require.Len(t, f.Jobs(t, req.Name), 1, "only the canary ran before the approval")

	out, code = runStarter(t, "approve", req.Name, "--note", "canary looks fine")
	require.Equal(t, 0, code, out)
	t.Logf("starter approve:\n%s", out)
	out, code = runStarter(t, "approve", req.Name)
	require.NotEqual(t, 0, code, "a second approval is refused")
	require.Contains(t, out, "already approved")

	res := Succeeded(t, run)
	require.Equal(t, 4, res.Counts.Succeeded)
	var created []batchv1.Job
	for _, js := range f.Jobs(t, req.Name) {
		created = append(created, js...)
	}
	sort.Slice(created, func(i, j int) bool { return created[i].CreationTimestamp.Before(&created[j].CreationTimestamp) })
	require.Equal(t, canary, created[0].Spec.Template.Spec.NodeName)
}
