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
	"github.com/noderollout/noderollout/api"
)

// CreateJob renders the template for one node and creates its Job. The name is deterministic,
// so a retried attempt finds the Job its earlier attempt made and adopts it. The template is
// taken only under its own hash (TemplateHash), inline or stored: the hash is what the Job and
// the Node's outcome marker record, so a node is never marked done for a template that did not
// run there.
func (a *Activities) CreateJob(ctx context.Context, in JobRequest) (JobRef, error) {
	ref, _, err := a.createJobOnNode(ctx, in)
	return ref, err
}

// renderJob builds the node's Job from the template the rollout prepared: the one given, under
// its hash, or the one stored under the hash (then kept in in.Template).
func (a *Activities) renderJob(ctx context.Context, in *JobRequest) (*batchv1.Job, error) {
	switch {
	case in.TemplateHash == "":
		return nil, invalidRequest("templateHash", "required: the hash of the template the rollout prepared")
	case in.Template != "" && !jobspec.TemplateHashMatches(in.Template, in.TemplateHash):
		return nil, invalidRequest("templateHash", "%q is not the hash of the template given (%s): a node runs only the template its rollout prepared, under that template's hash",
			in.TemplateHash, jobspec.TemplateHash(in.Template))
	case in.Template == "":
		text, err := a.storedTemplate(ctx, in.Namespace, in.TemplateHash)
		if err != nil {
			return nil, err
		}
		in.Template = text
	}
	job, err := jobspec.Build(in.Template, jobParams(*in))
	if err != nil {
		return nil, templateError(err)
	}
	return job, nil
}

// createJobOnNode is CreateJob, returning as well the Node it read to check the node (nil when
// it read none), for RunJob's finalize to patch without reading it again.
func (a *Activities) createJobOnNode(ctx context.Context, in JobRequest) (JobRef, *corev1.Node, error) {
	if err := a.Lineage.checkJob(ctx, in.TemplateHash, in.Parent); err != nil {
		return JobRef{}, nil, err
	}
	job, err := a.renderJob(ctx, &in)
	if err != nil {
		return JobRef{}, nil, err
	}
	policyNode, err := a.checkJobPolicy(ctx, in, job)
	if err != nil {
		return JobRef{}, nil, err
	}
	stampRequester(job, in.Requester)
	if !in.FirstTask || activity.GetInfo(ctx).Attempt > 1 {
		// A retry too: an attempt of RunJob may have finalized before it failed.
		return a.createUnlessFinalized(ctx, in, job)
	}
	if policyNode != nil {
		// The policy has just read the Node: that is the node check.
		ref, err := a.createJob(ctx, in, job)
		if err != nil {
			return JobRef{}, nil, err
		}
		ref.NodeUID = string(policyNode.UID)
		return ref, policyNode, nil
	}

	// The node check and the create go out together: ListNodes saw the node moments ago, so the
	// check nearly always passes, and waiting for it first would put a round trip between every
	// finished Job and the next one. In the rare race the Job just made is deleted again.
	type nodeCheck struct {
		node *corev1.Node
		err  error
	}
	checked := make(chan nodeCheck, 1)
	go func() {
		node, err := a.readNode(ctx, in.Node)
		checked <- nodeCheck{node, err}
	}()
	ref, createErr := a.createJob(ctx, in, job)
	node := <-checked
	switch {
	case apierrors.IsNotFound(node.err):
		if createErr == nil {
			// No Pod of it can run on a Node that does not exist, so there is nothing to await.
			sub := a.Jobs.Subscribe(ref.Namespace, ref.Name)
			_, err := a.removeJob(ctx, &ref, sub, metav1.DeletePropagationBackground)
			sub.Close()
			if err != nil {
				return JobRef{}, nil, err // the retry adopts the Job and deletes it again
			}
		}
		return JobRef{}, nil, nodeGone(in.Node)
	case node.err != nil:
		return JobRef{}, nil, kubeError(node.err, "get", fmt.Sprintf("node %q", in.Node))
	case createErr != nil:
		return JobRef{}, nil, createErr
	}
	ref.NodeUID = string(node.node.UID)
	return ref, node.node, nil
}

// createUnlessFinalized is CreateJob when an earlier run of the same create may have gone on to
// finish the node, its record lost: the Node, read first, says whether this run recorded an
// outcome there, and then nothing is created. The read goes to etcd, as the API server's watch
// cache may not have caught up with a finalize moments before.
func (a *Activities) createUnlessFinalized(ctx context.Context, in JobRequest, job *batchv1.Job) (JobRef, *corev1.Node, error) {
	node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		// An earlier attempt may have made the Job before its reply was lost. NodeGone tells
		// the workflow that no Job exists, so one of this run's is deleted here: no Pod of it
		// can run on a Node that does not exist, and our finalizer would keep it forever.
		ref := JobRef{Namespace: in.Namespace, Name: job.Name, RunID: in.RunID, Node: in.Node}
		sub := a.Jobs.Subscribe(ref.Namespace, ref.Name)
		_, err := a.removeJob(ctx, &ref, sub, metav1.DeletePropagationBackground)
		sub.Close()
		if err != nil {
			return JobRef{}, nil, err // the retry looks again
		}
		return JobRef{}, nil, nodeGone(in.Node)
	}
	if err != nil {
		return JobRef{}, nil, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
	}
	if in.RunID != "" && node.Annotations[jobspec.NodeRunKey(in.Rollout)] == in.RunID {
		outcome := api.OutcomeFailed // the marker was edited since: what the run found is unknown
		if _, o, ok := jobspec.ParseNodeMarker(node.Annotations[jobspec.NodeMarkerKey(in.Rollout)]); ok {
			outcome = api.Outcome(o)
		}
		return JobRef{Namespace: in.Namespace, Name: job.Name, RunID: in.RunID, Node: in.Node, NodeUID: string(node.UID), Finalized: outcome}, nil, nil
	}
	ref, err := a.createJob(ctx, in, job)
	if err != nil {
		return JobRef{}, nil, err
	}
	ref.NodeUID = string(node.UID)
	return ref, node, nil
}

func nodeGone(node string) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("node %q does not exist (deleted before its Job was created)", node), api.ErrNodeGone, nil)
}

// activeDeadlineMargin puts the Job's own activeDeadlineSeconds (a backstop for when no worker
// watches) after WaitJob's deadline, so that WaitJob, not the Job controller, ends a Job that
// ran too long: it reads why the Pod had not finished before the deletion takes the Pod.
const activeDeadlineMargin = 60

func activeDeadline(jobTimeoutSeconds int64) int64 {
	if jobTimeoutSeconds <= 0 {
		return 0
	}
	return jobTimeoutSeconds + activeDeadlineMargin
}

// readNode reads the named Node from the API server's watch cache, which costs no etcd read,
// and confirms a NotFound there with a quorum read, as the cache may lag.
func (a *Activities) readNode(ctx context.Context, name string) (*corev1.Node, error) {
	nodes := a.Kube.CoreV1().Nodes()
	node, err := nodes.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
	if apierrors.IsNotFound(err) {
		node, err = nodes.Get(ctx, name, metav1.GetOptions{})
	}
	return node, err
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
		api.ErrForeignObject, nil)
}

func jobRef(job *batchv1.Job, node string) JobRef {
	return JobRef{
		Namespace: job.Namespace,
		Name:      job.Name,
		UID:       string(job.UID),
		RunID:     job.Annotations[jobspec.AnnotationRunID],
		Node:      node,
		CreatedAt: job.CreationTimestamp.Time,
	}
}

const (
	// interimGrace is how long a Job may show FailureTarget or SuccessCriteriaMet without the
	// terminal condition that follows once its Pods stop. Past it the Pods are taken to be stuck
	// terminating (a kubelet that stopped answering) and the Job is deleted. Five minutes is
	// what node operators allow a Pod's graceful stop before they force the issue.
	interimGrace = 5 * time.Minute
)

// WaitJob waits on the shared informer until the Job has ended AND none of its Pods is running
// or terminating, so that the node is free when it returns. A Job ends by its terminal condition
// (Complete, Failed), by deletion (by someone else: the wait deletes it and awaits its Pods, then
// reports JobDeleted, or NodeGone if its Node is gone), by its deadline or its Node's deletion
// (the Job is deleted with Foreground propagation and its Pods awaited; a deleted Node's Pods
// for at most NodeGonePodWait), or by a
// FailureTarget or SuccessCriteriaMet that stays without its terminal condition for interimGrace
// (the Job is deleted and its Pods awaited; reason TerminationStuck). A Job kept by our
// finalizer after a deletion (its TTL ran while no one watched) reports how it really ended.
// It heartbeats throughout; a retried attempt (after a worker crash) resumes on the same Job
// with the same deadline.
//
// Every way the Job can end is a JobEnd, never an error. So every error WaitJob returns leaves
// a Job that MAY STILL RUN, and the caller must DeleteJob it before letting the node go. The
// non-retryable ones are ErrForbidden (reading the Job, its Node or its Pods, deleting it or
// removing our finalizer was refused), ErrInvalidRequest and ErrAdmissionDenied (the delete or
// the finalizer patch was refused); retryable errors that outlast the retry policy also leave
// the Job as it was.
func (a *Activities) WaitJob(ctx context.Context, in WaitJobInput) (JobEnd, error) {
	return a.waitJob(ctx, in, nil)
}

// WatchJob is WaitJob for at most in.ForSeconds: it returns the Job's end when the Job ends
// within that time, and Running otherwise, leaving the rest of the wait to WaitJob. Run as a
// local activity in the node's first workflow task it lets a short Job cost its node one
// workflow task instead of two plus an activity. On its way to an end it may delete the Job
// (deadline, Node gone, stuck termination) and wait for its Pods, however long that takes.
func (a *Activities) WatchJob(ctx context.Context, in WatchJobInput) (JobWatch, error) {
	stop := time.NewTimer(time.Duration(in.ForSeconds) * time.Second)
	defer stop.Stop()
	end, err := a.waitJob(ctx, in.WaitJobInput, stop.C)
	if errors.Is(err, errStillRunning) {
		return JobWatch{Running: true}, nil
	}
	return JobWatch{End: end}, err
}

// errStillRunning is how waitJob says that stop came before the Job's end.
var errStillRunning = errors.New("the Job is still running")

// waitJob is WaitJob's loop; a tick on stop before the Job has ended returns errStillRunning.
func (a *Activities) waitJob(ctx context.Context, in WaitJobInput, stop <-chan time.Time) (JobEnd, error) {
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
	// No heartbeat at the start: each one is a persisted update on the server, and most Jobs end
	// before the first tick. The server times the heartbeat timeout from the activity's start
	// when none came, so a crashed worker is noticed as soon, and a retry needs no details (it
	// finds the Job by its name again).

	w := jobWait{a: a, ref: ref, sub: sub}
	var podPoll <-chan time.Time
	listPods := true // whether an ended Job's Pods are due to be listed
	for {
		st, err := w.check(ctx)
		if err != nil {
			return JobEnd{}, err
		}
		switch st.kind {
		case jobEnded:
			stopped := podsStopped(st.job, a.TrustJobPodCounts)
			if !stopped && listPods {
				// Before Kubernetes 1.31 Complete and Failed come while Pods may still stop, and
				// the Job controller's counts of a finished Job are not to be trusted: only a
				// list tells.
				n, err := a.livePods(ctx, w.ref)
				if err != nil {
					return JobEnd{}, err
				}
				stopped, listPods = n == 0, false
				podPoll = time.After(a.PodPollInterval)
			}
			if stopped {
				if st.end.Outcome == api.OutcomeTimedOut {
					st.end.PodReason = w.podReason
				}
				if st.end.Outcome == api.OutcomeSucceeded && in.ReadRebootRequest {
					if st.end.RebootRequested, err = a.rebootRequested(ctx, ref); err != nil {
						return JobEnd{}, err
					}
				}
				return st.end, nil
			}
		case jobDeleted:
			// Whoever deleted it (an earlier attempt of this wait may have, for its Node's
			// deletion, and failed while awaiting the Pods), no Pod can run on a Node that is
			// gone: that is the node's outcome, and the Pods are awaited as for it.
			if gone, err := a.nodeGone(ctx, ref); err != nil {
				return JobEnd{}, err
			} else if gone {
				return w.teardown(ctx, w.nodeGone(), a.NodeGonePodWait, st.gone)
			}
			return w.teardown(ctx, w.deleted(st.what), 0, st.gone)
		case jobInterim:
			if st.end.Outcome == api.OutcomeTimedOut && !w.podRead {
				// The Job controller is deleting the Pods of a Job past activeDeadlineSeconds;
				// read what they were waiting for while they are still there.
				w.podReason, w.podRead = a.podSnapshot(ctx, w.ref), true
			}
			if since := st.since; !since.IsZero() && !a.Now().Before(since.Add(interimGrace)) {
				end := st.end
				end.Reason = api.ReasonTerminationStuck
				end.Message = fmt.Sprintf("Job %s/%s reached %s%s but its Pods did not stop within %s; deleted it",
					ref.Namespace, ref.Name, st.condition, conditionWords(st.end), interimGrace)
				return w.teardown(ctx, end, 0, false)
			}
		}
		// A Job that ended, or whose outcome is decided (its terminal condition waits for its
		// Pods to stop, and interimGrace bounds that), is past its deadline only for the Pods
		// it leaves, which the Job controller is already stopping.
		if st.kind == jobRunning && !deadline.IsZero() && !a.Now().Before(deadline) {
			if !w.podRead {
				w.podReason = a.podSnapshot(ctx, w.ref) // before the deletion takes the Pod
			}
			return w.teardown(ctx, JobEnd{
				Outcome: api.OutcomeTimedOut,
				Reason:  api.ReasonJobTimeout,
				Message: fmt.Sprintf("Job %s/%s did not finish within %ds of its creation; deleted it", ref.Namespace, ref.Name, in.TimeoutSeconds),
			}, 0, false)
		}
		select {
		case <-ctx.Done():
			return JobEnd{}, ctx.Err()
		case <-stop:
			return JobEnd{}, errStillRunning
		case <-sub.Changed():
			w.confirmed = false
		case <-heartbeat.C:
			activity.RecordHeartbeat(ctx, ref.Name)
		case <-deadlineC:
		case <-podPoll:
			listPods = true
		case <-nodeCheck.C:
			if gone, err := a.nodeGone(ctx, ref); err != nil {
				return JobEnd{}, err
			} else if gone {
				return w.teardown(ctx, w.nodeGone(), a.NodeGonePodWait, false)
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
	// interimSeen is when the wait first saw an interim condition without a transition time.
	interimSeen time.Time
	// podReason is why the Pod had not finished, read (podRead) before a timed-out Job's Pods
	// went.
	podReason string
	podRead   bool
}

type jobStateKind int

const (
	jobRunning jobStateKind = iota
	jobEnded                // terminal condition: end says how
	jobInterim              // FailureTarget or SuccessCriteriaMet, terminal condition pending
	jobDeleted              // deleted before it ended
)

// jobState is what one look at the Job found.
type jobState struct {
	kind      jobStateKind
	job       *batchv1.Job
	end       JobEnd                   // jobEnded, jobInterim
	condition batchv1.JobConditionType // jobInterim
	since     time.Time                // jobInterim: when the condition came
	what      string                   // jobDeleted: how it went
	gone      bool                     // jobDeleted: no longer stored
}

// check reads the Job's state from the cache, falling back to one GET when the cache lacks
// it.
func (w *jobWait) check(ctx context.Context) (jobState, error) {
	job, gone := w.sub.Last()
	if job != nil && w.ref.UID != "" && string(job.UID) != w.ref.UID {
		job = nil // another Job under our name: ours is not in the cache
	}
	if job != nil {
		return w.classify(job, gone), nil
	}
	if w.confirmed {
		return jobState{kind: jobRunning}, nil
	}
	if !gone && !w.ref.CreatedAt.IsZero() && w.a.Now().Sub(w.ref.CreatedAt) < informerGrace {
		// Just created: the informer delivers it in moments, and its event wakes the wait.
		// A GET now would be one polling read per node; past the grace it is a real check.
		return jobState{kind: jobRunning}, nil
	}
	fresh, err := w.a.Kube.BatchV1().Jobs(w.ref.Namespace).Get(ctx, w.ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return jobState{kind: jobDeleted, what: "was deleted", gone: true}, nil
	case err != nil:
		return jobState{}, kubeError(err, "get", fmt.Sprintf("job %s/%s", w.ref.Namespace, w.ref.Name))
	case w.ref.UID != "" && string(fresh.UID) != w.ref.UID:
		return jobState{kind: jobDeleted, what: "was deleted (another Job now has its name)", gone: true}, nil
	}
	st := w.classify(fresh, false)
	if st.kind == jobRunning {
		w.confirmed = true
	}
	return st, nil
}

// classify reads one state of the Job; gone says that the informer saw it deleted.
func (w *jobWait) classify(job *batchv1.Job, gone bool) jobState {
	end, decided := w.a.jobEnd(job)
	if terminal, at := jobspec.Terminal(job.Status); terminal {
		// Our finalizer keeps a finished Job that was then deleted (its TTL, a person tidying
		// up): that is how it ended. A failure that came after the deletion began was caused
		// by it.
		if del := job.DeletionTimestamp; del != nil && end.Outcome != api.OutcomeSucceeded && at.After(del.Time) {
			return jobState{kind: jobDeleted, what: "was deleted"}
		}
		return jobState{kind: jobEnded, job: job, end: end}
	}
	if gone || job.DeletionTimestamp != nil {
		return jobState{kind: jobDeleted, what: "was deleted", gone: gone}
	}
	if c := jobspec.Interim(job.Status); c != nil && decided {
		since := c.LastTransitionTime.Time
		if since.IsZero() {
			if w.interimSeen.IsZero() {
				w.interimSeen = w.a.Now()
			}
			since = w.interimSeen
		}
		return jobState{kind: jobInterim, job: job, end: end, condition: c.Type, since: since}
	}
	return jobState{kind: jobRunning, job: job}
}

// teardown drops our finalizer, deletes the Job (Foreground) and waits until it and its Pods
// are gone (for at most bound, if set), then reports end as of that moment. gone says the Job
// is known to be no longer stored, so only its Pods are left to wait for.
func (w *jobWait) teardown(ctx context.Context, end JobEnd, bound time.Duration, gone bool) (JobEnd, error) {
	ours := true
	if !gone {
		var err error
		if ours, err = w.a.removeJob(ctx, &w.ref, w.sub, metav1.DeletePropagationForeground); err != nil {
			return JobEnd{}, err
		}
	}
	if ours {
		remaining, err := w.a.awaitJobGone(ctx, w.ref, w.sub, bound, gone)
		if err != nil {
			return JobEnd{}, err
		}
		if remaining > 0 {
			end.Message += fmt.Sprintf("; %d Pod(s) of it had not gone after %s (the Node is gone, so none can run)", remaining, bound)
		}
	}
	end.FinishedAt = w.a.Now()
	if end.Outcome == api.OutcomeTimedOut {
		end.PodReason = w.podReason
	}
	return end, nil
}

func (w *jobWait) nodeGone() JobEnd {
	return JobEnd{
		Outcome: api.OutcomeNodeGone,
		Reason:  api.ReasonNodeDeleted,
		Message: fmt.Sprintf("node %q was deleted while Job %s/%s ran; deleted the Job", w.ref.Node, w.ref.Namespace, w.ref.Name),
	}
}

func (w *jobWait) deleted(what string) JobEnd {
	return JobEnd{
		Outcome: api.OutcomeFailed,
		Reason:  api.ReasonJobDeleted,
		Message: fmt.Sprintf("Job %s/%s %s before it finished", w.ref.Namespace, w.ref.Name, what),
	}
}

// jobEnd says how a Job's outcome was decided (by a terminal or an interim condition);
// decided is false while it runs or is suspended.
func (a *Activities) jobEnd(job *batchv1.Job) (end JobEnd, decided bool) {
	phase, reason, message := jobspec.Interpret(job.Status)
	switch phase {
	case jobspec.PhaseSucceeded:
		end.Outcome = api.OutcomeSucceeded
	case jobspec.PhaseFailed:
		end.Outcome = api.OutcomeFailed
		if reason == batchv1.JobReasonDeadlineExceeded {
			end.Outcome = api.OutcomeTimedOut
		}
	default:
		return JobEnd{}, false
	}
	end.Reason, end.Message, end.FinishedAt = reason, message, finishedAt(job, a.Now)
	if end.Outcome == api.OutcomeSucceeded && reason == batchv1.JobReasonCompletionsReached {
		// The Job controller's words for a plain success say no more than the outcome, and a
		// node's history would carry them three times (its marker, its result, the parent's
		// copy of it): about 260 bytes of every node's history.
		end.Reason, end.Message = "", ""
	}
	return end, true
}

// conditionWords is " (reason: message)" of a Job's deciding condition, or less when the
// condition's words were dropped (jobEnd).
func conditionWords(end JobEnd) string {
	switch {
	case end.Reason != "" && end.Message != "":
		return " (" + end.Reason + ": " + end.Message + ")"
	case end.Reason != "" || end.Message != "":
		return " (" + end.Reason + end.Message + ")"
	}
	return ""
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

// nodeGone says whether the Job's node no longer exists: its Pod can never finish, so the Job
// is deleted rather than left to time out.
func (a *Activities) nodeGone(ctx context.Context, ref JobRef) (bool, error) {
	if ref.Node == "" {
		return false, nil
	}
	_, err := a.readNode(ctx, ref.Node)
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		return false, kubeError(err, "get", fmt.Sprintf("node %q", ref.Node))
	default:
		// A failed check is no evidence either way; the next interval tries again.
		activity.GetLogger(ctx).Warn("checking the Job's node", "node", ref.Node, "error", err)
		return false, nil
	}
}

// jobParams are the fields of a node's Job (its own, or a step's) that come from the request.
func jobParams(in JobRequest) jobspec.JobParams {
	params := jobspec.JobParams{
		Rollout:                 in.Rollout,
		Namespace:               in.Namespace,
		Node:                    in.Node,
		RunID:                   in.RunID,
		TemplateHash:            in.TemplateHash,
		ActiveDeadlineSeconds:   activeDeadline(in.JobTimeoutSeconds),
		TTLSecondsAfterFinished: in.TTLSecondsAfterFinished,
	}
	if o := in.Owner; o != nil {
		params.Owner = &metav1.OwnerReference{APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name, UID: types.UID(o.UID)}
	}
	return params
}
