package activities

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// ActivityCompleter completes an activity by its IDs (the Temporal client does).
type ActivityCompleter interface {
	CompleteActivityByID(ctx context.Context, namespace, workflowID, runID, activityID string, result any, err error) error
}

// JobEndNotifier tells a node that its Job ended by completing the node's AwaitJobEnd
// activity, from the worker's shared Job informer (JobWatcher.NotifyEnds): one completion per
// long Job, which Temporal does not bill, instead of a heartbeat every 10 s for as long as it
// runs. It notices every unprocessed Job (our finalizer still on) whose end is decided or
// which is being deleted, at most once per Job per worker; a worker that starts notices every
// such Job in its first list, which covers ends no worker saw. Several workers of one cluster
// notice the same end: the first completion wins and the rest find no activity, at no cost.
// Each worker derives workflow IDs with its own cluster's name (NodeWorkflowID), so a notice
// never reaches another cluster's node.
type JobEndNotifier struct {
	Temporal  ActivityCompleter
	Namespace string // the Temporal namespace
	// NodeWorkflowID is the node workflow ID of a node of this worker's cluster.
	NodeWorkflowID func(node string) string
	// Awaited, if set, says a node awaits the Job on this worker (JobWatcher.Awaited): its end
	// is told whatever the Job's age.
	Awaited func(job *batchv1.Job) bool
	Logger  *slog.Logger
	Now     func() time.Time

	mu        sync.Mutex
	noticed   map[types.UID]bool // Jobs whose end this worker has told, or is telling
	inFlight  chan struct{}      // bounds concurrent completions
	telling   sync.WaitGroup     // the notices in flight
	initOnce  sync.Once
	retryBase time.Duration
}

// maxNoticeTries bounds the tries of one notice that Temporal did not take for a passing
// reason; the node's deadline is the backstop after that.
const maxNoticeTries = 8

func (n *JobEndNotifier) init() {
	n.initOnce.Do(func() {
		n.noticed = map[types.UID]bool{}
		n.inFlight = make(chan struct{}, 16)
		if n.Now == nil {
			n.Now = time.Now
		}
		if n.Logger == nil {
			n.Logger = slog.Default()
		}
		if n.retryBase == 0 {
			n.retryBase = time.Second
		}
	})
}

// Observe is the informer's hook: it runs for every event of one of our Jobs and must not
// block. deleted says the Job is no longer stored.
func (n *JobEndNotifier) Observe(job *batchv1.Job, deleted bool) {
	n.init()
	if job == nil {
		return
	}
	n.mu.Lock()
	if deleted {
		told := n.noticed[job.UID]
		delete(n.noticed, job.UID)
		n.mu.Unlock()
		// A Job that went while running (someone removed our finalizer and deleted it) is an
		// end its node must hear of; one that had ended was noticed then, or finalized.
		if !told && !jobEndDecided(job) && n.oldEnough(job) {
			n.tell(job)
		}
		return
	}
	if n.noticed[job.UID] || !unprocessed(job) || !jobEndDecided(job) || !n.oldEnough(job) {
		n.mu.Unlock()
		return
	}
	n.noticed[job.UID] = true
	n.mu.Unlock()
	n.tell(job)
}

func (n *JobEndNotifier) oldEnough(job *batchv1.Job) bool {
	return n.Now().Sub(job.CreationTimestamp.Time) >= noticeAge || (n.Awaited != nil && n.Awaited(job))
}

// Wait returns once every notice in flight has been told or given up.
func (n *JobEndNotifier) Wait() { n.telling.Wait() }

// tell completes the node's AwaitJobEnd in the background, retrying passing failures.
func (n *JobEndNotifier) tell(job *batchv1.Job) {
	node, runID := job.Annotations[jobspec.AnnotationNode], job.Annotations[jobspec.AnnotationRunID]
	if node == "" || runID == "" {
		return
	}
	workflowID := n.NodeWorkflowID(node)
	uid := job.UID
	n.telling.Add(1)
	go func() {
		defer n.telling.Done()
		n.inFlight <- struct{}{}
		defer func() { <-n.inFlight }()
		backoff := n.retryBase
		for try := 1; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.Temporal.CompleteActivityByID(ctx, n.Namespace, workflowID, runID, AwaitJobEndActivityID, nil, nil)
			cancel()
			var notFound *serviceerror.NotFound
			switch {
			case err == nil:
				n.Logger.Debug("told the node its Job ended", "job", job.Namespace+"/"+job.Name, "workflowID", workflowID)
				return
			case errors.As(err, &notFound):
				// No such activity: the node read the end itself (its watch, or the look
				// AwaitJobEnd takes when it starts), another worker told it, or it has closed.
				return
			case try >= maxNoticeTries:
				n.Logger.Warn("could not tell the node its Job ended; its deadline will", "job", job.Namespace+"/"+job.Name, "workflowID", workflowID, "error", err)
				n.mu.Lock()
				delete(n.noticed, uid) // the next event of the Job tries again
				n.mu.Unlock()
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 30*time.Second)
		}
	}()
}
