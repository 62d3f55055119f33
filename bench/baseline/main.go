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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/pager"
	"sigs.k8s.io/yaml"
)

// labelRun marks the Jobs of one baseline run; the informer watches only those.
const labelRun = "bench.noderollout.dev/baseline"

type options struct {
	kubeconfig  string
	namespace   string
	selector    string
	template    string
	parallelism int
	qps         float64
	burst       int
	run         string
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
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace of the Jobs")
	fs.StringVar(&o.selector, "selector", "", "label selector of the nodes")
	fs.StringVar(&o.template, "template", "", "file holding the batch/v1 Job template; {{node}} is replaced by the node name")
	fs.IntVar(&o.parallelism, "parallelism", 100, "Jobs in flight at most")
	fs.Float64Var(&o.qps, "kube-qps", 1000, "client queries per second")
	fs.IntVar(&o.burst, "kube-burst", 2000, "client burst")
	fs.StringVar(&o.run, "run", "baseline", "label value marking this run's Jobs")
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
	if o.selector == "" || o.template == "" || o.parallelism < 1 {
		return Result{}, errors.New("--selector, --template and a positive --parallelism are required")
	}
	text, err := os.ReadFile(o.template)
	if err != nil {
		return Result{}, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return Result{}, err
	}
	cfg.QPS, cfg.Burst, cfg.UserAgent = float32(o.qps), o.burst, "noderollout-baseline"
	// Protobuf, as the worker speaks (internal/connect); JSON stays acceptable for CRDs.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Result{}, err
	}
	start := time.Now()
	d := &dispatcher{kube: kube, o: o, template: string(text), slots: make(chan struct{}, o.parallelism), handled: map[string]bool{}}
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
	kube     kubernetes.Interface
	o        options
	template string
	slots    chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	handled map[string]bool // Jobs seen finished

	succeeded, failed, createFails atomic.Int64
}

func (d *dispatcher) startInformer(ctx context.Context) error {
	inf := batchinformers.NewFilteredJobInformer(d.kube, d.o.namespace, 0, cache.Indexers{},
		func(lo *metav1.ListOptions) { lo.LabelSelector = labelRun + "=" + d.o.run })
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { d.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { d.observe(ctx, obj) },
	})
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
func (d *dispatcher) observe(ctx context.Context, obj any) {
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	succeeded, finished := jobFinished(job)
	if !finished {
		return
	}
	d.mu.Lock()
	seen := d.handled[job.Name]
	d.handled[job.Name] = true
	d.mu.Unlock()
	if seen {
		return
	}
	go d.finish(ctx, job.Namespace, job.Name, job.Spec.Template.Spec.NodeName, succeeded)
}

func jobFinished(job *batchv1.Job) (succeeded, finished bool) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, true
		case batchv1.JobFailed:
			return false, true
		}
	}
	return false, false
}

// create renders the template for the node, pins it there and creates the Job, retrying
// passing errors.
func (d *dispatcher) create(ctx context.Context, node string) {
	var calls sync.WaitGroup
	if !d.o.minimal {
		// noderollout reads the Node before its Job; here the read runs beside the create.
		calls.Go(func() { d.readNode(ctx, node) })
	}
	defer calls.Wait()
	job, err := render(d.template, node, d.o.run)
	if err == nil {
		for attempt := 0; ; attempt++ {
			_, err = d.kube.BatchV1().Jobs(d.o.namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: "noderollout-baseline"})
			if err == nil || apierrors.IsAlreadyExists(err) || attempt == 5 || ctx.Err() != nil ||
				apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
				break
			}
			time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
		}
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		fmt.Fprintf(os.Stderr, "baseline: node %s: %v\n", node, err)
		d.createFails.Add(1)
		d.failed.Add(1)
		d.release()
	}
}

func (d *dispatcher) finish(ctx context.Context, namespace, name, node string, succeeded bool) {
	var calls sync.WaitGroup
	if !d.o.minimal {
		// What noderollout records per node, issued beside the delete.
		calls.Go(func() { d.markNode(ctx, node, succeeded) })
		calls.Go(func() { d.recordEvent(ctx, node, name, succeeded) })
		if !succeeded {
			calls.Go(func() { d.diagnose(ctx, namespace, name) })
		}
	}
	bg := metav1.DeletePropagationBackground
	for attempt := 0; attempt < 5; attempt++ {
		err := d.kube.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err == nil || apierrors.IsNotFound(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	calls.Wait()
	if succeeded {
		d.succeeded.Add(1)
	} else {
		d.failed.Add(1)
	}
	d.release()
}

// Annotation and Event names of the baseline's per-node records, in the shape noderollout writes.
const (
	markerKey      = "bench.noderollout.dev/baseline-outcome"
	eventNamespace = metav1.NamespaceDefault
	fieldManager   = "noderollout-baseline"
)

// readNode is the Node check before a Job: a failure only shows in the log, as the Job goes on.
func (d *dispatcher) readNode(ctx context.Context, node string) {
	if _, err := d.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: node %s: %v\n", node, err)
	}
}

func outcome(succeeded bool) string {
	if succeeded {
		return "Succeeded"
	}
	return "Failed"
}

// markNode annotates the Node with the outcome, as noderollout's marker does.
func (d *dispatcher) markNode(ctx context.Context, node string, succeeded bool) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		markerKey: d.o.run + ":" + outcome(succeeded),
	}}})
	_, err := d.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		fmt.Fprintf(os.Stderr, "baseline: annotating node %s: %v\n", node, err)
	}
}

// recordEvent puts the outcome on the Node's Events.
func (d *dispatcher) recordEvent(ctx context.Context, node, job string, succeeded bool) {
	eventType := corev1.EventTypeNormal
	if !succeeded {
		eventType = corev1.EventTypeWarning
	}
	now := metav1.Now()
	event := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: strings.ToLower(node) + ".", Namespace: eventNamespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
		Reason:         "Baseline" + outcome(succeeded),
		Message:        fmt.Sprintf("baseline %s: %s (Job %s/%s)", d.o.run, outcome(succeeded), d.o.namespace, job),
		Type:           eventType,
		Source:         corev1.EventSource{Component: fieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := d.kube.CoreV1().Events(eventNamespace).Create(ctx, event, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		fmt.Fprintf(os.Stderr, "baseline: event for node %s: %v\n", node, err)
	}
}

// diagnose reads a failed Job's Pod and its log tail, as noderollout does for its report.
func (d *dispatcher) diagnose(ctx context.Context, namespace, job string) {
	pods, err := d.kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{batchv1.JobNameLabel: job}.String(),
	})
	if err != nil || len(pods.Items) == 0 {
		return
	}
	pod := pods.Items[0]
	if len(pod.Spec.Containers) == 0 {
		return
	}
	lines, limit := int64(100), int64(4096) // noderollout's tail
	_, _ = d.kube.CoreV1().Pods(namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: pod.Spec.Containers[0].Name, TailLines: &lines, LimitBytes: &limit,
	}).DoRaw(ctx)
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

// render is the template with {{node}} replaced, named after the node and pinned to it.
func render(template, node, run string) (*batchv1.Job, error) {
	var job batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(template, "{{node}}", node)), &job); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	job.Name = "bl-" + node
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[labelRun] = run
	job.Spec.Template.Spec.NodeName = node
	return &job, nil
}
