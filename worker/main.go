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
	"sync/atomic"
	"syscall"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/worker"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/connect"
	"github.com/noderollout/noderollout/internal/metrics"
	"github.com/noderollout/noderollout/workflows"
)

func main() {
	fs := config.NewFlagSet("worker", true)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: worker [flags]\n\nRuns the noderollout worker. Every flag can also be set as %s_<FLAG> (upper case, '-' as '_') or as a key in --config.\n\n%s", config.EnvPrefix, fs.FlagUsages())
	}
	cfg, err := config.Load(fs, os.Args[1:], os.Environ())
	if errors.Is(err, pflag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config.Config) error {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level(cfg.LogLevel)}))
	collector := metrics.NewCollector()
	var ready atomic.Bool
	if cfg.MetricsListen != "" {
		srv := metrics.Serve(cfg.MetricsListen, collector, ready.Load, cfg.Pprof)
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
	// The shared Job informer must be synced before any WaitJob runs.
	if err := acts.Jobs.Start(ctx); err != nil {
		return fmt.Errorf("starting the Job informer: %w", err)
	}

	tc, err := connect.Temporal(ctx, cfg, logger, collector.Handler())
	if err != nil {
		return err
	}
	defer tc.Close()

	w := worker.New(tc, cfg.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.MaxConcurrentActivities,
		MaxConcurrentLocalActivityExecutionSize: cfg.MaxConcurrentActivities,
		WorkerStopTimeout:                       cfg.StopTimeout,
		Identity:                                identity(),
	})
	w.RegisterWorkflow(workflows.Rollout)
	w.RegisterWorkflow(workflows.NodeRollout)
	w.RegisterActivity(acts)
	if err := w.Start(); err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	ready.Store(true)
	logger.Info("worker polling", "taskQueue", cfg.TaskQueue, "temporal", cfg.TemporalAddress, "namespace", cfg.TemporalNamespace)
	<-ctx.Done()
	ready.Store(false)
	logger.Info("stopping: letting running activities finish", "timeout", cfg.StopTimeout)
	w.Stop()
	return nil
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
