// floorworker serves the floor workflows (package floor) on one task queue, for the bench's
// "temporal-floor" system: its local activity makes the baseline's Kubernetes calls, with one
// informer on the run's Jobs. It is ready (GET /readyz) once that informer synced and it polls;
// GET /debug/pprof/profile is its CPU profile.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/noderollout/noderollout/bench/floor"
	"github.com/noderollout/noderollout/bench/nodejob"
)

type options struct {
	nodejob.Flags
	address, taskQueue, listen string
}

func main() {
	var o options
	pflag.StringVar(&o.address, "temporal-address", "127.0.0.1:7233", "Temporal frontend")
	pflag.StringVar(&o.taskQueue, "task-queue", "", "task queue to serve")
	pflag.StringVar(&o.listen, "metrics-listen", "127.0.0.1:0", "address of /readyz")
	o.Add(pflag.CommandLine, "floor")
	pflag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "floorworker:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.taskQueue == "" || o.Template == "" {
		return errors.New("--task-queue and --template are required")
	}
	text, err := os.ReadFile(o.Template)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	kube, err := o.Client("noderollout-floor")
	if err != nil {
		return err
	}
	ends := nodejob.NewEnds()
	inf, err := nodejob.NewJobInformer(kube, o.Namespace, o.Run, func(job *batchv1.Job) { ends.Observe(job) })
	if err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("job informer did not sync")
	}
	acts := &floor.Activities{Ends: ends, Calls: &nodejob.Calls{Kube: kube, Namespace: o.Namespace, Run: o.Run,
		Template: string(text), Prefix: "fl-", Log: os.Stderr}}

	tc, err := client.Dial(client.Options{HostPort: o.address})
	if err != nil {
		return err
	}
	defer tc.Close()
	w := worker.New(tc, o.taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(floor.Rollout, workflow.RegisterOptions{Name: floor.RolloutWorkflow})
	w.RegisterWorkflowWithOptions(floor.Node, workflow.RegisterOptions{Name: floor.NodeWorkflow})
	w.RegisterActivityWithOptions(acts.RunJob, activity.RegisterOptions{Name: floor.RunJobActivity})
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	// The bench's --profile-seconds reads the floor's CPU profile as it reads the worker's.
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: o.listen, Handler: mux}
	go func() { _ = srv.ListenAndServe() }()
	<-ctx.Done()
	return srv.Close()
}
