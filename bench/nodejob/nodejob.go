// Package nodejob is the Kubernetes work of one node's Job as the benchmark's baseline does
// it, the same calls noderollout makes per node: the Node read beside the Job's create, and
// beside the finished Job's delete the Node's outcome annotation, an Event and, for a failed
// Job, its Pod and log tail. bench/baseline (a plain dispatcher) and bench/floorworker (the
// Temporal floor: a child workflow per node whose local activity makes these calls) share it,
// so that both make exactly the same requests.
package nodejob

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"
)

// LabelRun marks the Jobs of one run; a run's informer watches only those.
const LabelRun = "bench.noderollout.dev/baseline"

// Annotation and Event names of the per-node records, in the shape noderollout writes.
const (
	markerKey      = "bench.noderollout.dev/baseline-outcome"
	eventNamespace = metav1.NamespaceDefault
	fieldManager   = "noderollout-baseline"
)

// UseProtobuf sets the client to speak protobuf to the API server, as the worker does
// (internal/connect); JSON stays acceptable for CRDs.
func UseProtobuf(cfg *rest.Config) {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}

// Calls makes one run's per-node requests.
type Calls struct {
	Kube      kubernetes.Interface
	Namespace string
	Run       string // LabelRun's value on this run's Jobs
	Template  string // a batch/v1 Job; {{node}} is replaced by the node's name
	Prefix    string // of the Jobs' names: Prefix + node
	// Minimal leaves out the Node read, the annotation, the Event and the failed Job's
	// diagnosis: the Job's create and delete only.
	Minimal bool
	Log     io.Writer // failures that do not stop the node
}

// JobName is the name of the node's Job.
func (c *Calls) JobName(node string) string { return c.Prefix + node }

// Create renders the template for the node, pins it there and creates the Job, retrying
// passing errors, with the Node read beside it. A Job that already exists counts as created.
func (c *Calls) Create(ctx context.Context, node string) error {
	var calls sync.WaitGroup
	if !c.Minimal {
		// noderollout reads the Node before its Job; here the read runs beside the create.
		calls.Go(func() { c.readNode(ctx, node) })
	}
	defer calls.Wait()
	job, err := Render(c.Template, c.JobName(node), node, c.Run)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		_, err = c.Kube.BatchV1().Jobs(c.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: fieldManager})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if attempt == 5 || ctx.Err() != nil || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return err
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

// Finish deletes the finished Job (Background propagation) with the node's records beside
// the delete: the outcome annotation, the Event and, for a failed Job, its Pod and log tail.
func (c *Calls) Finish(ctx context.Context, name, node string, succeeded bool) {
	var calls sync.WaitGroup
	if !c.Minimal {
		calls.Go(func() { c.markNode(ctx, node, succeeded) })
		calls.Go(func() { c.recordEvent(ctx, node, name, succeeded) })
		if !succeeded {
			calls.Go(func() { c.diagnose(ctx, name) })
		}
	}
	bg := metav1.DeletePropagationBackground
	for attempt := 0; attempt < 5; attempt++ {
		err := c.Kube.BatchV1().Jobs(c.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
		if err == nil || apierrors.IsNotFound(err) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
	calls.Wait()
}

func (c *Calls) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, format+"\n", args...)
	}
}

// readNode is the Node check before a Job: a failure only shows in the log, as the Job goes on.
func (c *Calls) readNode(ctx context.Context, node string) {
	if _, err := c.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil {
		c.logf("node %s: %v", node, err)
	}
}

func outcome(succeeded bool) string {
	if succeeded {
		return "Succeeded"
	}
	return "Failed"
}

// markNode annotates the Node with the outcome, as noderollout's marker does.
func (c *Calls) markNode(ctx context.Context, node string, succeeded bool) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		markerKey: c.Run + ":" + outcome(succeeded),
	}}})
	_, err := c.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	if err != nil {
		c.logf("annotating node %s: %v", node, err)
	}
}

// recordEvent puts the outcome on the Node's Events.
func (c *Calls) recordEvent(ctx context.Context, node, job string, succeeded bool) {
	eventType := corev1.EventTypeNormal
	if !succeeded {
		eventType = corev1.EventTypeWarning
	}
	now := metav1.Now()
	event := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: strings.ToLower(node) + ".", Namespace: eventNamespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node},
		Reason:         "Baseline" + outcome(succeeded),
		Message:        fmt.Sprintf("baseline %s: %s (Job %s/%s)", c.Run, outcome(succeeded), c.Namespace, job),
		Type:           eventType,
		Source:         corev1.EventSource{Component: fieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := c.Kube.CoreV1().Events(eventNamespace).Create(ctx, event, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
		c.logf("event for node %s: %v", node, err)
	}
}

// diagnose reads a failed Job's Pod and its log tail, as noderollout does for its report.
func (c *Calls) diagnose(ctx context.Context, job string) {
	pods, err := c.Kube.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{
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
	_, _ = c.Kube.CoreV1().Pods(c.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: pod.Spec.Containers[0].Name, TailLines: &lines, LimitBytes: &limit,
	}).DoRaw(ctx)
}

// Render is the template with {{node}} replaced, named, labelled with the run and pinned to
// the node.
func Render(template, name, node, run string) (*batchv1.Job, error) {
	var job batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(strings.ReplaceAll(template, "{{node}}", node)), &job); err != nil {
		return nil, fmt.Errorf("template: %w", err)
	}
	job.Name = name
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[LabelRun] = run
	job.Spec.Template.Spec.NodeName = node
	return &job, nil
}

// Finished says whether the Job ended and whether it succeeded.
func Finished(job *batchv1.Job) (succeeded, finished bool) {
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

// DropManagedFields is the transform of the bench's informers: objects are cached without
// their managed fields, which no measurement reads and which would weigh on the bench's
// own memory at ten thousand nodes.
func DropManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// NewJobInformer is one informer on the run's Jobs in the namespace, without their managed
// fields; onJob sees every add and update.
func NewJobInformer(kube kubernetes.Interface, namespace, run string, onJob func(*batchv1.Job)) (cache.SharedIndexInformer, error) {
	inf := batchinformers.NewFilteredJobInformer(kube, namespace, 0, cache.Indexers{},
		func(lo *metav1.ListOptions) { lo.LabelSelector = LabelRun + "=" + run })
	_ = inf.SetTransform(DropManagedFields)
	handle := func(obj any) {
		if job, ok := obj.(*batchv1.Job); ok {
			onJob(job)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	})
	return inf, err
}

// Ends hands each finished Job's outcome to whoever waits for it, whether the wait or the
// Job's end comes first: a Job seen finished before its waiter arrives is kept until then.
type Ends struct {
	mu        sync.Mutex
	waiting   map[string]chan bool
	ended     map[string]bool
	delivered map[string]bool // handed to a waiter: later updates of the Job change nothing
}

// NewEnds is an empty set of waits.
func NewEnds() *Ends {
	return &Ends{waiting: map[string]chan bool{}, ended: map[string]bool{}, delivered: map[string]bool{}}
}

// Observe takes a Job from the informer; a finished one ends its wait.
func (e *Ends) Observe(job *batchv1.Job) {
	succeeded, finished := Finished(job)
	if !finished {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.delivered[job.Name] {
		return
	}
	if ch, ok := e.waiting[job.Name]; ok {
		delete(e.waiting, job.Name)
		e.delivered[job.Name] = true
		ch <- succeeded
		return
	}
	e.ended[job.Name] = succeeded
}

// Wait waits until the named Job has finished and says whether it succeeded.
func (e *Ends) Wait(ctx context.Context, name string) (bool, error) {
	e.mu.Lock()
	if succeeded, ok := e.ended[name]; ok {
		delete(e.ended, name)
		e.delivered[name] = true
		e.mu.Unlock()
		return succeeded, nil
	}
	ch := make(chan bool, 1)
	e.waiting[name] = ch
	e.mu.Unlock()
	select {
	case succeeded := <-ch:
		return succeeded, nil
	case <-ctx.Done():
		e.mu.Lock()
		if e.waiting[name] == ch {
			delete(e.waiting, name)
		}
		e.mu.Unlock()
		return false, ctx.Err()
	}
}
