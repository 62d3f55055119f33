package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// CreateJob renders the template for one node and creates its Job. The name is deterministic,
// so a retried attempt finds the Job its earlier attempt made and adopts it.
func (a *Activities) CreateJob(ctx context.Context, in JobRequest) (JobRef, error) {
	if in.Template == "" {
		text, err := a.storedTemplate(ctx, in.Namespace, in.TemplateHash)
		if err != nil {
			return JobRef{}, err
		}
		in.Template = text
	}
	params := jobspec.JobParams{
		Rollout:                 in.Rollout,
		Namespace:               in.Namespace,
		Node:                    in.Node,
		RunID:                   in.RunID,
		TemplateHash:            in.TemplateHash,
		ActiveDeadlineSeconds:   in.JobTimeoutSeconds,
		TTLSecondsAfterFinished: in.TTLSecondsAfterFinished,
	}
	if o := in.Owner; o != nil {
		params.Owner = &metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: types.UID(o.UID)}
	}
	job, err := jobspec.Build(in.Template, params)
	if err != nil {
		return JobRef{}, templateError(err)
	}

	// The node check and the create go out together: ListNodes saw the node moments ago, so the
	// check nearly always passes, and waiting for it first would put a round trip between every
	// finished Job and the next one. In the rare race the Job just made is deleted again.
	type nodeCheck struct {
		uid string
		err error
	}
	checked := make(chan nodeCheck, 1)
	go func() {
		uid, err := a.nodeUID(ctx, in.Node)
		checked <- nodeCheck{uid, err}
	}()
	ref, createErr := a.createJob(ctx, in, job)
	node := <-checked
	switch {
	case apierrors.IsNotFound(node.err):
		if createErr == nil {
			if err := a.deleteJob(ctx, ref); err != nil {
				return JobRef{}, err // the retry adopts the Job and deletes it again
			}
		}
		return JobRef{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %q does not exist (deleted before its Job was created)", in.Node), ErrNodeGone, nil)
	case node.err != nil:
		return JobRef{}, kubeError(node.err, "get", fmt.Sprintf("node %q", in.Node))
	case createErr != nil:
		return JobRef{}, createErr
	}
	ref.NodeUID = node.uid
	return ref, nil
}

// nodeUID returns the UID of the named Node. It reads the API server's watch cache, which costs
// no etcd read, and confirms a NotFound there with a quorum read, as the cache may lag.
func (a *Activities) nodeUID(ctx context.Context, name string) (string, error) {
	nodes := a.Kube.CoreV1().Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return "", err
	}
	return string(node.UID), nil
}

func (a *Activities) createJob(ctx context.Context, in JobRequest, job *batchv1.Job) (JobRef, error) {
	created, err := a.Kube.BatchV1().Jobs(in.Namespace).Create(ctx, job, metav1.CreateOptions{FieldManager: FieldManager})
	switch {
	case err == nil:
		return jobRef(created, in.Node), nil
	case apierrors.IsAlreadyExists(err):
		return a.adoptJob(ctx, in, job.Name)
	case apierrors.IsNotFound(err):
		// Create only reports NotFound for the namespace.
		return JobRef{}, invalidRequest("namespace", "namespace %q does not exist (deleted during the rollout?); create it: %v",
			in.Namespace, err)
	default:
		return JobRef{}, kubeError(err, "create", fmt.Sprintf("jobs in namespace %q", in.Namespace))
	}
}

// adoptJob returns the Job that already holds our name if this very NodeRollout run made it
// (an earlier attempt whose reply was lost), and refuses anything else.
func (a *Activities) adoptJob(ctx context.Context, in JobRequest, name string) (JobRef, error) {
	existing, err := a.Kube.BatchV1().Jobs(in.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// Deleted between our create and get; the next attempt creates it afresh.
		return JobRef{}, fmt.Errorf("job %s/%s vanished right after create reported it exists", in.Namespace, name)
	}
	if err != nil {
		return JobRef{}, kubeError(err, "get", fmt.Sprintf("job %s/%s", in.Namespace, name))
	}
	if existing.Labels[jobspec.LabelRollout] == in.Rollout &&
		existing.Annotations[jobspec.AnnotationRunID] == in.RunID &&
		existing.Annotations[jobspec.AnnotationTemplateHash] == in.TemplateHash {
		return jobRef(existing, in.Node), nil
	}
	return JobRef{}, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("job %s/%s exists but was not created by this run of rollout %q for node %q (labels %v); delete or rename it",
			in.Namespace, name, in.Rollout, in.Node, existing.Labels),
		ErrForeignObject, nil)
}

func jobRef(job *batchv1.Job, node string) JobRef {
	return JobRef{
		Namespace: job.Namespace,
		Name:      job.Name,
		UID:       string(job.UID),
		Node:      node,
		CreatedAt: job.CreationTimestamp.Time,
	}
}

// WaitJob waits on the shared informer until the Job finishes, disappears, outlives its
// deadline or loses its node. It heartbeats throughout; a retried attempt (after a worker
// crash) resumes on the same Job with the same deadline.
func (a *Activities) WaitJob(ctx context.Context, in WaitJobInput) (JobEnd, error) {
	if a.Jobs == nil || !a.Jobs.Synced() {
		// Without a synced cache every Job would look deleted.
		return JobEnd{}, errors.New("activities: the Job informer is not running; start Activities.Jobs before the worker")
	}
	ref := in.Job
	defer a.countWaiting(ctx)()
	sub := a.Jobs.Subscribe(ref.Namespace, ref.Name)
	defer sub.Close()

	var deadline time.Time
	var deadlineC <-chan time.Time
	if in.TimeoutSeconds > 0 {
		created := ref.CreatedAt
		if job, _ := sub.Last(); created.IsZero() && job != nil {
			created = job.CreationTimestamp.Time
		}
		if created.IsZero() {
			created = a.Now()
		}
		deadline = created.Add(time.Duration(in.TimeoutSeconds) * time.Second)
		timer := time.NewTimer(max(0, deadline.Sub(a.Now())))
		defer timer.Stop()
		deadlineC = timer.C
	}
	heartbeat := time.NewTicker(a.HeartbeatInterval)
	defer heartbeat.Stop()
	nodeCheck := time.NewTicker(a.NodeCheckInterval)
	defer nodeCheck.Stop()
	activity.RecordHeartbeat(ctx, ref.Name)

	w := jobWait{a: a, ref: ref, sub: sub}
	for {
		if end, done, err := w.check(ctx); err != nil || done {
			return end, err
		}
		if !deadline.IsZero() && !a.Now().Before(deadline) {
			if err := a.deleteJob(ctx, ref); err != nil {
				return JobEnd{}, err
			}
			return JobEnd{
				Outcome:    OutcomeTimedOut,
				Reason:     ReasonJobTimeout,
				Message:    fmt.Sprintf("Job %s/%s did not finish within %ds of its creation; deleted it", ref.Namespace, ref.Name, in.TimeoutSeconds),
				FinishedAt: a.Now(),
			}, nil
		}
		select {
		case <-ctx.Done():
			return JobEnd{}, ctx.Err()
		case <-sub.Changed():
			w.confirmed = false
		case <-heartbeat.C:
			activity.RecordHeartbeat(ctx, ref.Name)
		case <-deadlineC:
		case <-nodeCheck.C:
			if end, gone, err := a.checkNode(ctx, ref); err != nil || gone {
				return end, err
			}
			// The once-per-interval node check also bounds how long an informer that lost
			// sight of the Job can go unverified.
			w.confirmed = false
		}
	}
}

// informerGrace is how long a newly created Job may be missing from the informer's cache
// before WaitJob reads it from the API server instead.
const informerGrace = 5 * time.Second

// jobWait is one WaitJob's view of its Job.
type jobWait struct {
	a   *Activities
	ref JobRef
	sub *JobSubscription
	// confirmed: a GET found the Job while the cache did not have it (informer lag), so
	// there is no need to GET again until something changes.
	confirmed bool
}

// check reads the Job's state from the cache, falling back to one GET when the cache lacks
// it; done reports that the wait is over.
func (w *jobWait) check(ctx context.Context) (end JobEnd, done bool, err error) {
	job, gone := w.sub.Last()
	if job != nil && w.ref.UID != "" && string(job.UID) != w.ref.UID {
		job = nil // another Job under our name: ours is not in the cache
	}
	if job != nil {
		if end, done := w.a.jobEnd(job); done {
			return end, true, nil
		}
		if !gone && job.DeletionTimestamp == nil {
			return JobEnd{}, false, nil
		}
		if job.DeletionTimestamp != nil {
			return w.deleted("is being deleted"), true, nil
		}
	}
	if w.confirmed {
		return JobEnd{}, false, nil
	}
	if job == nil && !gone && !w.ref.CreatedAt.IsZero() && w.a.Now().Sub(w.ref.CreatedAt) < informerGrace {
		// Just created: the informer delivers it in moments, and its event wakes the wait.
		// A GET now would be one polling read per node; past the grace it is a real check.
		return JobEnd{}, false, nil
	}
	fresh, err := w.a.Kube.BatchV1().Jobs(w.ref.Namespace).Get(ctx, w.ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return w.deleted("was deleted"), true, nil
	case err != nil:
		return JobEnd{}, false, kubeError(err, "get", fmt.Sprintf("job %s/%s", w.ref.Namespace, w.ref.Name))
	case w.ref.UID != "" && string(fresh.UID) != w.ref.UID:
		return w.deleted("was deleted (another Job now has its name)"), true, nil
	}
	if end, done := w.a.jobEnd(fresh); done {
		return end, true, nil
	}
	if fresh.DeletionTimestamp != nil {
		return w.deleted("is being deleted"), true, nil
	}
	w.confirmed = true
	return JobEnd{}, false, nil
}

func (w *jobWait) deleted(what string) JobEnd {
	return JobEnd{
		Outcome:    OutcomeFailed,
		Reason:     ReasonJobDeleted,
		Message:    fmt.Sprintf("Job %s/%s %s before it finished", w.ref.Namespace, w.ref.Name, what),
		FinishedAt: w.a.Now(),
	}
}

// jobEnd says how a finished Job ended; done is false while it runs or is suspended.
func (a *Activities) jobEnd(job *batchv1.Job) (end JobEnd, done bool) {
	phase, reason, message := jobspec.Interpret(job.Status)
	switch phase {
	case jobspec.PhaseSucceeded:
		end.Outcome = OutcomeSucceeded
	case jobspec.PhaseFailed:
		end.Outcome = OutcomeFailed
		if reason == batchv1.JobReasonDeadlineExceeded {
			end.Outcome = OutcomeTimedOut
		}
	default:
		return JobEnd{}, false
	}
	end.Reason, end.Message, end.FinishedAt = reason, message, finishedAt(job, a.Now)
	return end, true
}

// finishedAt is when the Job finished by its own account, else now.
func finishedAt(job *batchv1.Job, now func() time.Time) time.Time {
	if t := job.Status.CompletionTime; t != nil && !t.IsZero() {
		return t.Time
	}
	var latest time.Time
	for _, c := range job.Status.Conditions {
		switch c.Type {
		case batchv1.JobComplete, batchv1.JobSuccessCriteriaMet, batchv1.JobFailed, batchv1.JobFailureTarget:
			if c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(latest) {
				latest = c.LastTransitionTime.Time
			}
		}
	}
	if latest.IsZero() {
		return now()
	}
	return latest
}

// checkNode ends the wait when the Job's node no longer exists: its Pod can never finish, so
// the Job is deleted rather than left to time out.
func (a *Activities) checkNode(ctx context.Context, ref JobRef) (end JobEnd, gone bool, err error) {
	if ref.Node == "" {
		return JobEnd{}, false, nil
	}
	_, err = a.nodeUID(ctx, ref.Node)
	switch {
	case err == nil:
		return JobEnd{}, false, nil
	case apierrors.IsNotFound(err):
		if err := a.deleteJob(ctx, ref); err != nil {
			return JobEnd{}, false, err
		}
		return JobEnd{
			Outcome:    OutcomeNodeGone,
			Reason:     ReasonNodeDeleted,
			Message:    fmt.Sprintf("node %q was deleted while Job %s/%s ran; deleted the Job", ref.Node, ref.Namespace, ref.Name),
			FinishedAt: a.Now(),
		}, true, nil
	case apierrors.IsForbidden(err):
		return JobEnd{}, false, kubeError(err, "get", fmt.Sprintf("node %q", ref.Node))
	default:
		// A failed check is no evidence either way; the next interval tries again.
		activity.GetLogger(ctx).Warn("checking the Job's node", "node", ref.Node, "error", err)
		return JobEnd{}, false, nil
	}
}
