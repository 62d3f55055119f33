package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The worker's Prometheus (for gates.prometheus) comes from flags, variables or a config file.
func TestPrometheusKeys(t *testing.T) {
	c, err := Load(NewFlagSet("worker", true), []string{"--prometheus-url", "https://prom:9090", "--prometheus-insecure-skip-verify"},
		[]string{"NODEROLLOUT_PROMETHEUS_BEARER_TOKEN_FILE=/var/run/token", "NODEROLLOUT_PROMETHEUS_CA_FILE=/etc/ca.pem"})
	require.NoError(t, err)
	require.Equal(t, "https://prom:9090", c.PrometheusURL)
	require.Equal(t, "/var/run/token", c.PrometheusBearerTokenFile)
	require.Equal(t, "/etc/ca.pem", c.PrometheusCAFile)
	require.True(t, c.PrometheusInsecureSkipVerify)

	file := filepath.Join(t.TempDir(), "worker.yaml")
	require.NoError(t, os.WriteFile(file, []byte("prometheus-url: http://from-file:9090\n"), 0o600))
	c, err = Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
	require.NoError(t, err)
	require.Equal(t, "http://from-file:9090", c.PrometheusURL)

	c, err = Load(NewFlagSet("worker", true), nil, nil)
	require.NoError(t, err)
	require.Empty(t, c.PrometheusURL, "default: no Prometheus, a request with a gate fails")
	require.Nil(t, NewFlagSet("starter", false).Lookup("prometheus-url"), "a worker key only")
}
