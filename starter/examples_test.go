package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/api"
)

// TestExamplesAreValidRequests: every request in examples/ loads as the starter loads it; the
// GPU driver example has every step README's maintenance section documents.
func TestExamplesAreValidRequests(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		_, err := loadRequest(f)
		require.NoError(t, err, f)
	}
	req, err := loadRequest("../examples/gpu-driver.yaml")
	require.NoError(t, err)
	nm := req.Settings().Maintenance
	require.True(t, nm.Drain && nm.Health && nm.SoakSeconds > 0)
	require.Equal(t, api.RebootIfRequested, nm.Reboot.When)
	require.NotNil(t, nm.BlockingPods)
	require.NotNil(t, nm.CheckJob)
	require.NotEmpty(t, nm.OnSuccess.Labels)
	require.NotEmpty(t, nm.OnSuccess.RemoveTaints)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	require.True(t, strings.Contains(string(readme), "examples/gpu-driver.yaml"), "README points at the example")
}

// TestValidateChecksTheStepTemplates: the reboot and check Jobs' inline templates are checked
// offline as the Job's is, each problem under its own field.
func TestValidateChecksTheStepTemplates(t *testing.T) {
	bad := "name: a\nnodeSelector: x=y\n" + goodTemplate + `maintenance:
  reboot:
    jobTemplate: |
      apiVersion: batch/v1
      kind: Job
      spec:
        template:
          spec:
            restartPolicy: Always
            containers: [{name: a, image: busybox}]
`
	_, err := loadRequest(writeFile(t, "r.yaml", bad))
	require.ErrorContains(t, err, "maintenance.reboot.jobTemplate.spec.template.spec.restartPolicy")
}
