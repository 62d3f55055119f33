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
	noticed   map[types.UID]*notice // Jobs whose end this worker has told, or is telling
	inFlight  chan struct{}         // bounds concurrent completions
	telling   sync.WaitGroup        // the notices in flight
	initOnce  sync.Once
	retryBase time.Duration // the first wait between tries
	retryMax  time.Duration // the longest (maxNoticeBackoff)
}

// notice is one Job's end, told or being told. settled closes once the Job is processed or
// gone: a notice still waiting out an outage then stops, as no node needs it any more.
type notice struct {
	settled chan struct{}
	once    sync.Once
}

func (nt *notice) settle() { nt.once.Do(func() { close(nt.settled) }) }

// maxNoticeTries bounds the tries of one notice that Temporal refused for a reason other than
// an outage (a permission, say); the node's deadline is the backstop after that. A notice that
// meets an outage (the server down or out of reach, minutes in the field) keeps trying every
// maxNoticeBackoff until it is taken or its Job is processed: giving up would leave the node
// waiting for its Job's deadline, hours for a long Job, and an ended Job has no later event
// to try again on.
const (
	maxNoticeTries   = 8
	maxNoticeBackoff = 30 * time.Second
)

func (n *JobEndNotifier) init() {
	n.initOnce.Do(func() {
		n.noticed = map[types.UID]*notice{}
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
		if n.retryMax == 0 {
			n.retryMax = maxNoticeBackoff
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
	nt := n.noticed[job.UID]
	if deleted || !unprocessed(job) {
		// Processed (our finalizer off) or gone: no node awaits this end any more.
		if nt != nil {
			nt.settle()
			delete(n.noticed, job.UID)
		}
		n.mu.Unlock()
		// A Job that went while running (someone removed our finalizer and deleted it) is an
		// end its node must hear of; one that had ended was noticed then, or finalized.
		if deleted && nt == nil && !jobEndDecided(job) && n.oldEnough(job) {
			n.tell(job, &notice{settled: make(chan struct{})})
		}
		return
	}
	if nt != nil || !jobEndDecided(job) || !n.oldEnough(job) {
		n.mu.Unlock()
		return
	}
	nt = &notice{settled: make(chan struct{})}
	n.noticed[job.UID] = nt
	n.mu.Unlock()
	n.tell(job, nt)
}

func (n *JobEndNotifier) oldEnough(job *batchv1.Job) bool {
	return n.Now().Sub(job.CreationTimestamp.Time) >= noticeAge || (n.Awaited != nil && n.Awaited(job))
}

// Wait returns once every notice in flight has been told or given up.
func (n *JobEndNotifier) Wait() { n.telling.Wait() }

// tell completes the node's AwaitJobEnd in the background, retrying passing failures and
// waiting out an outage of Temporal for as long as the Job is unprocessed.
func (n *JobEndNotifier) tell(job *batchv1.Job, nt *notice) {
	node, runID := job.Annotations[jobspec.AnnotationNode], job.Annotations[jobspec.AnnotationRunID]
	if node == "" || runID == "" {
		return
	}
	workflowID := n.NodeWorkflowID(node)
	uid, name := job.UID, job.Namespace+"/"+job.Name
	n.telling.Add(1)
	go func() {
		defer n.telling.Done()
		backoff := n.retryBase
		for try := 1; ; try++ {
			err := n.complete(workflowID, runID)
			var notFound *serviceerror.NotFound
			switch {
			case err == nil:
				n.Logger.Debug("told the node its Job ended", "job", name, "workflowID", workflowID)
				return
			case errors.As(err, &notFound):
				// No such activity: the node read the end itself (its watch, or the look
				// AwaitJobEnd takes when it starts), another worker told it, or it has closed.
				return
			case try >= maxNoticeTries && !temporalOutage(err):
				n.Logger.Warn("could not tell the node its Job ended; its deadline will", "job", name, "workflowID", workflowID, "error", err)
				n.mu.Lock()
				if n.noticed[uid] == nt {
					delete(n.noticed, uid) // the next event of the Job tries again
				}
				n.mu.Unlock()
				return
			case try == maxNoticeTries:
				n.Logger.Warn("Temporal is out of reach; the node hears of its Job's end once it is back", "job", name, "workflowID", workflowID, "error", err)
			}
			select {
			case <-time.After(backoff):
			case <-nt.settled:
				return
			}
			backoff = min(2*backoff, n.retryMax)
		}
	}()
}

// complete makes one try at completing the node's AwaitJobEnd, holding one of the slots that
// bound the completions in flight (not while it waits to try again).
func (n *JobEndNotifier) complete(workflowID, runID string) error {
	n.inFlight <- struct{}{}
	defer func() { <-n.inFlight }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return n.Temporal.CompleteActivityByID(ctx, n.Namespace, workflowID, runID, AwaitJobEndActivityID, nil, nil)
}
