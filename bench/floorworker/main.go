// floorworker serves the floor workflows (package floor) on one task queue, for the bench's
// "temporal-floor" system. It is ready (GET /readyz) once it polls.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/bench/floor"
)

func main() {
	address := pflag.String("temporal-address", "127.0.0.1:7233", "Temporal frontend")
	taskQueue := pflag.String("task-queue", "", "task queue to serve")
	listen := pflag.String("metrics-listen", "127.0.0.1:0", "address of /readyz")
	pflag.Parse()
	if err := run(*address, *taskQueue, *listen); err != nil {
		fmt.Fprintln(os.Stderr, "floorworker:", err)
		os.Exit(1)
	}
}

func run(address, taskQueue, listen string) error {
	if taskQueue == "" {
		return fmt.Errorf("--task-queue is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tc, err := client.Dial(client.Options{HostPort: address})
	if err != nil {
		return err
	}
	defer tc.Close()
	w := worker.New(tc, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(floor.Rollout, workflow.RegisterOptions{Name: floor.RolloutWorkflow})
	w.RegisterWorkflowWithOptions(floor.Node, workflow.RegisterOptions{Name: floor.NodeWorkflow})
	w.RegisterActivityWithOptions(floor.Wait, activity.RegisterOptions{Name: floor.WaitActivity})
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	srv := &http.Server{Addr: listen, Handler: mux}
	go func() { _ = srv.ListenAndServe() }()
	<-ctx.Done()
	return srv.Close()
}
