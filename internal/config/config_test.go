package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.yaml")
	require.NoError(t, os.WriteFile(file, []byte("temporal-address: file:7233\nkube-qps: 20\nlog-level: warn\ntask-queue: from-file\n"), 0o600))
	cases := []struct {
		name string
		args []string
		env  []string
		want func(c Config)
	}{
		{"defaults", nil, nil, func(c Config) {
			require.Equal(t, "127.0.0.1:7233", c.TemporalAddress)
			require.Equal(t, "noderollout", c.TaskQueue)
			require.Equal(t, 50.0, c.KubeQPS)
			require.Equal(t, 30*time.Second, c.StopTimeout)
		}},
		{"file over default", []string{"--config", file}, nil, func(c Config) {
			require.Equal(t, "file:7233", c.TemporalAddress)
			require.Equal(t, 20.0, c.KubeQPS)
			require.Equal(t, "warn", c.LogLevel)
		}},
		{"file named by env", nil, []string{"NODEROLLOUT_CONFIG=" + file}, func(c Config) {
			require.Equal(t, "from-file", c.TaskQueue)
		}},
		{"env over file", []string{"--config", file}, []string{"NODEROLLOUT_TEMPORAL_ADDRESS=env:7233", "NODEROLLOUT_KUBE_QPS=30"}, func(c Config) {
			require.Equal(t, "env:7233", c.TemporalAddress)
			require.Equal(t, 30.0, c.KubeQPS)
			require.Equal(t, "warn", c.LogLevel, "keys the env does not set still come from the file")
		}},
		{"flag over env", []string{"--config", file, "--temporal-address", "flag:7233"}, []string{"NODEROLLOUT_TEMPORAL_ADDRESS=env:7233"}, func(c Config) {
			require.Equal(t, "flag:7233", c.TemporalAddress)
		}},
		{"env only key", nil, []string{"NODEROLLOUT_MAX_CONCURRENT_ACTIVITIES=7", "NODEROLLOUT_STOP_TIMEOUT=5s"}, func(c Config) {
			require.Equal(t, 7, c.MaxConcurrentActivities)
			require.Equal(t, 5*time.Second, c.StopTimeout)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(NewFlagSet("worker", true), tc.args, tc.env)
			require.NoError(t, err)
			tc.want(c)
		})
	}
}

func TestBadValuesNameTheKey(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(unknown, []byte("temporal-adress: x:1\n"), 0o600))
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"qps not a number", []string{"--kube-qps", "-1"}, nil, "kube-qps"},
		{"burst from env", nil, []string{"NODEROLLOUT_KUBE_BURST=lots"}, "NODEROLLOUT_KUBE_BURST"},
		{"log level", nil, []string{"NODEROLLOUT_LOG_LEVEL=loud"}, "log-level"},
		{"stop timeout", []string{"--stop-timeout", "soon"}, nil, "stop-timeout"},
		{"address without port", []string{"--temporal-address", "localhost"}, nil, "temporal-address"},
		{"half a key pair", []string{"--tls-cert", "c.pem"}, nil, "tls-key"},
		{"unknown file key", []string{"--config", unknown}, nil, "temporal-adress"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, nil, "none.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(NewFlagSet("worker", true), tc.args, tc.env)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestStarterFlagSetHasNoWorkerKeys(t *testing.T) {
	fs := NewFlagSet("start", false)
	require.Nil(t, fs.Lookup("kube-qps"))
	require.NotNil(t, fs.Lookup("temporal-address"))
	_, err := Load(fs, []string{"--kube-qps", "3"}, nil)
	require.Error(t, err)
}
