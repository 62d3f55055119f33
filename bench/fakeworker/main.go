// fakeworker runs noderollout's own workflows against a Kubernetes fake at the activity
// boundary, for the bench's 100,000-node run (--fake-kube): a fleet of that size is more than
// this machine's kwok stack holds. The workflows, the real Temporal server, the worker's
// options and the real ListNodes activity (over a fake clientset that pages the fleet as the
// API server does) are what run; only the Job's own activity is replaced by one that waits the
// Job's run time and reports success. It is ready (GET /readyz) once it polls, and counts the
// Node LISTs and the most Jobs it ever ran at once on GET /fake.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/bench/fakestats"
	"github.com/noderollout/noderollout/internal/metrics"
	"github.com/noderollout/noderollout/internal/nodepager"
	"github.com/noderollout/noderollout/workflows"
)

type options struct {
	address, taskQueue, listen string
	nodes                      int
	jobSeconds                 float64
	nodeLabels                 string
}

func main() {
	var o options
	pflag.StringVar(&o.address, "temporal-address", "127.0.0.1:7233", "Temporal frontend")
	pflag.StringVar(&o.taskQueue, "task-queue", "", "task queue to serve")
	pflag.StringVar(&o.listen, "metrics-listen", "127.0.0.1:0", "address of /readyz, /metrics, /fake and pprof")
	pflag.IntVar(&o.nodes, "nodes", 100_000, "Nodes in the fake fleet (cloud-shaped names)")
	pflag.StringVar(&o.nodeLabels, "node-labels", "pool=fake", "labels of every Node (key=value,...): the rollout's nodeSelector must select them")
	pflag.Float64Var(&o.jobSeconds, "job-seconds", 5, "how long each Job runs; keep it under the node's 20 s watch")
	pflag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "fakeworker:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.taskQueue == "" || o.nodes < 1 {
		return errors.New("--task-queue and a positive --nodes are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	collector := metrics.NewCollector()
	health := &metrics.Health{}
	nodeLabels, err := labels.ConvertSelectorToLabelsMap(o.nodeLabels)
	if err != nil {
		return fmt.Errorf("--node-labels: %w", err)
	}
	pager := nodepager.New(cloudNames(o.nodes), nodeLabels)
	cluster := &fakeCluster{list: &activities.Activities{Kube: pager.Clientset()}, jobTime: time.Duration(o.jobSeconds * float64(time.Second))}
	srv := metrics.Serve(o.listen, collector, health, metrics.BuildInfo{Version: "fakeworker"}, true)
	srv.Handler.(*http.ServeMux).HandleFunc("/fake", func(w http.ResponseWriter, _ *http.Request) {
		lists, firstPages := pager.Lists()
		_ = json.NewEncoder(w).Encode(fakestats.Stats{NodeLists: lists, FirstPageLists: firstPages, Jobs: cluster.jobs(), Adopted: cluster.adoptedJobs(), MostAtOnce: cluster.most()})
	})
	go func() { _ = srv.ListenAndServe() }()
	defer srv.Close()

	tc, err := client.Dial(client.Options{HostPort: o.address, MetricsHandler: collector.Handler()})
	if err != nil {
		return err
	}
	defer tc.Close()
	// As the worker does: a node's first workflow task watches its Job for up to 20 s, which
	// is the design, not the SDK's 5 s warning.
	if os.Getenv("TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS") == "" {
		_ = os.Setenv("TEMPORAL_WORKFLOW_TASK_DURATION_WARN_SECONDS", "30")
	}
	// The worker's own options (worker/main.go), so its memory and CPU are the worker's.
	w := worker.New(tc, o.taskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      1000,
		MaxConcurrentLocalActivityExecutionSize: 1000,
		MaxHeartbeatThrottleInterval:            5 * time.Second,
	})
	workflows.OnCluster{}.Register(w)
	for name, fn := range cluster.activities() {
		w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()
	health.SetReady(true)
	<-ctx.Done()
	return nil
}

// cloudNames are n Node names shaped as a cloud provider's, sorted as the API server lists them.
func cloudNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("ip-10-%d-%d-%d.eu-west-1.compute.internal", i>>16, (i>>8)&0xff, i&0xff)
	}
	sort.Strings(names)
	return names
}

// fakeCluster is the activities a plain rollout calls, as a cluster that runs every Job for
// jobTime and has it succeed.
type fakeCluster struct {
	list    *activities.Activities
	jobTime time.Duration

	mu                   sync.Mutex
	running, total, peak int
	adopted              int
	// ends is when each node run's Job ends, by the run's ID: a RunJob that runs again (its
	// workflow task failed or timed out) adopts the Job its run made, as the real one does,
	// and waits only for what is left of it.
	ends      map[string]time.Time
	lastPrune time.Time
}

// jobsKeptFor is how long the fake remembers a Job past its end, for a RunJob run again.
const jobsKeptFor = 2 * time.Minute

// jobEnd is when the Job of the node run ends: jobTime from the run's first RunJob.
func (c *fakeCluster) jobEnd(runID string, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running++
	c.total++
	c.peak = max(c.peak, c.running)
	if c.ends == nil {
		c.ends = map[string]time.Time{}
	}
	if end, ok := c.ends[runID]; ok {
		c.adopted++
		return end
	}
	if now.Sub(c.lastPrune) > jobsKeptFor {
		for id, end := range c.ends {
			if now.Sub(end) > jobsKeptFor {
				delete(c.ends, id)
			}
		}
		c.lastPrune = now
	}
	end := now.Add(c.jobTime)
	c.ends[runID] = end
	return end
}

// activities are the fake's activities by the names the workflows call them by.
func (c *fakeCluster) activities() map[string]any {
	return map[string]any{"PrepareTemplate": c.PrepareTemplate, "ListNodes": c.ListNodes, "RunJob": c.RunJob}
}

func (c *fakeCluster) PrepareTemplate(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
	sum := sha256.Sum256([]byte(in.Template))
	prepared := activities.PreparedTemplate{Hash: hex.EncodeToString(sum[:8]), TolerationsRead: true}
	if !in.Store {
		prepared.Template = in.Template
	}
	return prepared, nil
}

func (c *fakeCluster) ListNodes(ctx context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
	return c.list.ListNodes(ctx, in)
}

// RunJob "creates" the node's Job, lets it run for jobTime (an abort ends it sooner) and
// reports it succeeded and finalized, as the real RunJob does for a Job that ends within its
// watch. Run again for the same node run, it waits for that Job's end.
func (c *fakeCluster) RunJob(ctx context.Context, in activities.RunJobInput) (activities.RunJobResult, error) {
	end := c.jobEnd(in.Job.RunID, time.Now())
	defer func() {
		c.mu.Lock()
		c.running--
		c.mu.Unlock()
	}()
	job := activities.PlannedJob(in.Job)
	job.CreatedAt = time.Now()
	if in.Trim {
		job = activities.JobRef{} // as the real RunJob leaves out a Job it finalized: the history's size is measured
	}
	select {
	case <-ctx.Done():
		return activities.RunJobResult{}, ctx.Err()
	case <-time.After(time.Until(end)):
	}
	return activities.RunJobResult{Job: job, Done: true,
		End: activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed", FinishedAt: time.Now()}}, nil
}

func (c *fakeCluster) jobs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func (c *fakeCluster) adoptedJobs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.adopted
}

func (c *fakeCluster) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}
