package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"

	"go.temporal.io/sdk/activity"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// DeleteJob deletes the node's Job (Foreground propagation, so the Job goes only after its
// Pods), lets go of our finalizer, and returns once the Job is gone and no Pod of it is
// running or terminating (a Job that others' finalizers keep counts as gone once the garbage
// collector has let go of it): only then may the node run something else. It heartbeats while it
// waits, and waits as long as it takes; call it as a regular activity with a heartbeat timeout.
// Idempotent: a Job already gone is success. A ref without a UID (CreateJob's reply was lost)
// deletes only a Job whose rollout label and run-id annotation show that it is ours.
func (a *Activities) DeleteJob(ctx context.Context, job JobRef) error {
	sub := a.Jobs.Subscribe(job.Namespace, job.Name)
	defer sub.Close()
	activity.RecordHeartbeat(ctx, job.Name)
	ours, err := a.removeJob(ctx, &job, sub, metav1.DeletePropagationForeground)
	if err != nil || !ours {
		return err
	}
	_, err = a.awaitJobGone(ctx, job, sub, 0, false)
	return err
}

// removeJob removes our finalizer from the Job ref names and deletes it, with a UID precondition
// so that a namesake made after ours went is never touched. It fills in ref.UID when it was
// missing; ours is false when the Job under that name belongs to someone else, which is then
// left alone.
func (a *Activities) removeJob(ctx context.Context, ref *JobRef, sub *JobSubscription, propagation metav1.DeletionPropagation) (ours bool, err error) {
	if ref.UID == "" {
		job, err := a.Kube.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil // never created, or gone; its Pods are looked for by name
		}
		if err != nil {
			return false, kubeError(err, "get", fmt.Sprintf("job %s/%s", ref.Namespace, ref.Name))
		}
		if !madeBy(job, *ref) {
			activity.GetLogger(ctx).Warn("not deleting a Job that this rollout did not create", "job", ref.Namespace+"/"+ref.Name,
				"runID", ref.RunID, "labels", job.Labels, "annotations", job.Annotations)
			return false, nil
		}
		ref.UID = string(job.UID)
	}
	// The finalizer goes first: a Foreground deletion adds one of its own, which would make the
	// finalizer list we read stale.
	if err := a.dropFinalizer(ctx, *ref, sub); err != nil {
		return true, err
	}
	return true, a.deleteJob(ctx, *ref, propagation)
}

// deleteJob deletes the Job of a ref that has its UID. A Job already gone is fine.
func (a *Activities) deleteJob(ctx context.Context, ref JobRef, propagation metav1.DeletionPropagation) error {
	uid := types.UID(ref.UID)
	err := a.Kube.BatchV1().Jobs(ref.Namespace).Delete(ctx, ref.Name, metav1.DeleteOptions{
		PropagationPolicy: &propagation,
		Preconditions:     &metav1.Preconditions{UID: &uid},
	})
	// Conflict here can only be the UID precondition: our Job is already gone.
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return kubeError(err, "delete", fmt.Sprintf("job %s/%s", ref.Namespace, ref.Name))
}

// madeBy says whether job is the one the NodeRollout run of ref created: it carries our rollout
// label and, when ref knows its run, that run's annotation.
func madeBy(job *batchv1.Job, ref JobRef) bool {
	if job.Labels[jobspec.LabelRollout] == "" {
		return false
	}
	return ref.RunID == "" || job.Annotations[jobspec.AnnotationRunID] == ref.RunID
}

// dropFinalizer removes FinalizerOutcome from our Job, if it has it. The JSON patch tests the
// Job's UID and its whole finalizer list as last read (from the informer's cache when it has
// the Job), so it never drops a finalizer someone else added meanwhile; when that test fails,
// it reads the Job afresh and tries again.
func (a *Activities) dropFinalizer(ctx context.Context, ref JobRef, sub *JobSubscription) error {
	jobs := a.Kube.BatchV1().Jobs(ref.Namespace)
	what := fmt.Sprintf("job %s/%s (removing finalizer %s)", ref.Namespace, ref.Name, jobspec.FinalizerOutcome)
	job, _ := sub.Last()
	for attempt := 0; ; attempt++ {
		if job == nil || (ref.UID != "" && string(job.UID) != ref.UID) {
			var err error
			if job, err = jobs.Get(ctx, ref.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return kubeError(err, "get", what)
			}
		}
		if (ref.UID != "" && string(job.UID) != ref.UID) || (ref.UID == "" && !madeBy(job, ref)) ||
			!slices.Contains(job.Finalizers, jobspec.FinalizerOutcome) {
			return nil
		}
		rest := slices.DeleteFunc(slices.Clone(job.Finalizers), func(f string) bool { return f == jobspec.FinalizerOutcome })
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": "/metadata/uid", "value": job.UID},
			{"op": "test", "path": "/metadata/finalizers", "value": job.Finalizers},
			{"op": "replace", "path": "/metadata/finalizers", "value": append([]string{}, rest...)},
		})
		if err != nil {
			return err
		}
		_, err = jobs.Patch(ctx, ref.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case (apierrors.IsInvalid(err) || apierrors.IsConflict(err)) && attempt < 5:
			// A failed test (the list changed since it was read) is a 422; read and retry.
			job = nil
		default:
			return kubeError(err, "patch", what)
		}
	}
}

// awaitJobGone waits until the Job is gone (or released) and none of its Pods is running or
// terminating, heartbeating meanwhile. The Job's deletion is watched on the informer (a Foreground deletion
// ends only after the Pods are gone); the Pods are then listed once to make sure, and again
// every PodPollInterval while some remain (after a Background deletion by someone else, or a
// Job that was never in the cache). With bound > 0 it gives up after that long and returns how
// many Pods remain. gone says the Job is known to be gone already.
func (a *Activities) awaitJobGone(ctx context.Context, ref JobRef, sub *JobSubscription, bound time.Duration, gone bool) (remaining int, err error) {
	heartbeat := time.NewTicker(a.HeartbeatInterval)
	defer heartbeat.Stop()
	poll := time.NewTicker(a.PodPollInterval)
	defer poll.Stop()
	var giveUp <-chan time.Time
	if bound > 0 {
		timer := time.NewTimer(bound)
		defer timer.Stop()
		giveUp = timer.C
	}
	check := true
	for {
		if check && !gone {
			if gone, err = a.jobGone(ctx, ref, sub); err != nil {
				return 0, err
			}
		}
		if check && gone {
			if remaining, err = a.livePods(ctx, ref); err != nil || remaining == 0 {
				return remaining, err
			}
		}
		check = true
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-heartbeat.C:
			activity.RecordHeartbeat(ctx, ref.Name)
			check = false
		case <-giveUp:
			if !gone {
				return a.livePods(ctx, ref)
			}
			return remaining, nil
		case <-sub.Changed():
		case <-poll.C:
		}
	}
}

// jobGone says whether the Job is no longer stored, or is kept only by finalizers that do not
// wait for its Pods (released). The informer's cache answers while it holds the Job; otherwise
// one GET does.
func (a *Activities) jobGone(ctx context.Context, ref JobRef, sub *JobSubscription) (bool, error) {
	job, gone := sub.Last()
	if job != nil && (ref.UID == "" || string(job.UID) == ref.UID) {
		return gone || released(job), nil
	}
	if job != nil {
		return true, nil // another Job has the name now
	}
	fresh, err := a.Kube.BatchV1().Jobs(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, kubeError(err, "get", fmt.Sprintf("job %s/%s", ref.Namespace, ref.Name))
	}
	return ref.UID != "" && string(fresh.UID) != ref.UID || released(fresh), nil
}

// released says whether a Job being deleted is kept only by others' finalizers (one from the
// template, a policy engine's), which may stay for good: the garbage collector no longer holds
// it for its Pods (it drops foregroundDeletion once they are gone, and a Background deletion
// has none), and the Job controller creates no Pod for a Job being deleted. What is left to
// wait for is its Pods, which are listed.
func released(job *batchv1.Job) bool {
	return job.DeletionTimestamp != nil && !slices.Contains(job.Finalizers, metav1.FinalizerDeleteDependents)
}

// livePods counts the Job's Pods that have not ended (pending, running, or terminating). It
// reads the API server's watch cache: the Pods of a Job that is finished or deleted are no
// longer created, only removed, and a stale answer only makes the wait longer.
func (a *Activities) livePods(ctx context.Context, ref JobRef) (int, error) {
	selector := labels.Set{batchv1.JobNameLabel: ref.Name}
	if ref.UID != "" {
		selector = labels.Set{batchv1.ControllerUidLabel: ref.UID}
	}
	pods, err := a.Kube.CoreV1().Pods(ref.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: selector.String(), ResourceVersion: "0",
	})
	if err != nil {
		return 0, kubeError(err, "list", fmt.Sprintf("pods in namespace %q", ref.Namespace))
	}
	n := 0
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	return n, nil
}

// TrustsJobPodCounts says whether a cluster of Kubernetes version v counts a finished Job's
// Pods until they stopped (1.31 on); an unknown version (nil) does not.
func TrustsJobPodCounts(v *version.Version) bool {
	return v != nil && v.AtLeast(version.MajorMinor(1, 31))
}

// podsStopped says, without a request, whether the Job controller reports that none of the
// finished Job's Pods is active or terminating. Its count can be trusted only from Kubernetes
// 1.31 on, where Complete and Failed come once the Pods stopped, always after SuccessCriteriaMet
// or FailureTarget. Before, they come at once: in the sync that deletes the Job's active Pods,
// which 1.29 and 1.30 do not count as terminating (kubernetes/kubernetes#125089), and a
// finished Job's count is never updated again; without terminating counts (before 1.29) there
// is nothing to go by; and on 1.30 a podFailurePolicy's FailJob adds FailureTarget and Failed
// with the same stale count. Elsewhere the Pods must be listed. trusted says the cluster is
// 1.31 or later (Activities.TrustJobPodCounts).
func podsStopped(job *batchv1.Job, trusted bool) bool {
	if !trusted || job.Status.Terminating == nil || *job.Status.Terminating != 0 || job.Status.Active != 0 {
		return false
	}
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobSuccessCriteriaMet || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
