package activities

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"go.temporal.io/sdk/activity"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

const (
	// EventNamespace holds the Events recorded on Nodes (cluster-scoped objects).
	EventNamespace = metav1.NamespaceDefault
	// LogTailLines and LogTailBytes bound the failed Pod's log kept in the result.
	LogTailLines = 100
	LogTailBytes = 4096
	// maxEventMessage keeps Event messages readable in kubectl describe.
	maxEventMessage = 1024
)

// FinalizeJob records the node's outcome (Node annotation and Event), collects what a failed
// or timed-out Job's Pod says about it, lets go of the Job (our finalizer comes off once the
// marker is recorded) and deletes or keeps it per KeepJobs. Each step is idempotent, so a
// retried attempt repeats harmlessly.
func (a *Activities) FinalizeJob(ctx context.Context, in FinalizeInput) (FinalizeResult, error) {
	// The outcome on the Node decides what a re-run skips: only a node of a Rollout records one.
	if err := a.Lineage.checkCleanUp(ctx, in.TemplateHash, in.Job); err != nil {
		return FinalizeResult{}, err
	}
	var res FinalizeResult
	failed := in.End.Outcome == api.OutcomeFailed || in.End.Outcome == api.OutcomeTimedOut
	if failed && in.Job != nil {
		// Before any deletion: Background propagation takes the Pods with the Job.
		var err error
		if res, err = a.diagnose(ctx, *in.Job); err != nil {
			return FinalizeResult{}, err
		}
	}
	if res.PodReason == "" {
		res.PodReason = in.End.PodReason // read by WaitJob before the Pod was deleted
	}
	if in.Job == nil || in.Job.NodeUID == "" || in.Job.UID == "" || in.End.Outcome == api.OutcomeNodeGone {
		return res, a.finalizeInOrder(ctx, in, res)
	}

	// The Node existed when the Job was created (CreateJob read its UID), so the three writes are
	// independent; sent together they cost one round trip on the way to the next Job instead of
	// three. Should the Node have gone since, the patch finds nothing and the Event is harmless.
	// The Job's deletion waits for our finalizer to come off, which happens once the marker is
	// recorded: until then the Job holds the outcome.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: in.Node, UID: types.UID(in.Job.NodeUID)}}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { _, errs[0] = a.markNode(ctx, in) })
	wg.Go(func() { errs[1] = a.recordEvent(ctx, in, node, res) })
	if !keepJob(in.KeepJobs, in.End.Outcome) {
		wg.Go(func() { errs[2] = a.deleteJob(ctx, *in.Job, metav1.DeletePropagationBackground) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return FinalizeResult{}, err
	}
	if err := a.releaseJob(ctx, *in.Job); err != nil {
		return FinalizeResult{}, err
	}
	recordOutcome(ctx, in)
	return res, nil
}

// releaseJob removes our finalizer from the Job, which lets a deleted Job go and a kept one be
// removed by its TTL.
func (a *Activities) releaseJob(ctx context.Context, ref JobRef) error {
	sub := a.Jobs.Subscribe(ref.Namespace, ref.Name)
	defer sub.Close()
	return a.dropFinalizer(ctx, ref, sub)
}

// finalizeInOrder is FinalizeJob's path when the Node may be gone: the marker patch finds out,
// and the Event is recorded only on a Node that exists.
func (a *Activities) finalizeInOrder(ctx context.Context, in FinalizeInput, res FinalizeResult) error {
	node, err := a.markNode(ctx, in)
	if err != nil {
		return err
	}
	if node != nil {
		if err := a.recordEvent(ctx, in, node, res); err != nil {
			return err
		}
	}
	if in.Job != nil {
		if keepJob(in.KeepJobs, in.End.Outcome) {
			err = a.releaseJob(ctx, *in.Job)
		} else {
			ref := *in.Job
			sub := a.Jobs.Subscribe(ref.Namespace, ref.Name)
			_, err = a.removeJob(ctx, &ref, sub, metav1.DeletePropagationBackground)
			sub.Close()
		}
		if err != nil {
			return err
		}
	}
	recordOutcome(ctx, in)
	return nil
}

// keepJob applies the KeepJobs policy; anything unrecognised keeps failures, the default.
func keepJob(k api.KeepJobs, o api.Outcome) bool {
	switch k {
	case api.KeepAlways:
		return true
	case api.KeepNever:
		return false
	default:
		return o == api.OutcomeFailed || o == api.OutcomeTimedOut
	}
}

// markNode writes the outcome marker that a later rollout of the same template reads to skip the
// node. It returns the Node, or nil when the Node no longer exists.
func (a *Activities) markNode(ctx context.Context, in FinalizeInput) (*corev1.Node, error) {
	nodes := a.Kube.CoreV1().Nodes()
	if in.End.Outcome == api.OutcomeSkipped {
		// The node already carries a marker for this template; leave it exactly as it is.
		node, err := nodes.Get(ctx, in.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return node, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
	}
	// The resource version makes the patch conditional: the previous template recorded is the
	// one the marker it replaces named.
	patchMarker := func(current *corev1.Node) (*corev1.Node, error) {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": current.ResourceVersion,
			"annotations":     a.markerAnnotations(current, in),
		}})
		if err != nil {
			return nil, err
		}
		return nodes.Patch(ctx, in.Node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	}
	var node *corev1.Node
	var err error
	if in.nodeAtCreate != nil {
		// Moments after the create the Node has most often not changed: no read on the way to
		// the next Job. If it has, the patch is refused and the Node is read below.
		node, err = patchMarker(in.nodeAtCreate)
	}
	if in.nodeAtCreate == nil || apierrors.IsConflict(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current, err := nodes.Get(ctx, in.Node, metav1.GetOptions{})
			if err != nil {
				return err
			}
			node, err = patchMarker(current)
			return err
		})
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, kubeError(err, "patch", fmt.Sprintf("node %q", in.Node))
	}
	return node, nil
}

// finalizingRun is the NodeRollout run that finalizes the node, if known.
func finalizingRun(in FinalizeInput) string {
	if in.RunID == "" && in.Job != nil {
		return in.Job.RunID
	}
	return in.RunID
}

// eventReasons names each outcome's Event.
var eventReasons = map[api.Outcome]string{
	api.OutcomeSucceeded: "RolloutSucceeded",
	api.OutcomeFailed:    "RolloutFailed",
	api.OutcomeTimedOut:  "RolloutTimedOut",
	api.OutcomeSkipped:   "RolloutSkipped",
	api.OutcomeNodeGone:  "RolloutNodeGone",
	api.OutcomeAborted:   "RolloutAborted",

	api.OutcomeDrainTimedOut: "RolloutDrainTimedOut",
	api.OutcomeUnhealthy:     "RolloutUnhealthy",

	api.OutcomeRebootTimedOut: "RolloutRebootTimedOut",
	api.OutcomeCheckFailed:    "RolloutCheckFailed",
	api.OutcomeBlocked:        "RolloutBlocked",
}

// jobOnly says the finalize records a Job's success whose node's maintenance goes on: not yet
// the node's outcome.
func jobOnly(in FinalizeInput) bool {
	return in.StepsFollow && in.End.Outcome == api.OutcomeSucceeded
}

// recordEvent puts the outcome where `kubectl describe node` shows it.
func (a *Activities) recordEvent(ctx context.Context, in FinalizeInput, node *corev1.Node, diag FinalizeResult) error {
	reason := eventReasons[in.End.Outcome]
	if reason == "" {
		reason = "RolloutFinished"
	}
	what := string(in.End.Outcome)
	if jobOnly(in) {
		reason, what = "RolloutJobSucceeded", "the Job succeeded; the node's maintenance goes on"
	}
	eventType := corev1.EventTypeWarning
	if in.End.Outcome == api.OutcomeSucceeded || in.End.Outcome == api.OutcomeSkipped {
		eventType = corev1.EventTypeNormal
	}
	msg := fmt.Sprintf("rollout %s: %s", in.Rollout, what)
	if in.Requester != "" {
		msg = fmt.Sprintf("rollout %s (requested by %s): %s", in.Rollout, in.Requester, what)
	}
	if in.Job != nil {
		msg += fmt.Sprintf(" (Job %s/%s)", in.Job.Namespace, in.Job.Name)
	}
	if in.End.Reason != "" {
		msg += ": " + in.End.Reason
	}
	if in.End.Message != "" {
		msg += ": " + in.End.Message
	}
	if diag.ExitCode != nil {
		msg += fmt.Sprintf("; exit code %d", *diag.ExitCode)
	}
	if diag.PodReason != "" {
		msg += "; Pod: " + diag.PodReason
	}
	if len(msg) > maxEventMessage {
		msg = strings.ToValidUTF8(msg[:maxEventMessage], "")
	}
	now := metav1.NewTime(a.Now())
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: eventName(in), Namespace: EventNamespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		},
		Reason:         reason,
		Message:        msg,
		Type:           eventType,
		Source:         corev1.EventSource{Component: FieldManager},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	_, err := a.Kube.CoreV1().Events(EventNamespace).Create(ctx, event, metav1.CreateOptions{FieldManager: FieldManager})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return kubeError(err, "create", fmt.Sprintf("events in namespace %q", EventNamespace))
}

// eventName is the same for every attempt of one finalization, so retries do not duplicate the
// Event, and differs between rollouts, runs and outcomes.
func eventName(in FinalizeInput) string {
	job := ""
	if in.Job != nil {
		job = in.Job.Namespace + "/" + in.Job.Name + "/" + in.Job.UID
	} else if run := finalizingRun(in); run != "" {
		// No Job tells the runs apart (a drain that timed out, a node found unhealthy, a skip):
		// the run does, or a later run's Event would be taken for an earlier one's.
		job = "run/" + run
	}
	sum := sha256.Sum256([]byte(strings.Join(
		[]string{in.Rollout, in.Node, in.TemplateHash, job, string(in.End.Outcome)}, "\x00")))
	prefix := strings.ToLower(in.Node)
	if len(prefix) > 200 {
		prefix = strings.TrimRight(prefix[:200], ".-")
	}
	return fmt.Sprintf("%s.%x", prefix, sum[:8])
}

// diagnose reads why the Job failed from its newest failed Pod (or, when none failed, such as a
// Job deleted at its deadline, its newest Pod): exit code, termination message and a log tail.
func (a *Activities) diagnose(ctx context.Context, job JobRef) (FinalizeResult, error) {
	pods, err := a.Kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{batchv1.JobNameLabel: job.Name}.String(),
	})
	if err != nil {
		return FinalizeResult{}, kubeError(err, "list", fmt.Sprintf("pods in namespace %q", job.Namespace))
	}
	pod := pickPod(pods.Items, job.UID)
	if pod == nil {
		return FinalizeResult{}, nil
	}
	var res FinalizeResult
	container, state, previous := failedContainer(pod)
	if state != nil {
		code := state.ExitCode
		res.ExitCode = &code
		res.TerminationMessage = state.Message
	}
	res.PodReason = podReason(pod)
	res.LogTail = a.logTailUnlessSecret(ctx, pod, container, previous)
	return res, nil
}

// logTailUnlessSecret is the log tail, unless the Pod reads Secrets and the policy does not
// let its log tail be kept: what such a Pod prints may be one of them, and the tail lands in
// the workflow history. Then the log is not even read, and the tail says why it is missing.
func (a *Activities) logTailUnlessSecret(ctx context.Context, pod *corev1.Pod, container string, previous bool) string {
	if refs := policy.SecretsRead(&pod.Spec); len(refs) > 0 && !a.Policy.LogTailWithSecrets(pod.Namespace) {
		names := make([]string, 0, len(refs))
		for _, r := range refs {
			if !slices.Contains(names, r.Name) {
				names = append(names, r.Name)
			}
		}
		return fmt.Sprintf("(log tail withheld: the Pod reads Secret(s) %s, and the worker's policy does not set logTailWithSecrets for namespace %s; read the log with kubectl logs %s -n %s -c %s)",
			strings.Join(names, ", "), pod.Namespace, pod.Name, pod.Namespace, container)
	}
	return a.logTail(ctx, pod, container, previous)
}

// maxPodReason keeps PodReason to a line or two.
const maxPodReason = 300

// podReason says why a Pod that has not ended never ran or never finished: its scheduling
// failure ("Unschedulable: 0/3 nodes are available..."), else the first waiting container's
// reason (init containers first: "ImagePullBackOff: Back-off pulling image...",
// "CreateContainerConfigError: secret \"x\" not found", "ContainerCreating"), else its phase.
// Empty for a Pod that ended: its exit code says more.
func podReason(pod *corev1.Pod) string {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return ""
	}
	join := func(reason, message string) string {
		s := reason
		if message != "" {
			s += ": " + message
		}
		if len(s) > maxPodReason {
			s = strings.ToValidUTF8(s[:maxPodReason], "")
		}
		return s
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return join(cmp.Or(c.Reason, "Unschedulable"), c.Message)
		}
	}
	for _, s := range append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...) {
		if w := s.State.Waiting; w != nil && w.Reason != "" {
			return join(w.Reason, w.Message)
		}
	}
	return string(cmp.Or(pod.Status.Phase, corev1.PodPending))
}

// podSnapshot reads why the Job's Pod has not finished (podReason of its newest Pod), for a
// Job about to be deleted; "NoPod" when the Job controller made none (its Events say why, e.g.
// a quota). Best effort: an error only leaves the reason out.
func (a *Activities) podSnapshot(ctx context.Context, job JobRef) string {
	selector := labels.Set{batchv1.JobNameLabel: job.Name}
	if job.UID != "" {
		selector = labels.Set{batchv1.ControllerUidLabel: job.UID}
	}
	pods, err := a.Kube.CoreV1().Pods(job.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		activity.GetLogger(ctx).Info("could not read the timed-out Job's Pods", "job", job.Namespace+"/"+job.Name, "error", err)
		return ""
	}
	// The Pod that had not ended is the one to explain; failed ones before it have exit codes.
	unfinished := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	pod := pickPod(unfinished, job.UID)
	if pod == nil {
		if len(pods.Items) == 0 {
			return "NoPod: the Job controller created no Pod (kubectl describe job shows why)"
		}
		return ""
	}
	return podReason(pod)
}

// pickPod returns the newest failed Pod of the Job, else its newest Pod.
func pickPod(pods []corev1.Pod, jobUID string) *corev1.Pod {
	var candidates []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if owner := metav1.GetControllerOf(p); jobUID != "" && owner != nil && string(owner.UID) != jobUID {
			continue // left over from an earlier Job with the same name
		}
		candidates = append(candidates, p)
	}
	newest := func(ps []*corev1.Pod) *corev1.Pod {
		if len(ps) == 0 {
			return nil
		}
		return slices.MaxFunc(ps, func(x, y *corev1.Pod) int {
			if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
				return c
			}
			return cmp.Compare(x.Name, y.Name)
		})
	}
	failedPods := slices.DeleteFunc(slices.Clone(candidates), func(p *corev1.Pod) bool { return p.Status.Phase != corev1.PodFailed })
	if p := newest(failedPods); p != nil {
		return p
	}
	return newest(candidates)
}

// failedContainer finds the container that failed (init containers first, since they run
// first): its name, its termination, and whether that termination is a previous instance of a
// restarted container (whose logs need Previous). Without a failure it names the first container.
func failedContainer(pod *corev1.Pod) (name string, state *corev1.ContainerStateTerminated, previous bool) {
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	var firstTerminated *corev1.ContainerStatus
	for i := range statuses {
		s := &statuses[i]
		if t := s.State.Terminated; t != nil {
			if t.ExitCode != 0 {
				return s.Name, t, false
			}
			if firstTerminated == nil {
				firstTerminated = s
			}
		} else if t := s.LastTerminationState.Terminated; t != nil && t.ExitCode != 0 {
			return s.Name, t, true
		}
	}
	if firstTerminated != nil {
		return firstTerminated.Name, firstTerminated.State.Terminated, false
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Name, nil, false
	}
	return "", nil, false
}

// logTail fetches the end of the container's log. Logs come from the kubelet, which may be
// unreachable or have rotated them away; their absence never fails the finalization.
//
// The request asks for the last LogTailLines lines only: LimitBytes would keep the FIRST bytes
// of those lines (the kubelet stops writing once it has sent that many), losing the last lines,
// where the error is. The lines are read as a stream of which only the last LogTailBytes are
// kept, so a log of very long lines costs no more memory.
func (a *Activities) logTail(ctx context.Context, pod *corev1.Pod, container string, previous bool) string {
	lines := int64(LogTailLines)
	stream, err := a.Kube.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{
		Container: container, Previous: previous, TailLines: &lines,
	}).Stream(ctx)
	if err != nil {
		activity.GetLogger(ctx).Info("no log tail for the failed Pod", "pod", pod.Namespace+"/"+pod.Name, "error", err)
		return ""
	}
	defer stream.Close()
	raw, err := lastBytes(stream, LogTailBytes)
	if err != nil {
		activity.GetLogger(ctx).Info("log tail of the failed Pod cut short", "pod", pod.Namespace+"/"+pod.Name, "error", err)
	}
	return strings.ToValidUTF8(string(raw), "")
}

// lastBytes reads r to its end and returns its last n bytes (what it read before an error).
func lastBytes(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, 2*n)
	chunk := make([]byte, 32*1024)
	for {
		k, err := r.Read(chunk)
		buf = append(buf, chunk[:k]...)
		if len(buf) > n {
			buf = append(buf[:0], buf[len(buf)-n:]...)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
