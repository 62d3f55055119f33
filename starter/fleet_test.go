package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

func TestFleetExampleIsValidAndBadFleetFilesNameTheField(t *testing.T) {
	req, err := loadFleetRequest(filepath.Join("..", "deploy", "examples", "fleet.yaml"), nil)
	require.NoError(t, err)
	require.Equal(t, [][]string{{"staging"}, {"eu-west", "us-east"}}, req.Waves)

	bad := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("name: demo\nwaves: [[a], [a]]\nrollout: {nodes: [n1], parallelism: -1, jobTemplate: x}\n"), 0o600))
	_, err = loadFleetRequest(bad, nil)
	var inv *invalidRequest
	require.ErrorAs(t, err, &inv)
	require.Contains(t, err.Error(), `waves[1][0]: cluster "a" is listed twice`)
	require.Contains(t, err.Error(), "rollout.parallelism: must be between 1 and 1000, got -1",
		"the rollout's problems come with the fleet's own, named by their path in the file")

	bad2 := filepath.Join(t.TempDir(), "fleet.yaml")
	require.NoError(t, os.WriteFile(bad2, []byte("name: demo\nwaves: [[a]]\nrollout: {nodes: [n1], parallelism: -1, jobTemplate: x}\n"), 0o600))
	_, err = loadFleetRequest(bad2, nil)
	require.ErrorContains(t, err, "rollout.parallelism: must be between 1 and 1000, got -1", "the rollout each cluster runs is checked too")
}

// A misspelt fleet field must not be dropped silently (maxFailedCluster would leave the budget
// at 0): start refuses the file before dialling, naming the field with a suggestion. A
// misspelt field of the rollout is named once, by its path in the file.
func TestFleetUnknownFieldIsRefusedWithAHint(t *testing.T) {
	file := writeFile(t, "fleet.yaml", "name: demo\nwaves: [[a], [b]]\nmaxFailedCluster: 1\n"+
		"rollout: {nodes: [n1], jobTemplateRef: {name: t}, batch: {inital: 1}, progress: {}}\n")
	code, _, errOut := starter(t, "fleet", "start", "-f", file)
	require.Equal(t, 2, code, errOut)
	require.NotContains(t, errOut, "temporal at", "a bad fleet file must not dial")
	require.Contains(t, errOut, `maxFailedCluster: unknown field; did you mean "maxFailedClusters"?`)
	require.Contains(t, errOut, `rollout.batch.inital: unknown field; did you mean "rollout.batch.initial"?`)
	require.Equal(t, 1, strings.Count(errOut, "inital"), errOut)
	require.Equal(t, 1, strings.Count(errOut, "progress"), errOut)
}

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
