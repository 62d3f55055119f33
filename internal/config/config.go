// Package config loads the worker's and starter's settings from a file, NODEROLLOUT_* environment
// variables and flags (in rising precedence) into one typed, validated Config.
package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/noderollout/noderollout/workflows"
)

// EnvPrefix starts every environment variable the binaries read: NODEROLLOUT_TEMPORAL_ADDRESS.
const EnvPrefix = "NODEROLLOUT"

// Config is every setting of the worker and the starter.
type Config struct {
	ConfigFile string

	TemporalAddress   string
	TemporalNamespace string
	TaskQueue         string
	TLSCert           string
	TLSKey            string
	TLSCA             string
	TLSServerName     string
	APIKey            string
	UIAddress         string
	// TemporalCompression is gzip (the SDK's default) or none.
	TemporalCompression string

	Kubeconfig              string
	KubeQPS                 float64
	KubeBurst               int
	MaxConcurrentActivities int
	MetricsListen           string
	Pprof                   bool
	LogLevel                string
	StopTimeout             time.Duration
	NodeCheckInterval       time.Duration
}

// key is one setting: its name in files and flags, its default and its help.
type key struct {
	name   string
	def    any
	usage  string
	worker bool // only the worker has it
}

var keys = []key{
	{"config", "", "config file (YAML, JSON or TOML) with any of these keys", false},
	{"temporal-address", "127.0.0.1:7233", "Temporal frontend host:port", false},
	{"temporal-namespace", "default", "Temporal namespace", false},
	{"task-queue", workflows.TaskQueue, "Temporal task queue the worker polls", false},
	{"tls-cert", "", "client certificate file for Temporal mTLS", false},
	{"tls-key", "", "client key file for Temporal mTLS", false},
	{"tls-ca", "", "CA file that signs the Temporal server certificate (default: system roots)", false},
	{"tls-server-name", "", "server name to verify in the Temporal certificate", false},
	{"api-key", "", "Temporal Cloud API key (implies TLS)", false},
	{"temporal-compression", "gzip", "gzip (the SDK's default) or none: compression of requests to Temporal", false},
	{"ui-address", "http://127.0.0.1:8233", "Temporal Web UI base URL, for links", false},
	{"kubeconfig", "", "kubeconfig file; empty: in-cluster config, else $KUBECONFIG or ~/.kube/config", true},
	{"kube-qps", 50.0, "Kubernetes client queries per second", true},
	{"kube-burst", 100, "Kubernetes client burst", true},
	{"max-concurrent-activities", 1000, "activities (mostly Job waits) one worker runs at once", true},
	{"metrics-listen", "127.0.0.1:9090", "address of /metrics, /healthz and /readyz; empty: off", true},
	{"pprof", false, "also serve Go profiles at /debug/pprof/ on metrics-listen (keep that address private)", true},
	{"log-level", "info", "debug, info, warn or error", true},
	{"stop-timeout", "30s", "how long a stopping worker lets running activities finish", true},
	{"node-check-interval", "60s", "how often a Job wait checks that its node still exists (one GET per running Job)", true},
}

// NewFlagSet declares the flags of the worker (worker=true) or of a starter subcommand.
func NewFlagSet(name string, worker bool) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	for _, k := range keys {
		if k.worker && !worker {
			continue
		}
		switch d := k.def.(type) {
		case string:
			fs.String(k.name, d, k.usage)
		case int:
			fs.Int(k.name, d, k.usage)
		case float64:
			fs.Float64(k.name, d, k.usage)
		case bool:
			fs.Bool(k.name, d, k.usage)
		}
	}
	return fs
}

// EnvName is the environment variable of a key.
func EnvName(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(key))
}

// Load parses args into fs (declared by NewFlagSet, plus any flags of the caller) and merges
// file, environment (given as KEY=VALUE lines, so tests need no process environment) and flags.
func Load(fs *pflag.FlagSet, args, env []string) (Config, error) {
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	v := viper.New()
	for _, k := range keys {
		v.SetDefault(k.name, k.def)
	}
	fromEnv := map[string]any{}
	envValues := map[string]string{}
	for _, kv := range env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			envValues[name] = value
		}
	}
	for _, k := range keys {
		if value, ok := envValues[EnvName(k.name)]; ok {
			fromEnv[k.name] = value
		}
	}
	file := ""
	if f := fs.Lookup("config"); f != nil && f.Changed {
		file = f.Value.String()
	} else if e, ok := fromEnv["config"]; ok {
		file = e.(string)
	}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		v.SetConfigType(strings.TrimPrefix(filepath.Ext(file), "."))
		if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
			return Config{}, fmt.Errorf("config: %s: %w", file, err)
		}
		if unknown := unknownKeys(v.AllSettings()); len(unknown) > 0 {
			return Config{}, fmt.Errorf("config: %s: unknown key(s) %s (known: %s)", file, strings.Join(unknown, ", "), strings.Join(keyNames(), ", "))
		}
	}
	if err := v.MergeConfigMap(fromEnv); err != nil {
		return Config{}, err
	}
	if err := v.BindPFlags(fs); err != nil {
		return Config{}, err
	}
	return build(v, file)
}

func build(v *viper.Viper, file string) (Config, error) {
	c := Config{
		ConfigFile:          file,
		TemporalAddress:     v.GetString("temporal-address"),
		TemporalNamespace:   v.GetString("temporal-namespace"),
		TaskQueue:           v.GetString("task-queue"),
		TLSCert:             v.GetString("tls-cert"),
		TLSKey:              v.GetString("tls-key"),
		TLSCA:               v.GetString("tls-ca"),
		TLSServerName:       v.GetString("tls-server-name"),
		APIKey:              v.GetString("api-key"),
		UIAddress:           strings.TrimSuffix(v.GetString("ui-address"), "/"),
		TemporalCompression: strings.ToLower(v.GetString("temporal-compression")),
		Kubeconfig:          v.GetString("kubeconfig"),
		MetricsListen:       v.GetString("metrics-listen"),
		LogLevel:            strings.ToLower(v.GetString("log-level")),
	}
	var errs []string
	bad := func(key, problem, fix string) {
		errs = append(errs, fmt.Sprintf("%s (%s): %s; %s", key, EnvName(key), problem, fix))
	}
	var err error
	if c.KubeQPS, err = parseFloat(v.GetString("kube-qps")); err != nil || c.KubeQPS <= 0 {
		bad("kube-qps", fmt.Sprintf("%q is not a positive number", v.GetString("kube-qps")), "use e.g. 50")
	}
	if c.KubeBurst, err = parseInt(v.GetString("kube-burst")); err != nil || c.KubeBurst <= 0 {
		bad("kube-burst", fmt.Sprintf("%q is not a positive integer", v.GetString("kube-burst")), "use e.g. 100")
	}
	if c.MaxConcurrentActivities, err = parseInt(v.GetString("max-concurrent-activities")); err != nil || c.MaxConcurrentActivities <= 0 {
		bad("max-concurrent-activities", fmt.Sprintf("%q is not a positive integer", v.GetString("max-concurrent-activities")), "use e.g. 1000")
	}
	if c.Pprof, err = strconv.ParseBool(v.GetString("pprof")); err != nil {
		bad("pprof", fmt.Sprintf("%q is not a boolean", v.GetString("pprof")), "use true or false")
	}
	if c.StopTimeout, err = time.ParseDuration(v.GetString("stop-timeout")); err != nil || c.StopTimeout < 0 {
		bad("stop-timeout", fmt.Sprintf("%q is not a duration", v.GetString("stop-timeout")), "write it like 30s")
	}
	if c.NodeCheckInterval, err = time.ParseDuration(v.GetString("node-check-interval")); err != nil || c.NodeCheckInterval <= 0 {
		bad("node-check-interval", fmt.Sprintf("%q is not a positive duration", v.GetString("node-check-interval")), "write it like 60s")
	}
	switch c.TemporalCompression {
	case "gzip", "none":
	default:
		bad("temporal-compression", fmt.Sprintf("%q is not a compression", c.TemporalCompression), "use gzip or none")
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", fmt.Sprintf("%q is not a level", c.LogLevel), "use debug, info, warn or error")
	}
	if c.TemporalAddress == "" || !strings.Contains(c.TemporalAddress, ":") {
		bad("temporal-address", fmt.Sprintf("%q is not host:port", c.TemporalAddress), "use e.g. 127.0.0.1:7233")
	}
	if c.TaskQueue == "" {
		bad("task-queue", "is empty", "omit it for the default "+workflows.TaskQueue)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		bad("tls-cert", "tls-cert and tls-key go together", "set both or neither")
	}
	if len(errs) > 0 {
		return c, fmt.Errorf("bad configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return c, nil
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(strings.TrimSpace(s), 64) }

func parseInt(s string) (int, error) { return strconv.Atoi(strings.TrimSpace(s)) }

func keyNames() []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	return names
}

func unknownKeys(settings map[string]any) []string {
	known := map[string]bool{}
	for _, k := range keys {
		known[k.name] = true
	}
	var unknown []string
	for k := range settings {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return unknown
}
