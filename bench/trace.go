package main

import (
	"context"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/noderollout/noderollout/bench/nodejob"
)

// nodeTimes is when the bench first saw each step of one node's Job, by its own clock.
type nodeTimes struct {
	jobCreated, podCreated, podRunning, podFinished, jobFinished, jobDeleted time.Time
	// released is when the system gave the node's slot back, where that is not the Job's
	// deletion: SUC keeps finished Jobs for a TTL and frees the slot when it labels the Node.
	released time.Time
}

// slotFreed is when the node's slot was given back: its release, or its Job's deletion.
func (n *nodeTimes) slotFreed() time.Time {
	if !n.released.IsZero() {
		return n.released
	}
	return n.jobDeleted
}

// tracer watches the Jobs and Pods of one namespace and records each node's timeline, to show
// where a slot's time goes between two Jobs. It talks to the API server directly, not through
// the counting proxy; its list and watch are started before the measured window.
type tracer struct {
	mu    sync.Mutex
	nodes map[string]*nodeTimes
	stop  context.CancelFunc
}

func startTracer(ctx context.Context, kube kubernetes.Interface, namespace string) (*tracer, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &tracer{nodes: map[string]*nodeTimes{}, stop: cancel}
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(namespace),
		informers.WithTransform(nodejob.DropManagedFields))
	jobs := factory.Batch().V1().Jobs().Informer()
	pods := factory.Core().V1().Pods().Informer()
	_, err := jobs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.job(obj, false) },
		UpdateFunc: func(_, obj any) { t.job(obj, false) },
		DeleteFunc: func(obj any) { t.job(obj, true) },
	})
	if err == nil {
		err = onAddOrUpdate(pods, t.pod)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return t, nil
}

// onAddOrUpdate hands fn every object the informer adds or updates; deletes are not seen.
func onAddOrUpdate(inf cache.SharedIndexInformer, fn func(obj any)) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    fn,
		UpdateFunc: func(_, obj any) { fn(obj) },
	})
	return err
}

func (t *tracer) times(node string) *nodeTimes {
	n := t.nodes[node]
	if n == nil {
		n = &nodeTimes{}
		t.nodes[node] = n
	}
	return n
}

func setOnce(at *time.Time, now time.Time) {
	if at.IsZero() {
		*at = now
	}
}

func (t *tracer) job(obj any, deleted bool) {
	now := time.Now()
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	// A Job created paused (parallelism 0: SUC's first Job for a node, often deleted as out of
	// turn before it runs) holds no slot yet; the Job counts from when it may run.
	if p := job.Spec.Parallelism; p != nil && *p == 0 {
		return
	}
	node := job.Spec.Template.Spec.NodeName
	if node == "" {
		node = job.Labels[sucNodeLabel] // SUC places its Pods by affinity
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.times(node)
	setOnce(&n.jobCreated, now)
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			setOnce(&n.jobFinished, now)
		}
	}
	if deleted || job.DeletionTimestamp != nil {
		setOnce(&n.jobDeleted, now)
	}
}

func (t *tracer) pod(obj any) {
	now := time.Now()
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	node := pod.Spec.NodeName
	if node == "" {
		node = pod.Labels[sucNodeLabel] // not yet scheduled
	}
	if node == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := t.times(node)
	setOnce(&n.podCreated, now)
	switch pod.Status.Phase {
	case corev1.PodRunning:
		setOnce(&n.podRunning, now)
	case corev1.PodSucceeded, corev1.PodFailed:
		setOnce(&n.podRunning, now)
		setOnce(&n.podFinished, now)
	}
}

func (t *tracer) close() { t.stop() }

// release records when the system gave a node's slot back, for systems that keep the Job.
func (t *tracer) release(node string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	setOnce(&t.times(node).released, at)
}

// slotPhases is the mean time of each step of a window slot's cycle, in seconds: from one Job's
// creation through its Pod's run to its deletion, then to the creation of the next Job in
// the slot.
type slotPhases struct {
	JobToPod      stat `json:"jobToPod"`      // Job created -> Pod created (Job controller)
	PodToRunning  stat `json:"podToRunning"`  // Pod created -> Running (kwok)
	Running       stat `json:"running"`       // Running -> Succeeded/Failed (kwok; the job time D)
	PodToJobDone  stat `json:"podToJobDone"`  // Pod ended -> Job condition (Job controller)
	JobDoneToGone stat `json:"jobDoneToGone"` // Job condition -> Job deletion (the dispatcher noticing and finalizing; SUC: the Node's label)
	GoneToNextJob stat `json:"goneToNextJob"` // Job deletion (SUC: the label) -> next Job's creation (the slot handed over)
	// Utilization is the share of the window's slot-seconds (P x makespan) that held a Job
	// (created to deleted): what the hand-overs, the start and the tail leave idle.
	Utilization   float64 `json:"utilization"`
	FirstJob      float64 `json:"firstJobS"`      // run start -> first Job created
	LastGoneToEnd float64 `json:"lastGoneToEndS"` // last Job deleted -> run reported done
	Nodes         int     `json:"nodes"`
}

// phases summarizes the timelines of a run that started at start and ended at end with
// parallelism p.
func (t *tracer) phases(start, end time.Time, p int) slotPhases {
	t.mu.Lock()
	defer t.mu.Unlock()
	var ph slotPhases
	var a, b, c, d, e []float64
	var created, gone []time.Time
	var held float64
	for _, n := range t.nodes {
		freed := n.slotFreed()
		if freed.After(end) {
			freed = time.Time{} // after the run: a node the system never finished (SUC's failing node)
		}
		switch {
		case !n.jobCreated.IsZero() && !freed.IsZero():
			held += freed.Sub(n.jobCreated).Seconds()
		case !n.jobCreated.IsZero() && n.jobCreated.Before(end):
			held += end.Sub(n.jobCreated).Seconds() // held to the end
		}
		ph.Nodes++
		add := func(dst *[]float64, from, to time.Time) {
			if !from.IsZero() && !to.IsZero() {
				*dst = append(*dst, to.Sub(from).Seconds())
			}
		}
		add(&a, n.jobCreated, n.podCreated)
		add(&b, n.podCreated, n.podRunning)
		add(&c, n.podRunning, n.podFinished)
		add(&d, n.podFinished, n.jobFinished)
		add(&e, n.jobFinished, freed)
		if !n.jobCreated.IsZero() {
			created = append(created, n.jobCreated)
		}
		if !freed.IsZero() {
			gone = append(gone, freed)
		}
	}
	ph.JobToPod, ph.PodToRunning, ph.Running, ph.PodToJobDone, ph.JobDoneToGone = summarize(a), summarize(b), summarize(c), summarize(d), summarize(e)
	slices.SortFunc(created, func(x, y time.Time) int { return x.Compare(y) })
	slices.SortFunc(gone, func(x, y time.Time) int { return x.Compare(y) })
	// The k-th slot released is taken by the (p+k)-th Job created: pair them in order. The mean
	// is exact whatever the pairing; the percentiles assume slots are reused first in, first out.
	var f []float64
	for k := 0; k < len(gone) && p+k < len(created); k++ {
		f = append(f, created[p+k].Sub(gone[k]).Seconds())
	}
	ph.GoneToNextJob = summarize(f)
	if span := end.Sub(start).Seconds(); span > 0 && p > 0 {
		ph.Utilization = held / (float64(p) * span)
	}
	if len(created) > 0 {
		ph.FirstJob = created[0].Sub(start).Seconds()
	}
	if len(gone) > 0 {
		ph.LastGoneToEnd = end.Sub(gone[len(gone)-1]).Seconds()
	}
	return ph
}

// stat is a distribution in seconds.
type stat struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
}

func summarize(xs []float64) stat {
	if len(xs) == 0 {
		return stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return stat{N: len(s), Mean: sum / float64(len(s)), P50: q(0.5), P95: q(0.95), Max: s[len(s)-1]}
}
