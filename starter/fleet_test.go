package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
