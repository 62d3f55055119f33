// Command baseline is the benchmark's yardstick: a plain client-go dispatcher that runs one Job
// per selected node, at most P at a time, with no Temporal and no durability. It lists the
// nodes, keeps P Jobs in flight, watches them with one informer, deletes each finished Job and
// starts the next. A crash loses its progress; that is what noderollout's durability buys.
//
// It makes the same Kubernetes calls per node as noderollout, so that the comparison prices
// durability rather than features: the Node is read while its Job is created, and while the
// finished Job is deleted the Node gets its outcome annotation and an Event, and a failed Job's
// Pod is read with its log tail. --minimal leaves those out (the Job's create and delete only).
//
//	baseline --kubeconfig K --namespace NS --selector k=v --template job.yaml --parallelism 100
//
// With --wait-start it prints "ready" on stdout once its informer has synced and starts when a
// line arrives on stdin, so that the caller's clock starts where noderollout's does (with the
// worker's informers already running). It prints one JSON object with the outcome counts and
// the makespan on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"

	"github.com/noderollout/noderollout/bench/nodejob"
)

type options struct {
	nodejob.Flags
	selector    string
	parallelism int
	minimal     bool
	waitStart   bool
}

// Result is what the baseline prints.
type Result struct {
	Nodes       int     `json:"nodes"`
	Succeeded   int64   `json:"succeeded"`
	Failed      int64   `json:"failed"`
	CreateFails int64   `json:"createFailures"`
	Makespan    float64 `json:"makespanSeconds"`
}

func main() {
	var o options
	fs := pflag.NewFlagSet("baseline", pflag.ExitOnError)
	o.Add(fs, "baseline")
	fs.StringVar(&o.selector, "selector", "", "label selector of the nodes")
	fs.IntVar(&o.parallelism, "parallelism", 100, "Jobs in flight at most")
	fs.BoolVar(&o.minimal, "minimal", false, "only create and delete the Jobs: no Node read, Node annotation, Event or failed-Pod diagnosis")
	fs.BoolVar(&o.waitStart, "wait-start", false, `print "ready" when the informer has synced, then wait for a line on stdin before starting`)
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "baseline:", err)
		os.Exit(1)
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
}

func run(ctx context.Context, o options) (Result, error) {
	if o.selector == "" || o.Template == "" || o.parallelism < 1 {
		return Result{}, errors.New("--selector, --template and a positive --parallelism are required")
	}
	text, err := os.ReadFile(o.Template)
	if err != nil {
		return Result{}, err
	}
	kube, err := o.Client("noderollout-baseline")
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	d := newDispatcher(kube, o, string(text))
	if err := d.startInformer(ctx); err != nil {
		return Result{}, err
	}
	if o.waitStart {
		fmt.Println("ready")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return Result{}, fmt.Errorf("waiting for the start line on stdin: %w", err)
		}
		start = time.Now()
	}
	nodes, err := listNodes(ctx, kube, o.selector)
	if err != nil {
		return Result{}, err
	}
	fmt.Fprintf(os.Stderr, "baseline: %d nodes, parallelism %d\n", len(nodes), o.parallelism)
	d.wg.Add(len(nodes))
	go d.progress(ctx, len(nodes))
	for _, node := range nodes {
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		go d.create(ctx, node)
	}
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	return Result{
		Nodes: len(nodes), Succeeded: d.succeeded.Load(), Failed: d.failed.Load(), CreateFails: d.createFails.Load(),
		Makespan: time.Since(start).Seconds(),
	}, nil
}

func listNodes(ctx context.Context, kube kubernetes.Interface, selector string) ([]string, error) {
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return kube.CoreV1().Nodes().List(ctx, opts)
	})
	p.PageSize = 500
	var names []string
	err := p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
		names = append(names, obj.(*corev1.Node).Name)
		return nil
	})
	return names, err
}

type dispatcher struct {
	kube  kubernetes.Interface
	o     options
	calls *nodejob.Calls
	slots chan struct{}
	wg    sync.WaitGroup

	handled sync.Map // names of the Jobs seen finished

	succeeded, failed, createFails atomic.Int64
}

func newDispatcher(kube kubernetes.Interface, o options, template string) *dispatcher {
	return &dispatcher{kube: kube, o: o, slots: make(chan struct{}, o.parallelism),
		calls: &nodejob.Calls{Kube: kube, Namespace: o.Namespace, Run: o.Run, Template: template, Prefix: "bl-",
			Minimal: o.minimal, Log: prefixed{os.Stderr}}}
}

// prefixed writes each line after "baseline: ".
type prefixed struct{ w *os.File }

func (p prefixed) Write(b []byte) (int, error) { return fmt.Fprintf(p.w, "baseline: %s", b) }

func (d *dispatcher) startInformer(ctx context.Context) error {
	inf, err := nodejob.NewJobInformer(d.kube, d.o.Namespace, d.o.Run, func(job *batchv1.Job) { d.observe(ctx, job) })
	if err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return errors.New("job informer did not sync")
	}
	return nil
}

// observe hands a finished Job, once, to its own goroutine to be deleted.
func (d *dispatcher) observe(ctx context.Context, job *batchv1.Job) {
	succeeded, finished := nodejob.Finished(job)
	if !finished {
		return
	}
	if _, seen := d.handled.LoadOrStore(job.Name, true); seen {
		return
	}
	go d.finish(ctx, job.Name, job.Spec.Template.Spec.NodeName, succeeded)
}

// create creates the node's Job (with the Node read beside it); a Job it could not create
// counts as failed and frees its slot.
func (d *dispatcher) create(ctx context.Context, node string) {
	if err := d.calls.Create(ctx, node); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: node %s: %v\n", node, err)
		d.createFails.Add(1)
		d.failed.Add(1)
		d.release()
	}
}

// finish deletes the finished Job with the node's records beside the delete, counts the
// outcome and frees the slot.
func (d *dispatcher) finish(ctx context.Context, name, node string, succeeded bool) {
	d.calls.Finish(ctx, name, node, succeeded)
	if succeeded {
		d.succeeded.Add(1)
	} else {
		d.failed.Add(1)
	}
	d.release()
}

func (d *dispatcher) release() {
	<-d.slots
	d.wg.Done()
}

func (d *dispatcher) progress(ctx context.Context, total int) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fmt.Fprintf(os.Stderr, "baseline: %d/%d done (%d failed), %d in flight\n",
				d.succeeded.Load()+d.failed.Load(), total, d.failed.Load(), len(d.slots))
		}
	}
}
