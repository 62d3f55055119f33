package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// fleet start takes what start takes: --wait follows the fleet to its end, -o prints it as
// JSON or YAML, --reason goes into the memo with the requester.
func TestFleetStartWaitOutputAndReason(t *testing.T) {
	fleet := filepath.Join("..", "deploy", "examples", "fleet.yaml")
	ended := api.FleetResult{Name: "kata", Phase: "done", Wave: 2, Waves: 2,
		Clusters: []api.ClusterRollout{{Cluster: "staging", Wave: 1, State: api.ClusterSucceeded}}}
	c := &startRecorder{result: ended}
	a, out := commandApp(t, c, fleetSub("start"), "-f", fleet, "--wait", "-o", "json", "--reason", "CVE-1")
	require.NoError(t, a.startFleet())
	require.Len(t, c.started, 1)
	require.Equal(t, api.FleetID("kata-deploy"), c.started[0].ID)
	require.Equal(t, "CVE-1", c.started[0].Memo[api.MemoReason])
	var got api.FleetResult
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	require.Equal(t, ended, got)
}

// fleetSub makes the fleet subcommand name.
func fleetSub(name string) func(*app) *cobra.Command {
	return func(a *app) *cobra.Command {
		c, _, err := fleetCommand(a).Find([]string{name})
		if err != nil || c.Name() != name {
			panic("no fleet " + name)
		}
		return c
	}
}

// fleet dry-run runs a dry run on each cluster's own task queue, under a dry run's ID in that
// cluster, and starts no fleet.
func TestFleetDryRunAsksEveryClusterAndStartsNoFleet(t *testing.T) {
	fleet := filepath.Join("..", "deploy", "examples", "fleet.yaml")
	c := &startRecorder{}
	a, out := commandApp(t, c, fleetSub("dry-run"), "-f", fleet)
	require.NoError(t, a.dryRunFleet())
	queues := map[string]string{}
	for _, o := range c.started {
		queues[o.TaskQueue] = o.ID
	}
	require.Len(t, queues, 3, "one dry run per cluster")
	for _, cl := range []string{"staging", "eu-west", "us-east"} {
		id, ok := queues[api.ClusterTaskQueue(api.TaskQueue, cl)]
		require.True(t, ok, cl)
		require.True(t, strings.HasPrefix(id, DryRunIDPrefix+api.Cluster{Name: cl}.RolloutID("kata-deploy")+":"), id)
		require.Contains(t, out.String(), "== cluster "+cl)
	}
}
