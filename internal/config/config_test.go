package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loadCase is a Load of the worker's flags from args and env that succeeds, and what want
// requires of the Config.
type loadCase struct {
	name string
	args []string
	env  []string
	want func(c Config)
}

// checkLoads runs each case as a subtest.
func checkLoads(t *testing.T, cases []loadCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(NewFlagSet("worker", true), tc.args, tc.env)
			require.NoError(t, err)
			tc.want(c)
		})
	}
}

func TestPrecedenceFlagOverEnvOverFileOverDefault(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.yaml")
	require.NoError(t, os.WriteFile(file, []byte("temporal-address: file:7233\nkube-qps: 20\nlog-level: warn\ntask-queue: from-file\n"), 0o600))
	checkLoads(t, []loadCase{
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
	})
}

func TestBadValuesNameTheKey(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(unknown, []byte("temporal-adress: x:1\n"), 0o600))
	badType := filepath.Join(dir, "type.yaml")
	require.NoError(t, os.WriteFile(badType, []byte("kube-qps: fast\n"), 0o600))
	profiles := filepath.Join(dir, "temporal.toml")
	require.NoError(t, os.WriteFile(profiles, []byte("[profile.default]\naddress = \"p:7233\"\n"), 0o600))
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"qps not positive", []string{"--kube-qps", "-1"}, nil, "kube-qps"},
		{"qps from file not a number", []string{"--config", badType}, nil, "kube-qps (NODEROLLOUT_KUBE_QPS): not a number"},
		{"duration from env", nil, []string{"NODEROLLOUT_NODE_CHECK_INTERVAL=often"}, "node-check-interval (NODEROLLOUT_NODE_CHECK_INTERVAL): not a duration; write it like 60s"},
		{"unreadable api key file", []string{"--api-key-file", filepath.Join(dir, "nokey")}, nil, "api-key-file"},
		{"profile that is not there", nil, []string{"TEMPORAL_CONFIG_FILE=" + profiles, "TEMPORAL_PROFILE=staging"}, "staging"},
		{"burst from env", nil, []string{"NODEROLLOUT_KUBE_BURST=lots"}, "NODEROLLOUT_KUBE_BURST"},
		{"log level", nil, []string{"NODEROLLOUT_LOG_LEVEL=loud"}, "log-level"},
		{"stop timeout", []string{"--stop-timeout", "soon"}, nil, "stop-timeout"},
		{"address without port", []string{"--temporal-address", "localhost"}, nil, "temporal-address"},
		{"half a key pair", []string{"--tls-cert", "c.pem"}, nil, "tls-key"},
		{"unknown file key", []string{"--config", unknown}, nil, `temporal-adress: unknown key; did you mean "temporal-address"?`},
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

func TestTemporalsOwnSettingsUnderOurs(t *testing.T) {
	dir := t.TempDir()
	profiles := filepath.Join(dir, "temporal.toml")
	require.NoError(t, os.WriteFile(profiles, []byte(`[profile.default]
address = "default-profile:7233"
namespace = "from-profile"

[profile.cloud]
address = "ns.acct.tmprl.example:7233"
namespace = "ns.acct"
api_key = "profile-key"
`), 0o600))
	keyFile := filepath.Join(dir, "api-key")
	require.NoError(t, os.WriteFile(keyFile, []byte("file-key\n"), 0o600))
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".config", "temporal"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".config", "temporal", "temporal.toml"), []byte("[profile.default]\naddress = \"home:7233\"\n"), 0o600))

	checkLoads(t, []loadCase{
		{"TEMPORAL_ADDRESS as dev/env exports it", nil, []string{"TEMPORAL_ADDRESS=127.0.0.1:17233", "TEMPORAL_NAMESPACE=dev"}, func(c Config) {
			require.Equal(t, "127.0.0.1:17233", c.TemporalAddress)
			require.Equal(t, "dev", c.TemporalNamespace)
			require.False(t, c.UsesTLS())
		}},
		{"NODEROLLOUT_ over TEMPORAL_", nil, []string{"TEMPORAL_ADDRESS=t:7233", "NODEROLLOUT_TEMPORAL_ADDRESS=n:7233"}, func(c Config) {
			require.Equal(t, "n:7233", c.TemporalAddress)
		}},
		{"flag over TEMPORAL_", []string{"--temporal-namespace", "flag"}, []string{"TEMPORAL_NAMESPACE=env"}, func(c Config) {
			require.Equal(t, "flag", c.TemporalNamespace)
		}},
		{"profile from TEMPORAL_CONFIG_FILE and TEMPORAL_PROFILE", nil, []string{"TEMPORAL_CONFIG_FILE=" + profiles, "TEMPORAL_PROFILE=cloud"}, func(c Config) {
			require.Equal(t, "ns.acct.tmprl.example:7233", c.TemporalAddress)
			require.Equal(t, "ns.acct", c.TemporalNamespace)
			require.Equal(t, "profile-key", c.APIKey)
			require.True(t, c.UsesTLS(), "an API key implies TLS")
		}},
		{"default profile, env on top", nil, []string{"TEMPORAL_CONFIG_FILE=" + profiles, "TEMPORAL_NAMESPACE=env-ns"}, func(c Config) {
			require.Equal(t, "default-profile:7233", c.TemporalAddress)
			require.Equal(t, "env-ns", c.TemporalNamespace)
		}},
		{"temporal.toml in the user's config dir", nil, []string{"HOME=" + home}, func(c Config) {
			require.Equal(t, "home:7233", c.TemporalAddress)
		}},
		{"TLS variables", nil, []string{"TEMPORAL_TLS=true", "TEMPORAL_TLS_SERVER_NAME=srv"}, func(c Config) {
			require.True(t, c.UsesTLS())
			require.Equal(t, "srv", c.TLSServerName)
		}},
		{"api key file over TEMPORAL_API_KEY", []string{"--api-key-file", keyFile}, []string{"TEMPORAL_API_KEY=env-key"}, func(c Config) {
			require.Equal(t, "file-key", c.APIKey)
		}},
		{"TEMPORAL_API_KEY", nil, []string{"TEMPORAL_API_KEY=env-key"}, func(c Config) {
			require.Equal(t, "env-key", c.APIKey)
			require.True(t, c.UsesTLS())
		}},
		{"an API key from a Secret with a trailing newline", nil, []string{"NODEROLLOUT_API_KEY=env-key\n"}, func(c Config) {
			require.Equal(t, "env-key", c.APIKey, "a newline in a gRPC header value fails every call")
		}},
		{"TEMPORAL_API_KEY with a trailing newline", nil, []string{"TEMPORAL_API_KEY= env-key\r\n"}, func(c Config) {
			require.Equal(t, "env-key", c.APIKey)
		}},
	})
}

func TestFlagsShowTheirTypes(t *testing.T) {
	fs := NewFlagSet("worker", true)
	require.Equal(t, "duration", fs.Lookup("stop-timeout").Value.Type())
	require.Equal(t, "duration", fs.Lookup("node-check-interval").Value.Type())
	require.Equal(t, "float64", fs.Lookup("kube-qps").Value.Type())
	require.Equal(t, "int", fs.Lookup("kube-burst").Value.Type())
	require.Contains(t, fs.FlagUsages(), "--stop-timeout duration")
}

func TestClusterQualifiesTheTaskQueueAndIsChecked(t *testing.T) {
	c, err := Load(NewFlagSet("worker", true), []string{"--cluster", "eu-west", "--cluster-budget", "3"}, nil)
	require.NoError(t, err)
	require.Equal(t, "noderollout-eu-west", c.TaskQueue)
	require.Equal(t, 3, c.ClusterBudget)
	c, err = Load(NewFlagSet("worker", true), nil, []string{"NODEROLLOUT_CLUSTER=us", "NODEROLLOUT_TASK_QUEUE=rollouts"})
	require.NoError(t, err)
	require.Equal(t, "rollouts-us", c.TaskQueue)
	c, err = Load(NewFlagSet("worker", true), nil, nil)
	require.NoError(t, err)
	require.Equal(t, "noderollout", c.TaskQueue, "no cluster: today's task queue")
	_, err = Load(NewFlagSet("worker", true), []string{"--cluster", "EU_West", "--cluster-budget", "-1"}, nil)
	require.ErrorContains(t, err, "cluster")
	require.ErrorContains(t, err, "NODEROLLOUT_CLUSTER_BUDGET")
}

// A duration written as a bare number in a config file (YAML, JSON or TOML all decode it as an
// integer) must not become that many nanoseconds: stop-timeout: 30 is an error naming the key,
// as NODEROLLOUT_STOP_TIMEOUT=30 and --stop-timeout 30 are.
func TestBareNumberDurationInAFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"worker.yaml": "stop-timeout: 30\nnode-check-interval: 60\n",
		"worker.json": `{"stop-timeout": 30, "node-check-interval": 60}`,
		"worker.toml": "stop-timeout = 30\nnode-check-interval = 60\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(file, []byte(text), 0o600))
			c, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
			require.Error(t, err, "stop-timeout %v, node-check-interval %v", c.StopTimeout, c.NodeCheckInterval)
			require.ErrorContains(t, err, "stop-timeout (NODEROLLOUT_STOP_TIMEOUT): not a duration; write it like 30s")
			require.ErrorContains(t, err, "node-check-interval (NODEROLLOUT_NODE_CHECK_INTERVAL): not a duration; write it like 60s")
		})
	}
	// Written with a unit, the same keys are fine.
	file := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(file, []byte("stop-timeout: 30s\nnode-check-interval: 1m\n"), 0o600))
	c, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, c.StopTimeout)
	require.Equal(t, time.Minute, c.NodeCheckInterval)
}

// An integer setting written with a fraction in a config file must not be truncated
// (kube-burst: 1.5 became 1): it is an error naming the key, as NODEROLLOUT_KUBE_BURST=1.5 is.
func TestFractionalIntegerInAFileIsAnError(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"worker.yaml": "kube-burst: 1.5\nmax-concurrent-activities: 2.5\ncluster-budget: 0.5\n",
		"worker.json": `{"kube-burst": 1.5, "max-concurrent-activities": 2.5, "cluster-budget": 0.5}`,
		"worker.toml": "kube-burst = 1.5\nmax-concurrent-activities = 2.5\ncluster-budget = 0.5\n",
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, name)
			require.NoError(t, os.WriteFile(file, []byte(text), 0o600))
			c, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
			require.Error(t, err, "kube-burst %v", c.KubeBurst)
			require.ErrorContains(t, err, "kube-burst (NODEROLLOUT_KUBE_BURST): not a whole number; use a positive integer, e.g. 100")
			require.ErrorContains(t, err, "max-concurrent-activities (NODEROLLOUT_MAX_CONCURRENT_ACTIVITIES): not a whole number")
			require.ErrorContains(t, err, "cluster-budget (NODEROLLOUT_CLUSTER_BUDGET): not a whole number")
		})
	}
	// A whole number is fine, also as JSON's float or with a YAML ".0"; kube-qps may have a fraction.
	for name, text := range map[string]string{
		"whole.json": `{"kube-burst": 150, "kube-qps": 2.5}`,
		"whole.yaml": "kube-burst: 150.0\nkube-qps: 2.5\n",
	} {
		file := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(file, []byte(text), 0o600))
		c, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
		require.NoError(t, err, name)
		require.Equal(t, 150, c.KubeBurst, name)
		require.Equal(t, 2.5, c.KubeQPS, name)
	}
}

// Every bad key is named at once, not only the first: README promises one line per key.
func TestEveryBadKeyIsNamed(t *testing.T) {
	_, err := Load(NewFlagSet("worker", true), nil, []string{
		"NODEROLLOUT_STOP_TIMEOUT=soon", "NODEROLLOUT_NODE_CHECK_INTERVAL=often", "NODEROLLOUT_KUBE_BURST=lots"})
	require.ErrorContains(t, err, "stop-timeout (NODEROLLOUT_STOP_TIMEOUT): not a duration")
	require.ErrorContains(t, err, "node-check-interval (NODEROLLOUT_NODE_CHECK_INTERVAL): not a duration")
	require.ErrorContains(t, err, "kube-burst (NODEROLLOUT_KUBE_BURST): not a whole number")
}

// A config file whose name does not say its format is refused with the fix, not with viper's
// "unable to determine config type".
func TestConfigFileWithoutAKnownExtensionNamesTheFix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "worker.conf")
	require.NoError(t, os.WriteFile(file, []byte("log-level: debug\n"), 0o600))
	_, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
	require.ErrorContains(t, err, "worker.conf")
	require.ErrorContains(t, err, "name it .yaml, .yml, .json or .toml")
}

// metrics-listen without a port would only be logged once the worker runs, leaving it without
// /healthz and /readyz: it is refused at start, naming the key.
func TestMetricsListenMustBeHostPort(t *testing.T) {
	_, err := Load(NewFlagSet("worker", true), []string{"--metrics-listen", "9090"}, nil)
	require.ErrorContains(t, err, `metrics-listen (NODEROLLOUT_METRICS_LISTEN): "9090" is not host:port`)
	for _, ok := range []string{"", ":9090", "0.0.0.0:9090", "[::1]:9090"} {
		_, err := Load(NewFlagSet("worker", true), []string{"--metrics-listen", ok}, nil)
		require.NoError(t, err, ok)
	}
}
