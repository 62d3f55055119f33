package activities

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// deleteJob runs DeleteJob in the background and counts its heartbeats.
func deleteJobAsync(t *testing.T, a *Activities, ref JobRef) (done <-chan error, heartbeats *atomic.Int64) {
	t.Helper()
	env := newEnv(a)
	heartbeats = &atomic.Int64{}
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { heartbeats.Add(1) })
	result := make(chan error, 1)
	go func() {
		_, err := env.ExecuteActivity(a.DeleteJob, ref)
		result <- err
	}()
	return result, heartbeats
}

// fastWaits makes the Pod polls and heartbeats of a test quick.
func fastWaits(a *Activities) *Activities {
	a.PodPollInterval = 10 * time.Millisecond
	a.HeartbeatInterval = 10 * time.Millisecond
	return a
}

// TestDeleteJobWaitsForThePods: DeleteJob removes our finalizer, deletes the Job with
// Foreground propagation and a UID precondition, and returns only once no Pod of the Job is
// running or terminating, heartbeating meanwhile. (The fake removes the Job at once and
// leaves the Pods, as a Background deletion by someone else would.)
func TestDeleteJobWaitsForThePods(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	pod.DeletionTimestamp = &metav1.Time{Time: t0} // terminating, its grace period running
	cs := fake.NewClientset(job, pod)
	a := fastWaits(startedActivities(t, cs))
	ref := refOf(job, "node-a")
	ref.RunID = "run-1"

	done, heartbeats := deleteJobAsync(t, a, ref)
	require.Eventually(t, func() bool { return countActions(cs, "list", "pods") >= 3 && heartbeats.Load() >= 1 },
		waitTimeout, time.Millisecond, "DeleteJob keeps waiting for the terminating Pod, heartbeating")
	select {
	case err := <-done:
		t.Fatalf("DeleteJob returned while a Pod of the Job was terminating: %v", err)
	default:
	}
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
	require.Contains(t, actions(cs), "patch jobs", "our finalizer comes off")

	// The kubelet confirms: the Pod is gone.
	require.NoError(t, cs.CoreV1().Pods(testNamespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}))
	require.NoError(t, receive(t, done, "DeleteJob to return"))
	_, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err))
}

// TestDeleteJobRemovesOurFinalizer: the finalizer patch tests the list it was computed from and
// keeps everyone else's finalizers.
func TestDeleteJobRemovesOurFinalizer(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	job.Finalizers = []string{"example.com/keep", jobspec.FinalizerOutcome}
	cs, a := newCluster(job)
	// Keep the Job after its deletion, as the API server does while finalizers remain.
	var patched *batchv1.Job
	cs.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	cs.PrependReactor("patch", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		require.Equal(t, types.JSONPatchType, action.(k8stesting.PatchAction).GetPatchType())
		return false, nil, nil
	})
	require.NoError(t, a.dropFinalizer(t.Context(), refOf(job, "node-a"), a.Jobs.Subscribe(testNamespace, job.Name)))
	patched, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"example.com/keep"}, patched.Finalizers)
}

func TestDeleteJobWithoutUID(t *testing.T) {
	for _, tc := range []struct {
		name       string
		change     func(*batchv1.Job)
		wantDelete bool
	}{
		{"ours", func(*batchv1.Job) {}, true},
		{"not ours", func(j *batchv1.Job) { j.Labels = map[string]string{"app": "other"}; j.Annotations = nil }, false},
		{"another run's", func(j *batchv1.Job) { j.Annotations[jobspec.AnnotationRunID] = "run-0" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := ourJob(t, testRequest("node-a"))
			tc.change(job)
			cs := fake.NewClientset(job)
			a := fastWaits(startedActivities(t, cs))
			// CreateJob's reply was lost: the workflow knows the name and its run, not the UID.
			ref := JobRef{Namespace: testNamespace, Name: job.Name, Node: "node-a", RunID: "run-1"}
			done, _ := deleteJobAsync(t, a, ref)
			require.NoError(t, receive(t, done, "DeleteJob to return"))
			_, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
			if !tc.wantDelete {
				require.NoError(t, err, "someone else's Job is left alone")
				require.Zero(t, countActions(cs, "delete", "jobs"))
				require.Zero(t, countActions(cs, "patch", "jobs"))
				return
			}
			require.True(t, apierrors.IsNotFound(err))
			requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
		})
	}
}

func TestDeleteJobAlreadyGone(t *testing.T) {
	job := ourJob(t, testRequest("node-a")) // never stored, or long gone
	cs := fake.NewClientset()
	a := fastWaits(startedActivities(t, cs))
	for _, ref := range []JobRef{refOf(job, "node-a"), {Namespace: testNamespace, Name: job.Name, RunID: "run-1"}} {
		done, _ := deleteJobAsync(t, a, ref)
		require.NoError(t, receive(t, done, "DeleteJob to return"))
	}
}

// TestDropFinalizerRereadsWhenTheListChanged: the finalizer list read from the cache may be
// stale (the garbage collector added or removed one); the API server then fails the patch's
// test with a 422, and the Job is read afresh before trying again.
func TestDropFinalizerRereadsWhenTheListChanged(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(job)
	stale := job.DeepCopy()
	stale.Finalizers = []string{jobspec.FinalizerOutcome, "foregroundDeletion"}
	first := true
	cs.PrependReactor("patch", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) {
		if first {
			first = false
			return true, nil, apierrors.NewGenericServerResponse(422, "patch", batchv1.Resource("jobs"), job.Name,
				`testing value /metadata/finalizers failed: test failed`, 0, false)
		}
		return false, nil, nil
	})
	sub := a.Jobs.Subscribe(testNamespace, job.Name)
	defer sub.Close()
	sub.job = stale // what an informer that lags would hold
	require.NoError(t, a.dropFinalizer(t.Context(), refOf(job, "node-a"), sub))
	require.Equal(t, []string{"patch jobs", "get jobs", "patch jobs"}, actions(cs))
	stored, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, stored.Finalizers)
}

// TestDeleteJobHeldByAnotherFinalizer: a Job that someone else's finalizer keeps (one from the
// template, a policy engine's) stays stored after its deletion for as long as that finalizer
// does; once the garbage collector has let go of it (its foregroundDeletion finalizer removed,
// which it does when the Job's Pods are gone) and no Pod of it is left, the node is free.
func TestDeleteJobHeldByAnotherFinalizer(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	job.Finalizers = []string{"example.com/keep", jobspec.FinalizerOutcome}
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	cs := fake.NewClientset(job, pod)
	jobs := batchv1.SchemeGroupVersion.WithResource("jobs")
	// The API server keeps a deleted object while it has finalizers: it sets its deletion
	// timestamp, and a Foreground deletion adds foregroundDeletion for the garbage collector.
	cs.PrependReactor("delete", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		del := action.(k8stesting.DeleteActionImpl)
		obj, err := cs.Tracker().Get(jobs, del.Namespace, del.Name)
		if err != nil {
			return true, nil, err
		}
		deleting := obj.(*batchv1.Job).DeepCopy()
		deleting.DeletionTimestamp = &metav1.Time{Time: t0}
		if p := del.DeleteOptions.PropagationPolicy; p != nil && *p == metav1.DeletePropagationForeground {
			deleting.Finalizers = append(deleting.Finalizers, metav1.FinalizerDeleteDependents)
		}
		return true, nil, cs.Tracker().Update(jobs, deleting, del.Namespace)
	})
	a := fastWaits(startedActivities(t, cs))
	ref := refOf(job, "node-a")

	done, heartbeats := deleteJobAsync(t, a, ref)
	require.Eventually(t, func() bool {
		obj, err := cs.Tracker().Get(jobs, testNamespace, job.Name)
		return err == nil && obj.(*batchv1.Job).DeletionTimestamp != nil && heartbeats.Load() >= 1
	}, waitTimeout, time.Millisecond, "DeleteJob deletes the Job and waits")
	select {
	case err := <-done:
		t.Fatalf("DeleteJob returned while a Pod of the Job was running: %v", err)
	default:
	}

	// The Pod goes; the garbage collector then drops foregroundDeletion. example.com/keep stays.
	require.NoError(t, cs.CoreV1().Pods(testNamespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}))
	obj, err := cs.Tracker().Get(jobs, testNamespace, job.Name)
	require.NoError(t, err)
	released := obj.(*batchv1.Job).DeepCopy()
	released.Finalizers = []string{"example.com/keep"}
	require.NoError(t, cs.Tracker().Update(jobs, released, testNamespace))

	require.NoError(t, receive(t, done, "DeleteJob to return once no Pod of the Job is left"))
}
