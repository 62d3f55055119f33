package activities

import (
	"context"
	"errors"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"go.temporal.io/sdk/activity"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// AwaitJobEndActivityID is the activity ID under which a node awaits the word that its Job
// ended (AwaitJobEnd): the worker's JobEndNotifier completes that activity by this ID, the
// node's workflow ID and the run ID the Job carries.
const AwaitJobEndActivityID = "await-job-end"

// AwaitJobEndInput names the Job whose end the node awaits.
type AwaitJobEndInput struct {
	Job JobRef `json:"job"`
}

// AwaitJobEnd lets a node wait for a long Job at a constant cost in Temporal actions: it
// returns at once when the worker's cache shows the Job ended (or shows nothing to wait on),
// and otherwise leaves the activity open (no heartbeat, no result) for a JobEndNotifier to
// complete by ID when the Job ends, on whichever worker sees that first. The word carries no
// outcome: the node then reads the Job's end itself (WatchJob), as after a watch.
//
// A notice that came before this activity was scheduled found nothing to complete and is
// covered by the look here; one that comes after it is scheduled completes it, started or not.
func (a *Activities) AwaitJobEnd(ctx context.Context, in AwaitJobEndInput) error {
	if a.Jobs == nil || !a.Jobs.Synced() {
		return errors.New("activities: the Job informer is not running; the node waits for its Job with WaitJob instead")
	}
	// Marked before the look: an end after it is told, one before it is seen here.
	a.Jobs.MarkAwaited(in.Job.Namespace, in.Job.Name)
	sub := a.Jobs.Subscribe(in.Job.Namespace, in.Job.Name)
	job, gone := sub.Last()
	sub.Close()
	if job == nil || gone || (in.Job.UID != "" && string(job.UID) != in.Job.UID) || jobEndDecided(job) {
		return nil // ended, or not in the cache: the node looks at once
	}
	return activity.ErrResultPending
}

// jobEndDecided says whether the Job's end is decided: a terminal or interim condition, or a
// deletion under way.
func jobEndDecided(job *batchv1.Job) bool {
	if terminal, _ := jobspec.Terminal(job.Status); terminal {
		return true
	}
	return jobspec.Interim(job.Status) != nil || job.DeletionTimestamp != nil
}

// unprocessed says whether no node has finalized the Job yet: our finalizer comes off when
// the outcome is recorded.
func unprocessed(job *batchv1.Job) bool {
	for _, f := range job.Finalizers {
		if f == jobspec.FinalizerOutcome {
			return true
		}
	}
	return false
}

// noticeAge is how old a Job must be for its end to be worth a notice, unless a node awaits it
// on this worker (JobWatcher.MarkAwaited: a watch that failed early hands over at once): a
// node watches its Job for WatchSeconds (20 s) from its creation before it awaits the word, so
// an end before then is the watch's, and a notice would only find no activity to complete.
const noticeAge = 15 * time.Second
