package activities

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// startedWatcher is a cluster holding objs whose Job informer has synced.
func startedWatcher(t *testing.T, objs ...*batchv1.Job) *Activities {
	t.Helper()
	cs, a := newCluster()
	for _, j := range objs {
		_, err := cs.BatchV1().Jobs(j.Namespace).Create(context.Background(), j, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, a.Jobs.Start(ctx))
	return a
}

func completed(job *batchv1.Job) *batchv1.Job {
	job = job.DeepCopy()
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue})
	return job
}

func TestAwaitJobEndIsLeftOpenWhileTheJobRuns(t *testing.T) {
	running := ourJob(t, testRequest("node-a"))
	a := startedWatcher(t, running)
	err := a.AwaitJobEnd(context.Background(), AwaitJobEndInput{Job: refOf(running, "node-a")})
	require.ErrorIs(t, err, activity.ErrResultPending, "a running Job is awaited: the informer completes the activity")
}

// An end that came before the await started (the informer had nothing to complete then) is
// read at once: the word is never lost.
func TestAwaitJobEndReturnsAtOnceForAJobThatHasEnded(t *testing.T) {
	cases := map[string]func(*batchv1.Job) *batchv1.Job{
		"complete": completed,
		"failure target": func(j *batchv1.Job) *batchv1.Job {
			j = j.DeepCopy()
			j.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue}}
			return j
		},
		"being deleted": func(j *batchv1.Job) *batchv1.Job {
			j = j.DeepCopy()
			now := metav1.NewTime(t0)
			j.DeletionTimestamp = &now
			return j
		},
	}
	for name, change := range cases {
		t.Run(name, func(t *testing.T) {
			job := change(ourJob(t, testRequest("node-a")))
			a := startedWatcher(t, job)
			require.NoError(t, a.AwaitJobEnd(context.Background(), AwaitJobEndInput{Job: refOf(job, "node-a")}))
		})
	}
	t.Run("gone", func(t *testing.T) {
		a := startedWatcher(t)
		require.NoError(t, a.AwaitJobEnd(context.Background(), AwaitJobEndInput{Job: JobRef{Namespace: testNamespace, Name: "gone", UID: "u"}}))
	})
}

func TestAwaitJobEndWithoutTheInformerFails(t *testing.T) {
	_, a := newCluster()
	err := a.AwaitJobEnd(context.Background(), AwaitJobEndInput{Job: JobRef{Namespace: testNamespace, Name: "j"}})
	require.Error(t, err)
	require.NotErrorIs(t, err, activity.ErrResultPending)
}

// completion is one CompleteActivityByID call.
type completion struct{ namespace, workflowID, runID, activityID string }

// fakeTemporal records completions; answer decides each reply.
type fakeTemporal struct {
	mu     sync.Mutex
	calls  []completion
	answer func(try int) error
}

func (f *fakeTemporal) CompleteActivityByID(_ context.Context, namespace, workflowID, runID, activityID string, _ any, _ error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, completion{namespace, workflowID, runID, activityID})
	if f.answer != nil {
		return f.answer(len(f.calls))
	}
	return nil
}

func (f *fakeTemporal) told() []completion {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]completion(nil), f.calls...)
}

func newNotifier(temporal ActivityCompleter, cluster api.Cluster) *JobEndNotifier {
	return &JobEndNotifier{Temporal: temporal, Namespace: "ns", NodeWorkflowID: cluster.NodeWorkflowID,
		Now: func() time.Time { return t0.Add(time.Minute) }, retryBase: time.Millisecond, retryMax: 4 * time.Millisecond}
}

// longJob is our Job on node-a, a minute old when the notifier looks.
func longJob(t *testing.T) *batchv1.Job { return ourJob(t, testRequest("node-a")) }

func TestNotifierTellsTheNodeOnceWhenItsLongJobEnds(t *testing.T) {
	temporal := &fakeTemporal{}
	cluster := api.Cluster{Name: "c1"}
	n := newNotifier(temporal, cluster)
	job := longJob(t)
	n.Observe(job, false) // running: nothing to tell
	n.Wait()
	require.Empty(t, temporal.told())
	n.Observe(completed(job), false)
	n.Observe(completed(job), false) // a later event of the same end
	n.Wait()
	require.Equal(t, []completion{{"ns", cluster.NodeWorkflowID("node-a"), "run-1", AwaitJobEndActivityID}}, temporal.told(),
		"one completion, to this cluster's node workflow, by the run that made the Job")
}

// Another worker's notice of the same end finds no activity (the first completed it): that is
// the end of it, no retry.
func TestDuplicateNoticeFromAnotherWorkerIsHarmless(t *testing.T) {
	first, second := &fakeTemporal{}, &fakeTemporal{answer: func(int) error { return serviceerror.NewNotFound("activity not found") }}
	job := completed(longJob(t))
	newNotifier(first, api.Cluster{}).Observe(job, false)
	n := newNotifier(second, api.Cluster{})
	n.Observe(job, false)
	n.Wait()
	require.Len(t, second.told(), 1, "NotFound is not retried")
}

func TestNotifierRetriesAPassingFailure(t *testing.T) {
	temporal := &fakeTemporal{answer: func(try int) error {
		if try < 3 {
			return serviceerror.NewUnavailable("frontend restarting")
		}
		return nil
	}}
	n := newNotifier(temporal, api.Cluster{})
	n.Observe(completed(longJob(t)), false)
	n.Wait()
	require.Len(t, temporal.told(), 3)
}

// A refusal that is no outage (a permission, say) is tried maxNoticeTries times, and again on
// the Job's next event.
func TestNotifierGivesUpAndTriesAgainOnTheNextEvent(t *testing.T) {
	temporal := &fakeTemporal{answer: func(int) error { return serviceerror.NewPermissionDenied("no", "") }}
	n := newNotifier(temporal, api.Cluster{})
	job := completed(longJob(t))
	n.Observe(job, false)
	n.Wait()
	require.Len(t, temporal.told(), maxNoticeTries)
	n.Observe(job, false)
	n.Wait()
	require.Len(t, temporal.told(), 2*maxNoticeTries, "a notice given up is tried again")
}

// An outage of Temporal far longer than maxNoticeTries (minutes, in the field) does not lose
// the notice: an ended Job has no later event to try again on, so a notice given up would
// leave the node waiting for its Job's deadline.
func TestNotifierWaitsOutAnOutage(t *testing.T) {
	const outage = 3 * maxNoticeTries
	for name, down := range map[string]error{
		"refused":    serviceerror.NewUnavailable("connection refused"),
		"unanswered": context.DeadlineExceeded,
		"overloaded": serviceerror.NewResourceExhausted(0, "busy"),
		"timed out":  serviceerror.NewDeadlineExceeded("deadline exceeded"),
	} {
		t.Run(name, func(t *testing.T) {
			temporal := &fakeTemporal{answer: func(try int) error {
				if try <= outage {
					return down
				}
				return nil
			}}
			n := newNotifier(temporal, api.Cluster{})
			n.Observe(completed(longJob(t)), false)
			n.Wait()
			require.Len(t, temporal.told(), outage+1, "told once Temporal is back")
		})
	}
}

// A notice waiting out an outage stops once its Job is processed (the node read the end at
// its deadline) or gone: no node needs it then.
func TestNotifierStopsWaitingOnceTheJobIsProcessed(t *testing.T) {
	for name, settle := range map[string]func(n *JobEndNotifier, job *batchv1.Job){
		"processed": func(n *JobEndNotifier, job *batchv1.Job) {
			processed := job.DeepCopy()
			processed.Finalizers = nil
			n.Observe(processed, false)
		},
		"deleted": func(n *JobEndNotifier, job *batchv1.Job) { n.Observe(job, true) },
	} {
		t.Run(name, func(t *testing.T) {
			job := completed(longJob(t))
			var n *JobEndNotifier
			temporal := &fakeTemporal{answer: func(try int) error {
				if try == maxNoticeTries+2 {
					settle(n, job)
				}
				return serviceerror.NewUnavailable("down")
			}}
			n = newNotifier(temporal, api.Cluster{})
			n.Observe(job, false)
			stopped := make(chan struct{})
			go func() { n.Wait(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(30 * time.Second):
				t.Fatal("the notice still tries after its Job was " + name)
			}
			require.Len(t, temporal.told(), maxNoticeTries+2)
		})
	}
}

func TestNotifierLeavesAloneWhatNoNodeAwaits(t *testing.T) {
	finalized := completed(longJob(t))
	finalized.Finalizers = nil
	young := completed(longJob(t))
	young.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute - noticeAge + time.Second))
	noRun := completed(longJob(t))
	delete(noRun.Annotations, jobspec.AnnotationRunID)
	for name, job := range map[string]*batchv1.Job{
		"finalized (processed)":          finalized,
		"ended within the node's watch":  young,
		"not made by a node run":         noRun,
		"deleted after it was finalized": finalized,
	} {
		t.Run(name, func(t *testing.T) {
			temporal := &fakeTemporal{}
			n := newNotifier(temporal, api.Cluster{})
			n.Observe(job, name == "deleted after it was finalized")
			n.Wait()
			require.Empty(t, temporal.told())
		})
	}
}

// A Job deleted while it ran (someone took our finalizer off) is an end its node must hear of.
func TestNotifierTellsAJobDeletedWhileRunning(t *testing.T) {
	for name, deleted := range map[string]func(*batchv1.Job) (*batchv1.Job, bool){
		"held by our finalizer": func(j *batchv1.Job) (*batchv1.Job, bool) {
			now := metav1.NewTime(t0)
			j.DeletionTimestamp = &now
			return j, false
		},
		"gone": func(j *batchv1.Job) (*batchv1.Job, bool) { return j, true },
	} {
		t.Run(name, func(t *testing.T) {
			temporal := &fakeTemporal{}
			n := newNotifier(temporal, api.Cluster{})
			n.Observe(deleted(longJob(t)))
			n.Wait()
			require.Len(t, temporal.told(), 1)
		})
	}
}

// A worker that starts tells every Job that ended while no worker watched, from its first
// list, and none that still runs.
func TestStartingWorkerTellsEveryEndItMissed(t *testing.T) {
	ended := completed(longJob(t))
	running := ourJob(t, testRequest("node-b"))
	a := startedWatcher(t, ended, running)
	temporal := &fakeTemporal{}
	n := newNotifier(temporal, api.Cluster{})
	a.Jobs.NotifyEnds(n.Observe)
	n.Wait()
	require.Equal(t, []completion{{"ns", api.NodeWorkflowID("node-a"), "run-1", AwaitJobEndActivityID}}, temporal.told())
}

// A node that awaits a young Job (its watch failed early and handed over at once) hears of an
// end that comes within the watch's span too.
func TestNotifierTellsAYoungJobANodeAwaitsHere(t *testing.T) {
	running := ourJob(t, testRequest("node-a"))
	running.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute - noticeAge/2))
	a := startedWatcher(t, running)
	temporal := &fakeTemporal{}
	n := newNotifier(temporal, api.Cluster{})
	n.Awaited = a.Jobs.Awaited
	n.Observe(completed(running), false)
	n.Wait()
	require.Empty(t, temporal.told(), "a young Job no node awaits here is the watch's")
	n = newNotifier(temporal, api.Cluster{})
	n.Awaited = a.Jobs.Awaited
	require.ErrorIs(t, a.AwaitJobEnd(context.Background(), AwaitJobEndInput{Job: refOf(running, "node-a")}), activity.ErrResultPending)
	n.Observe(completed(running), false)
	n.Wait()
	require.Len(t, temporal.told(), 1)
}
