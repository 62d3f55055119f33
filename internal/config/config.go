// Package config loads the worker's and starter's settings into one typed, validated Config.
//
// Layers, lowest first: built-in defaults; Temporal's own client settings (the temporal.toml
// profile, then TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*), read
// with the SDK's envconfig; the file named by --config; NODEROLLOUT_* variables; flags.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.temporal.io/sdk/contrib/envconfig"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/api/didyoumean"
)

// clusterName is a DNS-1123 label, so it can qualify IDs and task queues unambiguously.
var clusterName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// EnvPrefix starts every environment variable of our own: NODEROLLOUT_TEMPORAL_ADDRESS.
const EnvPrefix = "NODEROLLOUT"

// Config is every setting of the worker and the starter. The mapstructure tags are the key
// names of files, flags and (upper case, '-' as '_', with the prefix) environment variables.
type Config struct {
	ConfigFile string `mapstructure:"config"`

	TemporalAddress   string `mapstructure:"temporal-address"`
	TemporalNamespace string `mapstructure:"temporal-namespace"`
	TaskQueue         string `mapstructure:"task-queue"`
	// Cluster names the cluster when many share one Temporal namespace; TaskQueue is then
	// already qualified by it (workflows.ClusterTaskQueue).
	Cluster string `mapstructure:"cluster"`
	// ClusterBudget is the cluster-wide disruption budget (nodes in flight across all rollouts).
	ClusterBudget int `mapstructure:"cluster-budget"`
	// TLS turns on TLS with the system's roots when no certificate, CA or API key does.
	TLS           bool   `mapstructure:"tls"`
	TLSCert       string `mapstructure:"tls-cert"`
	TLSKey        string `mapstructure:"tls-key"`
	TLSCA         string `mapstructure:"tls-ca"`
	TLSServerName string `mapstructure:"tls-server-name"`
	APIKey        string `mapstructure:"api-key"`
	// APIKeyFile keeps the key off the command line and out of the environment (a mounted Secret).
	APIKeyFile string `mapstructure:"api-key-file"`
	UIAddress  string `mapstructure:"ui-address"`
	// TemporalCompression is gzip (the SDK's default) or none.
	TemporalCompression string `mapstructure:"temporal-compression"`

	Kubeconfig              string        `mapstructure:"kubeconfig"`
	KubeQPS                 float64       `mapstructure:"kube-qps"`
	KubeBurst               int           `mapstructure:"kube-burst"`
	MaxConcurrentActivities int           `mapstructure:"max-concurrent-activities"`
	MetricsListen           string        `mapstructure:"metrics-listen"`
	Pprof                   bool          `mapstructure:"pprof"`
	LogLevel                string        `mapstructure:"log-level"`
	StopTimeout             time.Duration `mapstructure:"stop-timeout"`
	StartupTimeout          time.Duration `mapstructure:"startup-timeout"`
	NodeCheckInterval       time.Duration `mapstructure:"node-check-interval"`

	// PEM data given inline by a Temporal profile or TEMPORAL_TLS_*_DATA instead of files.
	TLSCertData []byte `mapstructure:"-"`
	TLSKeyData  []byte `mapstructure:"-"`
	TLSCAData   []byte `mapstructure:"-"`
	// TemporalProfile names where Temporal's settings came from, for messages ("" if nowhere).
	TemporalProfile string `mapstructure:"-"`
	// PolicyFile names the worker's policy (internal/policy); JobNamespaces limits the Job
	// watch to those namespaces (namespaced RBAC), empty: the whole cluster.
	PolicyFile        string   `mapstructure:"policy-file"`
	JobNamespacesList string   `mapstructure:"job-namespaces"`
	JobNamespaces     []string `mapstructure:"-"`
}

// key is one setting: its name, its default (whose type is the flag's type) and its help.
type key struct {
	name   string
	def    any
	usage  string
	fix    string // how to write a good value, for messages
	worker bool   // only the worker has it
}

var keys = []key{
	{"config", "", "config file (YAML, JSON or TOML) with any of these keys", "", false},
	{"temporal-address", "127.0.0.1:7233", "Temporal frontend host:port (also --address, TEMPORAL_ADDRESS)", "use host:port, e.g. 127.0.0.1:7233", false},
	{"temporal-namespace", "default", "Temporal namespace (also --namespace, TEMPORAL_NAMESPACE)", "", false},
	{"task-queue", api.TaskQueue, "Temporal task queue the worker polls", "omit it for the default " + api.TaskQueue, false},
	{"cluster", "", "name of this cluster when many share one Temporal namespace: the task queue becomes <task-queue>-<cluster> and node workflow IDs noderollout-node-<cluster>:<node>; empty: a single cluster, today's names", "use a DNS-1123 label, e.g. eu-west-1", false},
	{"cluster-budget", 0, "at most this many nodes of the cluster in flight across all rollouts, granted by one coordinator workflow per cluster; 0: no cluster-wide budget", "use a whole number of nodes, 0 for none", true},
	{"tls", false, "TLS to Temporal with the system's CA roots (also TEMPORAL_TLS); implied by the other tls-* keys and an API key", "use true or false", false},
	{"tls-cert", "", "client certificate file for Temporal mTLS (also TEMPORAL_TLS_CLIENT_CERT_PATH)", "", false},
	{"tls-key", "", "client key file for Temporal mTLS (also TEMPORAL_TLS_CLIENT_KEY_PATH)", "", false},
	{"tls-ca", "", "CA file of the Temporal server certificate (also TEMPORAL_TLS_SERVER_CA_CERT_PATH; default: system roots)", "", false},
	{"tls-server-name", "", "server name to verify in the Temporal certificate (also TEMPORAL_TLS_SERVER_NAME)", "", false},
	{"api-key", "", "Temporal Cloud API key, implies TLS; prefer --api-key-file or TEMPORAL_API_KEY, which stay out of the process list", "", false},
	{"api-key-file", "", "file holding the Temporal Cloud API key (e.g. a mounted Secret)", "", false},
	{"temporal-compression", "gzip", "gzip (the SDK's default) or none: compression of requests to Temporal", "use gzip or none", false},
	{"ui-address", "http://127.0.0.1:8233", "Temporal Web UI base URL, for links", "", false},
	{"kubeconfig", "", "kubeconfig file; empty: in-cluster config, else $KUBECONFIG or ~/.kube/config", "", true},
	{"kube-qps", 50.0, "Kubernetes client queries per second", "use a positive number, e.g. 50", true},
	{"kube-burst", 100, "Kubernetes client burst", "use a positive integer, e.g. 100", true},
	{"max-concurrent-activities", 1000, "activities (mostly Job waits) one worker runs at once", "use a positive integer, e.g. 1000", true},
	{"metrics-listen", "127.0.0.1:9090", "address of /metrics, /healthz and /readyz; empty: off", "use host:port, e.g. 0.0.0.0:9090, or empty for off", true},
	{"pprof", false, "also serve Go profiles at /debug/pprof/ on metrics-listen (keep that address private)", "use true or false", true},
	{"log-level", "info", "debug, info, warn or error", "use debug, info, warn or error", true},
	{"stop-timeout", 30 * time.Second, "how long a stopping worker lets running activities finish", "write it like 30s", true},
	{"startup-timeout", 2 * time.Minute, "how long a starting worker retries an unreachable Kubernetes API server (and waits for its Job informer) before it exits 1", "write it like 2m", true},
	{"node-check-interval", 60 * time.Second, "how often a Job wait checks that its node still exists (one GET per running Job)", "write it like 60s", true},
	{"policy-file", "", "policy (YAML/JSON) of namespaces, images, ServiceAccounts, host access, parallelism and nodes rollouts may use; empty: no limits (README: Security model)", "", true},
	{"job-namespaces", "", "comma-separated namespaces the worker watches Jobs in (namespaced RBAC); empty: all", "write the namespaces comma-separated, e.g. maint,apps (or as a list in a file)", true},
}

// flagAliases are the Temporal CLI's names of our flags, so its habits work here too.
var flagAliases = map[string]string{"address": "temporal-address", "namespace": "temporal-namespace"}

// shorthands are the one-letter flags, as the Temporal CLI has them.
var shorthands = map[string]string{"temporal-namespace": "n"}

// NormalizeFlagName maps the Temporal CLI's flag names (--address, --namespace) to ours.
func NormalizeFlagName(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	if ours, ok := flagAliases[name]; ok {
		name = ours
	}
	return pflag.NormalizedName(name)
}

// ProfileFlag names the temporal.toml profile to read (as the Temporal CLI's --profile); it
// is no key of its own, because it says where the keys' defaults come from.
const ProfileFlag = "profile"

// AddFlags declares the flags of the worker (worker=true) or the starter's connection flags,
// each with the type of its default, and the Temporal CLI's names for them (--address,
// --namespace/-n, --profile).
func AddFlags(fs *pflag.FlagSet, worker bool) {
	fs.SetNormalizeFunc(NormalizeFlagName)
	fs.String(ProfileFlag, "", "profile of temporal.toml to read (also TEMPORAL_PROFILE; default: default)")
	for _, k := range keys {
		if k.worker && !worker {
			continue
		}
		switch d := k.def.(type) {
		case string:
			fs.StringP(k.name, shorthands[k.name], d, k.usage)
		case int:
			fs.Int(k.name, d, k.usage)
		case float64:
			fs.Float64(k.name, d, k.usage)
		case bool:
			fs.Bool(k.name, d, k.usage)
		case time.Duration:
			fs.Duration(k.name, d, k.usage)
		}
	}
}

// NewFlagSet is a flag set holding AddFlags' flags.
func NewFlagSet(name string, worker bool) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	AddFlags(fs, worker)
	return fs
}

// WithFlagHint adds a did-you-mean to pflag's "unknown flag: --name", from the flags of fs.
func WithFlagHint(err error, fs *pflag.FlagSet) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if c, ok := didyoumean.Closest(name, names); ok {
		return fmt.Errorf("%w; did you mean %q?", err, "--"+c)
	}
	return err
}

// EnvName is the environment variable of a key.
func EnvName(key string) string {
	return EnvPrefix + "_" + envReplacer.Replace(strings.ToUpper(key))
}

var envReplacer = strings.NewReplacer("-", "_", ".", "_")

// Load parses args into fs (declared by NewFlagSet, plus any flags of the caller) and loads
// the Config. env is KEY=VALUE lines, so tests need no process environment.
func Load(fs *pflag.FlagSet, args, env []string) (Config, error) {
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	return FromFlags(fs, env)
}

// FromFlags loads the Config from an already parsed flag set and the environment env.
//
// The environment reaches viper as a config layer merged above the file rather than through
// AutomaticEnv, which reads the process environment only: that keeps the loader a pure
// function of its arguments.
func FromFlags(fs *pflag.FlagSet, env []string) (Config, error) {
	environ := envMap(env)
	if f := fs.Lookup(ProfileFlag); f != nil && f.Changed {
		environ["TEMPORAL_PROFILE"] = f.Value.String()
	}
	v := viper.New()
	for _, k := range keys {
		v.SetDefault(k.name, k.def)
	}
	temporal, err := temporalProfile(environ)
	if err != nil {
		return Config{}, err
	}
	for name, value := range temporal.defaults {
		v.SetDefault(name, value)
	}

	file := ""
	if f := fs.Lookup("config"); f != nil && f.Changed {
		file = f.Value.String()
	} else if e, ok := environ[EnvName("config")]; ok {
		file = e
	}
	if file != "" {
		if err := readFile(v, file); err != nil {
			return Config{}, err
		}
	}
	fromEnv := map[string]any{}
	for _, k := range keys {
		if value, ok := environ[EnvName(k.name)]; ok {
			fromEnv[k.name] = value
		}
	}
	if err := v.MergeConfigMap(fromEnv); err != nil {
		return Config{}, err
	}
	for _, k := range keys {
		if f := fs.Lookup(k.name); f != nil {
			if err := v.BindPFlag(k.name, f); err != nil {
				return Config{}, err
			}
		}
	}

	// A YAML or JSON file may list job-namespaces rather than write them comma-separated.
	if list, ok := v.Get("job-namespaces").([]any); ok {
		names := make([]string, len(list))
		for i, ns := range list {
			names[i] = fmt.Sprint(ns)
		}
		v.Set("job-namespaces", strings.Join(names, ","))
	}

	var c Config
	hook := mapstructure.ComposeDecodeHookFunc(bareNumberDuration, fractionalInteger, mapstructure.StringToTimeDurationHookFunc(), trimSpace)
	if err := v.UnmarshalExact(&c, viper.DecodeHook(hook)); err != nil {
		return c, fmt.Errorf("bad configuration:\n  %s", strings.Join(decodeProblems(err), "\n  "))
	}
	c.ConfigFile = file
	c.TLSCertData, c.TLSKeyData, c.TLSCAData = temporal.certData, temporal.keyData, temporal.caData
	c.TemporalProfile = temporal.source
	c.UIAddress = strings.TrimSuffix(c.UIAddress, "/")
	c.TemporalCompression = strings.ToLower(c.TemporalCompression)
	c.LogLevel = strings.ToLower(c.LogLevel)
	// A key from a Secret often ends in a newline, which gRPC refuses in a header value.
	c.APIKey = strings.TrimSpace(c.APIKey)
	for _, ns := range strings.Split(c.JobNamespacesList, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			c.JobNamespaces = append(c.JobNamespaces, ns)
		}
	}
	if err := c.readAPIKeyFile(); err != nil {
		return c, err
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	c.TaskQueue = api.ClusterTaskQueue(c.TaskQueue, c.Cluster)
	return c, nil
}

// trimSpace lets a value written as " 50" in a file or variable count as 50.
func trimSpace(from, to reflect.Type, data any) (any, error) {
	if s, ok := data.(string); ok && from.Kind() == reflect.String && to.Kind() != reflect.String {
		return strings.TrimSpace(s), nil
	}
	return data, nil
}

// bareNumberDuration refuses a duration written as a number in a file (stop-timeout: 30),
// which would otherwise decode as that many nanoseconds; --stop-timeout 30 and
// NODEROLLOUT_STOP_TIMEOUT=30 are refused for their missing unit too.
func bareNumberDuration(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeOf(time.Duration(0)) || from == to {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("%v has no unit", data)
	}
	return data, nil
}

// fractionalInteger refuses a number with a fraction in a file (YAML, JSON and TOML decode it as
// a float64) for an integer key: kube-burst: 1.5 would otherwise become 1.
// NODEROLLOUT_KUBE_BURST=1.5 and --kube-burst 1.5 are refused as not whole too.
func fractionalInteger(_, to reflect.Type, data any) (any, error) {
	if f, ok := data.(float64); ok && to.Kind() == reflect.Int && f != math.Trunc(f) {
		return nil, fmt.Errorf("%v is not a whole number", f)
	}
	return data, nil
}

func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		if name, value, ok := strings.Cut(kv, "="); ok {
			m[name] = value
		}
	}
	return m
}

func readFile(v *viper.Viper, file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	ext := strings.ToLower(strings.TrimPrefix(filepath.Ext(file), "."))
	switch ext {
	case "yaml", "yml", "json", "toml":
	default:
		return fmt.Errorf("config: %s: the file's extension says its format: name it .yaml, .yml, .json or .toml", file)
	}
	v.SetConfigType(ext)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("config: %s: %w", file, err)
	}
	if unknown := unknownKeys(v.AllKeys()); len(unknown) > 0 {
		lines := make([]string, len(unknown))
		for i, u := range unknown {
			lines[i] = u + ": unknown key" + didyoumean.Hint(u, keyNames())
		}
		return fmt.Errorf("config: %s:\n  %s\n(known keys: %s)", file, strings.Join(lines, "\n  "), strings.Join(keyNames(), ", "))
	}
	return nil
}

// decodeProblems turns viper's decoding errors into one line per key naming its variable.
func decodeProblems(err error) []string {
	var lines []string
	var walk func(error)
	walk = func(err error) {
		if joined, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range joined.Unwrap() {
				walk(e)
			}
			return
		}
		if de, ok := err.(*mapstructure.DecodeError); ok {
			lines = append(lines, describe(de.Name(), fmt.Sprintf("not a %s", typeName(de.Name()))))
			return
		}
		// mapstructure wraps the joined problems in one message ("decoding failed due to the
		// following error(s)"): look inside, so that every key is named, not just the first.
		if inner := errors.Unwrap(err); inner != nil {
			walk(inner)
			return
		}
		lines = append(lines, err.Error())
	}
	walk(err)
	sort.Strings(lines)
	return lines
}

func typeName(name string) string {
	for _, k := range keys {
		if k.name == name {
			switch k.def.(type) {
			case int:
				return "whole number"
			case float64:
				return "number"
			case bool:
				return "boolean"
			case time.Duration:
				return "duration"
			}
		}
	}
	return "valid value"
}

// BadValueError is a setting found wrong only when used (a TLS file that cannot be read): the
// configuration, not the system, is at fault, and the binaries exit 2 for it.
type BadValueError struct{ msg string }

func (e *BadValueError) Error() string { return e.msg }

// BadValue is the error for a key whose value cannot be used, naming the key and its variable.
func BadValue(key, problem string) error {
	return &BadValueError{"bad configuration:\n  " + describe(key, problem)}
}

// describe is one problem line: the key, its variable, what is wrong and how to fix it.
func describe(name, problem string) string {
	line := fmt.Sprintf("%s (%s): %s", name, EnvName(name), problem)
	for _, k := range keys {
		if k.name == name && k.fix != "" {
			line += "; " + k.fix
		}
	}
	return line
}

func (c *Config) readAPIKeyFile() error {
	if c.APIKeyFile == "" {
		return nil
	}
	data, err := os.ReadFile(c.APIKeyFile)
	if err != nil {
		return fmt.Errorf("bad configuration:\n  %s", describe("api-key-file", err.Error()))
	}
	c.APIKey = strings.TrimSpace(string(data))
	return nil
}

func (c Config) validate() error {
	var errs []string
	bad := func(key, problem string) { errs = append(errs, describe(key, problem)) }
	if c.KubeQPS <= 0 {
		bad("kube-qps", fmt.Sprintf("%v is not positive", c.KubeQPS))
	}
	if c.KubeBurst <= 0 {
		bad("kube-burst", fmt.Sprintf("%d is not positive", c.KubeBurst))
	}
	if c.MaxConcurrentActivities <= 0 {
		bad("max-concurrent-activities", fmt.Sprintf("%d is not positive", c.MaxConcurrentActivities))
	}
	if c.StopTimeout < 0 {
		bad("stop-timeout", "is negative")
	}
	if c.StartupTimeout <= 0 {
		bad("startup-timeout", "is not positive")
	}
	if c.NodeCheckInterval <= 0 {
		bad("node-check-interval", "is not positive")
	}
	switch c.TemporalCompression {
	case "gzip", "none":
	default:
		bad("temporal-compression", fmt.Sprintf("%q is not a compression", c.TemporalCompression))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log-level", fmt.Sprintf("%q is not a level", c.LogLevel))
	}
	if c.TemporalAddress == "" || !strings.Contains(c.TemporalAddress, ":") {
		bad("temporal-address", fmt.Sprintf("%q is not host:port", c.TemporalAddress))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			bad("metrics-listen", fmt.Sprintf("%q is not host:port", c.MetricsListen))
		}
	}
	if c.TaskQueue == "" {
		bad("task-queue", "is empty")
	}
	if c.Cluster != "" && !clusterName.MatchString(c.Cluster) {
		bad("cluster", fmt.Sprintf("%q is not a DNS-1123 label (lower-case letters, digits and '-', at most 63)", c.Cluster))
	}
	if c.ClusterBudget < 0 {
		bad("cluster-budget", fmt.Sprintf("%d is negative", c.ClusterBudget))
	}
	if (c.TLSCert == "" && len(c.TLSCertData) == 0) != (c.TLSKey == "" && len(c.TLSKeyData) == 0) {
		bad("tls-cert", "tls-cert and tls-key go together; set both or neither")
	}
	if len(errs) > 0 {
		return fmt.Errorf("bad configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// UsesTLS tells whether the connection to Temporal is TLS.
func (c Config) UsesTLS() bool {
	return c.TLS || c.TLSCert != "" || len(c.TLSCertData) > 0 || c.TLSCA != "" || len(c.TLSCAData) > 0 || c.APIKey != ""
}

// temporalSettings are Temporal's own client settings, as defaults for our keys.
type temporalSettings struct {
	defaults                  map[string]any
	certData, keyData, caData []byte
	source                    string
}

type envLookup map[string]string

func (e envLookup) LookupEnv(key string) (string, bool) { v, ok := e[key]; return v, ok }

func (e envLookup) Environ() []string {
	out := make([]string, 0, len(e))
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

// temporalProfile reads the temporal.toml profile (TEMPORAL_CONFIG_FILE, else the user's
// config directory; TEMPORAL_PROFILE, else "default") and the TEMPORAL_* variables on top,
// as the Temporal CLI and SDKs do.
func temporalProfile(environ map[string]string) (temporalSettings, error) {
	s := temporalSettings{defaults: map[string]any{}}
	file := environ["TEMPORAL_CONFIG_FILE"]
	if file != "" {
		// Named explicitly, a file that is not there is a mistake (the SDK would go on without it).
		if _, err := os.Stat(file); err != nil {
			return s, fmt.Errorf("temporal client settings: TEMPORAL_CONFIG_FILE=%s: %w", file, err)
		}
	} else {
		file = defaultTemporalConfigFile(environ)
	}
	if v, ok := environ["TEMPORAL_TLS"]; ok && v != "" {
		switch strings.ToLower(v) {
		case "1", "0", "true", "false":
		default:
			return s, fmt.Errorf("temporal client settings: TEMPORAL_TLS=%q is not a boolean; use true or false (or 1, 0)", v)
		}
	}
	if p := environ["TEMPORAL_PROFILE"]; p != "" {
		if _, err := os.Stat(file); file == "" || err != nil {
			return s, fmt.Errorf("temporal client settings: profile %q is named (--profile or TEMPORAL_PROFILE) but there is no temporal.toml to hold it (looked at %q; TEMPORAL_CONFIG_FILE names another)", p, file)
		}
	}
	if err := checkTemporalFile(file, environ["TEMPORAL_PROFILE"]); err != nil {
		return s, err
	}
	prof, err := envconfig.LoadClientConfigProfile(envconfig.LoadClientConfigProfileOptions{
		ConfigFilePath: file,
		// Without a path the SDK would look at the process's home directory.
		DisableFile: file == "",
		EnvLookup:   envLookup(environ),
	})
	if err != nil {
		return s, fmt.Errorf("temporal client settings (%s, TEMPORAL_* variables): %w", file, err)
	}
	set := func(name, value string) {
		if value != "" {
			s.defaults[name] = value
		}
	}
	set("temporal-address", prof.Address)
	set("temporal-namespace", prof.Namespace)
	set("api-key", prof.APIKey)
	if t := prof.TLS; t != nil {
		if t.DisableHostVerification {
			return s, errors.New("temporal client settings: disabling TLS host verification is not supported; give the server's CA (TEMPORAL_TLS_SERVER_CA_CERT_PATH) instead")
		}
		if !t.Disabled {
			s.defaults["tls"] = true
		}
		set("tls-cert", t.ClientCertPath)
		set("tls-key", t.ClientKeyPath)
		set("tls-ca", t.ServerCACertPath)
		set("tls-server-name", t.ServerName)
		s.certData, s.keyData, s.caData = t.ClientCertData, t.ClientKeyData, t.ServerCACertData
	}
	if len(s.defaults) > 0 || s.certData != nil {
		s.source = file
		if p := environ["TEMPORAL_PROFILE"]; p != "" {
			s.source += " profile " + p
		}
	}
	return s, nil
}

// temporalProfileKeys are the keys of a temporal.toml profile, for a did-you-mean.
var temporalProfileKeys = []string{"address", "namespace", "api_key", "tls", "codec", "grpc_meta",
	"disabled", "client_cert_path", "client_cert_data", "client_key_path", "client_key_data",
	"server_ca_cert_path", "server_ca_cert_data", "server_name", "disable_host_verification", "endpoint", "auth"}

// checkTemporalFile refuses keys of temporal.toml that its format does not have, in the
// profile in use: a misspelt address would otherwise be ignored and the default used. Keys
// of other profiles are not ours to judge.
func checkTemporalFile(file, profile string) error {
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil // absent: the SDK's to judge (not there is fine), read again there
	}
	var conf envconfig.ClientConfig
	err = conf.FromTOML(data, envconfig.ClientConfigFromTOMLOptions{Strict: true})
	if err == nil {
		return nil
	}
	list, ok := strings.CutPrefix(err.Error(), "key(s) unrecognized: ")
	if !ok {
		return fmt.Errorf("temporal client settings: %s: %w", file, err)
	}
	if profile == "" {
		profile = "default"
	}
	var lines []string
	for _, k := range strings.Split(list, ", ") {
		if !strings.HasPrefix(k, "profile."+profile+".") {
			continue
		}
		last := k[strings.LastIndex(k, ".")+1:]
		lines = append(lines, k+": unknown key"+didyoumean.Hint(last, temporalProfileKeys))
	}
	if len(lines) == 0 {
		return nil
	}
	return fmt.Errorf("temporal client settings: %s:\n  %s", file, strings.Join(lines, "\n  "))
}

// defaultTemporalConfigFile is where the Temporal CLI keeps temporal.toml, computed from env
// rather than the process environment.
func defaultTemporalConfigFile(environ map[string]string) string {
	dir := environ["XDG_CONFIG_HOME"]
	if dir == "" {
		home := environ["HOME"]
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "temporal", "temporal.toml")
}

func keyNames() []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.name
	}
	return names
}

func unknownKeys(settings []string) []string {
	known := map[string]bool{}
	for _, k := range keys {
		known[k.name] = true
	}
	var unknown []string
	for _, k := range settings {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return unknown
}
