package activities

import (
	"context"
	"errors"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	batchinformers "k8s.io/client-go/informers/batch/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// JobWatcher keeps one watch on every rollout Job of the cluster, or one per namespace in
// namespaced mode (per worker, however many Jobs are being waited for), and tells each waiter
// when its own Job changes.
type JobWatcher struct {
	informers map[string]cache.SharedIndexInformer // by namespace; metav1.NamespaceAll: all of them

	mu      sync.Mutex
	subs    map[string]map[*JobSubscription]struct{} // by "namespace/name"
	started bool
	synced  []cache.InformerSynced
	// onEvent, when set (NotifyEnds), sees every event of our Jobs after the subscribers.
	onEvent func(job *batchv1.Job, deleted bool)
	// awaited are the Jobs ("namespace/name") whose end a node awaits on this worker
	// (AwaitJobEnd); forgotten when the Job is deleted.
	awaited map[string]bool
}

// NewJobWatcher builds the watcher over the given namespaces (none: the whole cluster, which
// needs cluster-wide list/watch on Jobs); nothing talks to the API server until Start.
func NewJobWatcher(kube kubernetes.Interface, namespaces ...string) *JobWatcher {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	w := &JobWatcher{informers: map[string]cache.SharedIndexInformer{}, subs: map[string]map[*JobSubscription]struct{}{}}
	for _, ns := range namespaces {
		informer := batchinformers.NewFilteredJobInformer(kube, ns, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = jobspec.LabelRollout })
		// A large fleet keeps thousands of Jobs in the cache; their managed fields are dead weight.
		_ = informer.SetTransform(func(obj any) (any, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		})
		w.informers[ns] = informer
	}
	return w
}

// Start runs the informer until ctx ends and returns once its cache has synced.
func (w *JobWatcher) Start(ctx context.Context) error {
	w.mu.Lock()
	if !w.started {
		for _, informer := range w.informers {
			reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    func(obj any) { w.observe(obj, false) },
				UpdateFunc: func(_, obj any) { w.observe(obj, false) },
				DeleteFunc: func(obj any) { w.observe(obj, true) },
			})
			if err != nil {
				w.mu.Unlock()
				return err
			}
			w.synced = append(w.synced, informer.HasSynced, reg.HasSynced)
		}
		w.started = true
		for _, informer := range w.informers {
			go informer.RunWithContext(ctx)
		}
	}
	synced := w.synced
	w.mu.Unlock()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("job informer: cache did not sync before the context ended")
	}
	return nil
}

// Synced says whether Start ran and the cache holds every rollout Job.
func (w *JobWatcher) Synced() bool {
	w.mu.Lock()
	synced := w.synced
	w.mu.Unlock()
	if len(synced) == 0 {
		return false
	}
	for _, s := range synced {
		if !s() {
			return false
		}
	}
	return true
}

// observe runs on the informer's goroutine for every event: it records the Job's state on
// each subscription for it and wakes the subscribers without blocking.
func (w *JobWatcher) observe(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	job, ok := obj.(*batchv1.Job)
	if !ok {
		return
	}
	// The label filter is the server's; check it again so a watch that ignores selectors
	// (as fakes do) cannot hand us other Jobs.
	if _, ours := job.Labels[jobspec.LabelRollout]; !ours {
		return
	}
	key := job.Namespace + "/" + job.Name
	w.mu.Lock()
	for s := range w.subs[key] {
		s.job, s.gone = job, deleted
		select {
		case s.changed <- struct{}{}:
		default: // a wake-up is already pending; the waiter reads the latest state
		}
	}
	hook := w.onEvent
	if deleted {
		delete(w.awaited, key)
	}
	w.mu.Unlock()
	if hook != nil {
		hook(job, deleted)
	}
}

// MarkAwaited records that a node awaits the end of the Job on this worker: its end is told
// however soon it comes (JobEndNotifier).
func (w *JobWatcher) MarkAwaited(namespace, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.awaited == nil {
		w.awaited = map[string]bool{}
	}
	w.awaited[namespace+"/"+name] = true
}

// Awaited says whether a node awaits the end of the Job on this worker (MarkAwaited).
func (w *JobWatcher) Awaited(job *batchv1.Job) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.awaited[job.Namespace+"/"+job.Name]
}

// NotifyEnds hands every later event of our Jobs to hook (a JobEndNotifier's Observe), and at
// once every Job the cache holds: the ends that came while no worker watched, or before the
// worker could tell anyone. hook runs on the informer's goroutine and must not block.
func (w *JobWatcher) NotifyEnds(hook func(job *batchv1.Job, deleted bool)) {
	w.mu.Lock()
	w.onEvent = hook
	var cached []any
	for _, informer := range w.informers {
		cached = append(cached, informer.GetStore().List()...)
	}
	w.mu.Unlock()
	for _, obj := range cached {
		if job, ok := obj.(*batchv1.Job); ok {
			hook(job, false)
		}
	}
}

// Subscribe starts following one Job. The caller must Close the subscription.
func (w *JobWatcher) Subscribe(namespace, name string) *JobSubscription {
	key := namespace + "/" + name
	s := &JobSubscription{w: w, key: key, changed: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs[key] == nil {
		w.subs[key] = map[*JobSubscription]struct{}{}
	}
	w.subs[key][s] = struct{}{}
	informer := w.informers[namespace]
	if informer == nil {
		informer = w.informers[metav1.NamespaceAll]
	}
	if informer == nil {
		return s // a namespace not watched: WaitJob reads the Job from the API server
	}
	if obj, exists, err := informer.GetIndexer().GetByKey(key); err == nil && exists {
		s.job, _ = obj.(*batchv1.Job)
	}
	return s
}

// JobSubscription is one waiter's view of one Job.
type JobSubscription struct {
	w       *JobWatcher
	key     string
	changed chan struct{}
	job     *batchv1.Job // last state seen; kept after deletion, so a Job that finished and was then removed still reports how it ended
	gone    bool         // the last event was a deletion
}

// Changed receives after every event for the Job (coalesced: one receive may cover several).
func (s *JobSubscription) Changed() <-chan struct{} { return s.changed }

// Last returns the last state seen (nil if none) and whether the Job has since been deleted.
// The returned Job is shared with the cache and must not be modified.
func (s *JobSubscription) Last() (job *batchv1.Job, gone bool) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.job, s.gone
}

// Close stops the subscription.
func (s *JobSubscription) Close() {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	delete(s.w.subs[s.key], s)
	if len(s.w.subs[s.key]) == 0 {
		delete(s.w.subs, s.key)
	}
}
