// Command worker runs the noderollout Temporal worker: it polls the task queue and runs the
// Rollout and NodeRollout workflows and their Kubernetes activities.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // maintenance windows name IANA zones: a zone database even where the image has none

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/connect"
	"github.com/noderollout/noderollout/internal/metrics"
	"github.com/noderollout/noderollout/internal/policy"
	"github.com/noderollout/noderollout/internal/version"
	"github.com/noderollout/noderollout/workflows"
)

func main() {
	fs, showVersion, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	if showVersion {
		fmt.Println("worker", version.Get())
		os.Exit(0)
	}
	cfg, err := config.FromFlags(fs, os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	pol, err := loadPolicy(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, pol); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		if errors.As(err, new(*config.BadValueError)) {
			os.Exit(2) // a setting that could not be used, as for one found bad at load
		}
		os.Exit(1)
	}
}

// parseFlags parses the worker's command line into its flag set; showVersion is --version.
func parseFlags(args []string) (fs *pflag.FlagSet, showVersion bool, err error) {
	fs = config.NewFlagSet("worker", true)
	versionFlag := fs.Bool("version", false, "print the version, commit, Go and Temporal SDK versions and exit")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, `Usage: worker [flags]
       worker version

Runs the noderollout worker. Every flag can also be set as %s_<FLAG>
(upper case, '-' as '_') or as a key in --config. Temporal's own settings
(TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*,
temporal.toml profiles) are read first; the file, %s_* variables and
flags win over them.

%s`, config.EnvPrefix, config.EnvPrefix, fs.FlagUsagesWrapped(80))
	}
	if err = fs.Parse(args); err != nil {
		return fs, false, config.WithFlagHint(err, fs)
	}
	// The worker takes flags only; "version" is the one word it knows, like starter version.
	switch rest := fs.Args(); {
	case len(rest) == 1 && rest[0] == "version":
		return fs, true, nil
	case len(rest) > 0:
		return fs, false, fmt.Errorf("unexpected argument %q: the worker takes flags only (worker --help); worker version prints the version", rest[0])
	}
	return fs, *versionFlag, nil
}

func run(ctx context.Context, cfg config.Config, pol *policy.Policy) error {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level(cfg.LogLevel)}))
	collector := metrics.NewCollector()
	health := &metrics.Health{}
	if cfg.MetricsListen != "" {
		v := version.Get()
		srv := metrics.Serve(cfg.MetricsListen, collector, health, metrics.BuildInfo{Version: v.Version, Commit: v.Commit, GoVersion: v.GoVersion, SDKVersion: v.SDKVersion}, cfg.Pprof)
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("metrics server stopped", "error", err)
			}
		}()
		defer srv.Close()
	}

	kube, err := connect.Kubernetes(cfg)
	if err != nil {
		return err
	}
	acts := activities.New(kube)
	acts.NodeCheckInterval = cfg.NodeCheckInterval
	acts.Policy = pol
	if acts.Prometheus, err = prometheus(cfg); err != nil {
		return err
	}
	if pol != nil {
		logger.Info("policy in force", "file", cfg.PolicyFile, "jobNamespaces", cfg.JobNamespaces)
	}
	if len(cfg.JobNamespaces) > 0 {
		acts.Jobs = activities.NewJobWatcher(kube, cfg.JobNamespaces...)
	}
	// An unreachable API server is said at once and retried, visibly; a signal or the startup
	// timeout ends the wait (exit 1).
	if err := connect.WaitForKubernetes(ctx, kube.Discovery(), kubeHost(cfg), cfg.StartupTimeout, logger); err != nil {
		return err
	}
	// The shared Job informer must be synced before any WaitJob runs, and must outlive the
	// signal: while the worker stops, running activities still wait on it, so it stops only
	// after they have. Waiting for its sync, though, ends on a signal like any other wait.
	informerCtx, stopInformer := context.WithCancel(context.WithoutCancel(ctx))
	defer stopInformer()
	if err := waitForInformer(ctx, informerCtx, acts.Jobs, cfg.StartupTimeout, logger); err != nil {
		return err
	}
	// Checked once the informer synced, so the API server is known to answer: a version that
	// cannot be read then is not just a server still starting. Too old exits 1, not 2: the
	// cluster is wrong, not a setting.
	kubeVersion, err := connect.CheckKubernetesVersion(ctx, kube.Discovery(), logger)
	if err != nil {
		return err
	}
	// From 1.31 a finished Job's Pod counts are final, so its end needs no Pod list.
	acts.TrustJobPodCounts = activities.TrustsJobPodCounts(kubeVersion)
	if kubeVersion != nil {
		logger.Info("kubernetes", "version", kubeVersion.String(), "jobPodCountsTrusted", acts.TrustJobPodCounts)
	}

	fatal := make(chan error, 1)
	tc, err := connect.Temporal(ctx, cfg, logger, collector.Handler())
	if err != nil {
		return err
	}
	defer tc.Close()

	quietLongWorkflowTasks()
	w := worker.New(tc, cfg.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentActivities,
		WorkerStopTimeout:                       cfg.StopTimeout,
		Identity:                                identity(),
		MaxHeartbeatThrottleInterval:            maxHeartbeatThrottle,
		// The worker stops polling for good (namespace gone, credentials refused): say so on
		// both probes, so the Pod leaves the Service and the kubelet restarts it.
		OnFatalError: func(err error) {
			logger.Error("Temporal worker stopped on a fatal error; /healthz and /readyz now fail", "error", err)
			health.Fail(err.Error())
			select {
			case fatal <- err:
			default:
			}
		},
	})
	cluster := api.Cluster{Name: cfg.Cluster, Budget: cfg.ClusterBudget}
	workflows.OnCluster{Cluster: cluster}.Register(w)
	// Only node workflows a running Rollout started write to the cluster.
	acts.Lineage = &activities.Lineage{Temporal: tc, RolloutType: api.RolloutWorkflow,
		NodeTypes: api.NodeWorkflowTypes}
	w.RegisterActivity(acts)
	w.RegisterActivity(&activities.Coordination{Temporal: tc})
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	// The informer tells each node that awaits its Job (AwaitJobEnd) when the Job ends, and at
	// once every Job that ended while no worker watched.
	notifier := &activities.JobEndNotifier{Temporal: tc, Namespace: cfg.TemporalNamespace, NodeWorkflowID: cluster.NodeWorkflowID, Logger: logger, Awaited: acts.Jobs.Awaited}
	acts.Jobs.NotifyEnds(notifier.Observe)
	// Every worker also serves the fleet queue, so a FleetRollout goes on while any cluster's
	// worker is up.
	fleet := worker.New(tc, api.FleetTaskQueue, worker.Options{Identity: identity(), WorkerStopTimeout: cfg.StopTimeout})
	fleet.RegisterWorkflowWithOptions(workflows.FleetRollout, workflow.RegisterOptions{Name: api.FleetRolloutWorkflow})
	if err := fleet.Start(); err != nil {
		return fmt.Errorf("starting the fleet worker: %w", err)
	}
	defer fleet.Stop()
	// Converging rollouts (mode: converge) hear of node changes from this watch; its first
	// list tells each of them to look at all its nodes, which catches what changed while no
	// worker watched. Without it (RBAC refusing watch on Nodes) they hear of nothing new.
	nodeWatch := &activities.NodeWatch{Kube: kube, Temporal: tc, TaskQueue: cfg.TaskQueue, Logger: logger}
	go func() {
		if err := nodeWatch.Run(informerCtx); err != nil && informerCtx.Err() == nil {
			logger.Warn("the Node watch did not start: converging rollouts hear of no node changes", "error", err)
		}
	}()
	// A node workflow terminated by hand tells no one: this tells, within a minute, the rollout
	// it was handed to at a continue-as-new and any rollout waiting for the node, which would
	// otherwise hear only at their busy-node recheck.
	terminated := &activities.TerminatedNodeNotifier{Temporal: tc, TaskQueue: cfg.TaskQueue, NodeOfWorkflowID: cluster.NodeOfWorkflowID, Logger: logger}
	go terminated.Run(informerCtx)
	health.SetReady(true)
	logger.Info("worker polling", "taskQueue", cfg.TaskQueue, "cluster", cfg.Cluster, "clusterBudget", cfg.ClusterBudget, "temporal", cfg.TemporalAddress, "namespace", cfg.TemporalNamespace, "version", version.Get().Version)
	select {
	case <-ctx.Done():
	case err := <-fatal:
		// Stay up with failing probes until stopped: the kubelet restarts the container on
		// liveness failure, and someone looking at the Pod sees why in /healthz.
		<-ctx.Done()
		return fmt.Errorf("the Temporal worker had stopped: %w", err)
	}
	health.SetReady(false)
	logger.Info("stopping: letting running activities finish", "timeout", cfg.StopTimeout)
	w.Stop()
	stopInformer()
	return nil
}

// waitForInformer starts the Job informer on informerCtx and waits for its cache to sync,
// saying every 10 s that it still waits (RBAC refusing list or watch of Jobs keeps it
// unsynced), until a signal (ctx) or the startup timeout.
func waitForInformer(ctx, informerCtx context.Context, jobs *activities.JobWatcher, timeout time.Duration, logger *slog.Logger) error {
	synced := make(chan error, 1)
	go func() { synced <- jobs.Start(informerCtx) }()
	started := time.Now()
	deadline := time.After(timeout)
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-synced:
			if err != nil {
				return fmt.Errorf("starting the Job informer: %w", err)
			}
			return nil
		case <-tick.C:
			logger.Warn("the Job informer has not synced yet; can the worker list and watch Jobs (RBAC)?", "waited", time.Since(started).Round(time.Second).String())
		case <-deadline:
			return fmt.Errorf("the Job informer did not sync within %s (--startup-timeout): can the worker list and watch Jobs (RBAC)?", timeout)
		case <-ctx.Done():
			return errors.New("stopped before the Job informer synced")
		}
	}
}

// kubeHost is the API server the worker talks to, for messages.
func kubeHost(cfg config.Config) string {
	rc, err := connect.KubeConfig(cfg)
	if err != nil {
		return "?"
	}
	return rc.Host
}

func identity() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("noderollout-worker@%s:%d", host, os.Getpid())
}

func level(name string) slog.Level {
	switch strings.ToLower(name) {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// maxHeartbeatThrottle bounds how long the SDK holds back an activity's heartbeat. By default
// it sends one per 80 % of the heartbeat timeout (24 s of our 30 s), and an abort reaches a
// running activity only in a heartbeat's reply: a drain went on evicting, and a long Job's
// WaitJob went on waiting, for up to 24 s after the abort. Held back at most 5 s, every
// heartbeat WaitJob records (each 10 s) is sent, and a drain's (each round, 1-10 s) within 5 s
// of it: an abort lands within about 10 s. The price is a heartbeat persisted every 10 s instead
// of 24 s while a long Job runs; a short Job is watched without an activity and sends none.
const maxHeartbeatThrottle = 5 * time.Second

// wftWarnEnv is the SDK's threshold for its "workflow task duration exceeded" warning.
const wftWarnEnv = "TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS"

// quietLongWorkflowTasks raises that threshold from the SDK's 5 s to 30 s, unless the operator
// set it. A node watches its Job inside its first workflow task for up to 20 s
// (workflows.nodeWatchSeconds); the task heartbeats every 12 s meanwhile, but the SDK times the
// whole of it, create and finalize included, so tasks of up to about 22 s are the design and the
// default warned for most nodes. Past 30 s something is slow (a write retrying, say) and it warns.
func quietLongWorkflowTasks() {
	if os.Getenv(wftWarnEnv) == "" {
		_ = os.Setenv(wftWarnEnv, "30")
	}
}
