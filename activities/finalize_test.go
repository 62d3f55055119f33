package activities

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func finalize(t *testing.T, a *Activities, in FinalizeInput) (FinalizeResult, error) {
	t.Helper()
	return execute[FinalizeResult](t, a, a.FinalizeJob, in)
}

func finalizeInput(job *batchv1.Job, outcome api.Outcome, keep api.KeepJobs) FinalizeInput {
	ref := refOf(job, "node-a")
	return FinalizeInput{
		Rollout: "kata", Node: "node-a", TemplateHash: testHash, Job: &ref,
		End:      JobEnd{Outcome: outcome, Reason: "Because", Message: "it did", FinishedAt: t0},
		KeepJobs: keep,
		RunID:    "run-1",
	}
}

func jobPod(job *batchv1.Job, name string, created time.Time, phase corev1.PodPhase, exitCode int32, message string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: job.Namespace, CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{batchv1.JobNameLabel: job.Name, batchv1.ControllerUidLabel: string(job.UID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID,
				Controller: new(true)}},
		},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "install", Image: "busybox"}}},
		Status: corev1.PodStatus{Phase: phase},
	}
	if phase == corev1.PodFailed || phase == corev1.PodSucceeded {
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "install", State: corev1.ContainerState{
			Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, Message: message, Reason: "Error"},
		}}}
	}
	return pod
}

func getEvents(t *testing.T, cs *fake.Clientset) []corev1.Event {
	t.Helper()
	events, err := cs.CoreV1().Events(EventNamespace).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	return events.Items
}

func TestFinalizeJobSucceeded(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", map[string]string{"keep": "me"}), job)

	res, err := finalize(t, a, finalizeInput(job, api.OutcomeSucceeded, api.KeepFailed))
	require.NoError(t, err)
	require.Equal(t, FinalizeResult{}, res)
	// Without the informer's cache, the finalizer's removal reads the Job first.
	require.Equal(t, []string{"get nodes", "patch nodes", "create events", "get jobs", "patch jobs", "delete jobs"}, actions(cs))

	patch := cs.Actions()[1].(k8stesting.PatchActionImpl)
	require.Equal(t, types.MergePatchType, patch.PatchType)
	require.Equal(t, FieldManager, patch.PatchOptions.FieldManager)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"keep": "me", jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(testHash, "succeeded"),
		jobspec.NodeRunKey("kata"): "run-1", jobspec.NodeFinishedKey("kata"): a.Now().UTC().Format(time.RFC3339Nano)},
		node.Annotations, "the run that finalized is recorded next to the marker, and when")

	events := getEvents(t, cs)
	require.Len(t, events, 1)
	ev := events[0]
	require.Equal(t, corev1.EventTypeNormal, ev.Type)
	require.Equal(t, "RolloutSucceeded", ev.Reason)
	require.Equal(t, corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "uid-node-node-a"}, ev.InvolvedObject)
	require.Contains(t, ev.Message, "kata")
	require.Contains(t, ev.Message, job.Name)
	requireBackgroundDelete(t, cs, job.Name)
}

// keepDeletedJobs makes the fake keep deleted Jobs, as the API server does while our finalizer
// is on them.
func keepDeletedJobs(cs *fake.Clientset) {
	cs.PrependReactor("delete", "jobs", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
}

func TestFinalizeJobWritesAtOnceWhenTheNodeIsKnown(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	keepDeletedJobs(cs)
	a := startedActivities(t, cs)
	cs.ClearActions()
	in := finalizeInput(job, api.OutcomeSucceeded, api.KeepFailed)
	in.Job.NodeUID = "uid-node-node-a" // CreateJob read it

	res, err := finalize(t, a, in)
	require.NoError(t, err)
	require.Equal(t, FinalizeResult{}, res)
	got := actions(cs)
	require.Len(t, got, 5)
	require.ElementsMatch(t, []string{"get nodes", "patch nodes", "create events", "delete jobs"}, got[:4])
	require.Equal(t, "patch jobs", got[4], "our finalizer comes off once the marker is recorded; the informer's copy saves a GET")
	stored, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, stored.Finalizers)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(testHash, "succeeded"), node.Annotations[jobspec.NodeMarkerKey("kata")])
	events := getEvents(t, cs)
	require.Len(t, events, 1)
	require.Equal(t, corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: "node-a", UID: "uid-node-node-a"}, events[0].InvolvedObject)
	requireBackgroundDelete(t, cs, job.Name)

	// A failed Job's Pod is read before the writes, which then go out together.
	failedJob := ourJob(t, testRequest("node-b"))
	cs = fake.NewClientset(testNode("node-b", nil), failedJob,
		jobPod(failedJob, "p", t0, corev1.PodFailed, 2, "no space"))
	keepDeletedJobs(cs)
	a = startedActivities(t, cs)
	cs.ClearActions()
	in = finalizeInput(failedJob, api.OutcomeFailed, api.KeepNever)
	in.Node, in.Job.Node, in.Job.NodeUID = "node-b", "node-b", "uid-node-node-b"
	res, err = finalize(t, a, in)
	require.NoError(t, err)
	require.Equal(t, new(int32(2)), res.ExitCode)
	got = actions(cs)
	require.Equal(t, []string{"list pods", "get pods/log"}, got[:2])
	require.ElementsMatch(t, []string{"get nodes", "patch nodes", "create events", "delete jobs"}, got[2:6])
	require.Equal(t, []string{"patch jobs"}, got[6:])
	require.Contains(t, getEvents(t, cs)[0].Message, "exit code 2")
}

func TestFinalizeJobFailedCollectsPodDiagnosis(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	otherJob := ourJob(t, testRequest("node-b"))
	cs, a := newCluster(testNode("node-a", nil), job,
		jobPod(job, "old", t0, corev1.PodFailed, 1, "first try"),
		jobPod(job, "new", t0.Add(time.Minute), corev1.PodFailed, 3, "disk full"),
		jobPod(job, "newest-running", t0.Add(2*time.Minute), corev1.PodRunning, 0, ""),
		jobPod(otherJob, "elsewhere", t0.Add(time.Hour), corev1.PodFailed, 9, "not this job"),
	)

	res, err := finalize(t, a, finalizeInput(job, api.OutcomeFailed, api.KeepFailed))
	require.NoError(t, err)
	require.Equal(t, FinalizeResult{LogTail: "fake logs", ExitCode: new(int32(3)), TerminationMessage: "disk full"}, res)
	require.Equal(t, []string{"list pods", "get pods/log", "get nodes", "patch nodes", "create events", "get jobs", "patch jobs"}, actions(cs),
		"a failed Job is kept, without our finalizer")

	logs := cs.Actions()[1].(k8stesting.GenericActionImpl)
	opts := logs.Value.(*corev1.PodLogOptions)
	require.Equal(t, "install", opts.Container)
	require.EqualValues(t, 100, *opts.TailLines)
	require.Nil(t, opts.LimitBytes, "LimitBytes would keep the start of the tail, not its end")

	events := getEvents(t, cs)
	require.Len(t, events, 1)
	require.Equal(t, corev1.EventTypeWarning, events[0].Type)
	require.Equal(t, "RolloutFailed", events[0].Reason)
	require.Contains(t, events[0].Message, "exit code 3")
}

func TestFinalizeJobLogErrorIsIgnored(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", nil), job, jobPod(job, "p", t0, corev1.PodFailed, 2, ""))
	cs.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "log" {
			return false, nil, nil
		}
		return true, nil, errors.New("the kubelet is unreachable")
	})
	res, err := finalize(t, a, finalizeInput(job, api.OutcomeTimedOut, api.KeepNever))
	require.NoError(t, err)
	require.Equal(t, FinalizeResult{ExitCode: new(int32(2))}, res)
	requireBackgroundDelete(t, cs, job.Name)
	require.Equal(t, "RolloutTimedOut", getEvents(t, cs)[0].Reason)
}

func TestFinalizeJobKeepJobs(t *testing.T) {
	for _, tc := range []struct {
		keep    api.KeepJobs
		outcome api.Outcome
		deleted bool
	}{
		{api.KeepNever, api.OutcomeSucceeded, true},
		{api.KeepNever, api.OutcomeFailed, true},
		{api.KeepNever, api.OutcomeTimedOut, true},
		{api.KeepFailed, api.OutcomeSucceeded, true},
		{api.KeepFailed, api.OutcomeFailed, false},
		{api.KeepFailed, api.OutcomeTimedOut, false},
		{api.KeepFailed, api.OutcomeNodeGone, true},
		{api.KeepAlways, api.OutcomeSucceeded, false},
		{api.KeepAlways, api.OutcomeFailed, false},
		{api.KeepAlways, api.OutcomeTimedOut, false},
		{"", api.OutcomeFailed, false}, // unset means failed
		{"", api.OutcomeSucceeded, true},
	} {
		t.Run(string(tc.keep)+"/"+string(tc.outcome), func(t *testing.T) {
			job := ourJob(t, testRequest("node-a"))
			cs, a := newCluster(testNode("node-a", nil), job)
			_, err := finalize(t, a, finalizeInput(job, tc.outcome, tc.keep))
			require.NoError(t, err)
			_, err = cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
			require.Equal(t, tc.deleted, apierrors.IsNotFound(err), "err: %v", err)
			require.Equal(t, tc.deleted, countActions(cs, "delete", "jobs") == 1)
		})
	}
}

func TestFinalizeJobRetriesConflictOnNode(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", nil), job)
	conflicts := 2
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), "node-a", errors.New("the object has been modified"))
	})
	_, err := finalize(t, a, finalizeInput(job, api.OutcomeSucceeded, api.KeepNever))
	require.NoError(t, err)
	require.Equal(t, 3, countActions(cs, "patch", "nodes"))
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(testHash, "succeeded"), node.Annotations[jobspec.NodeMarkerKey("kata")])
}

func TestFinalizeJobForbiddenIsNotRetried(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", nil), job)
	failOn(cs, "patch", "nodes", forbidden("nodes"))
	_, err := finalize(t, a, finalizeInput(job, api.OutcomeSucceeded, api.KeepNever))
	appErr := requireAppError(t, err, api.ErrForbidden, true)
	require.Contains(t, appErr.Error(), "patch")
	require.Equal(t, []string{"get nodes", "patch nodes"}, actions(cs))
}

func TestFinalizeJobNodeGone(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(job)
	_, err := finalize(t, a, finalizeInput(job, api.OutcomeNodeGone, api.KeepFailed))
	require.NoError(t, err)
	require.Equal(t, []string{"get nodes", "get jobs", "patch jobs", "delete jobs"}, actions(cs), "no Event about a Node that is gone")
}

func TestFinalizeJobWithoutJob(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	in := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: testHash,
		End: JobEnd{Outcome: api.OutcomeFailed, Reason: api.ReasonAborted}, KeepJobs: api.KeepNever}
	res, err := finalize(t, a, in)
	require.NoError(t, err)
	require.Equal(t, FinalizeResult{}, res)
	require.Equal(t, []string{"get nodes", "patch nodes", "create events"}, actions(cs))
}

func TestFinalizeJobSkippedKeepsMarker(t *testing.T) {
	marker := doneMarker(testHash)
	cs, a := newCluster(testNode("node-a", marker))
	in := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: testHash, End: JobEnd{Outcome: api.OutcomeSkipped}}
	_, err := finalize(t, a, in)
	require.NoError(t, err)
	require.Equal(t, []string{"get nodes", "create events"}, actions(cs))
	require.Equal(t, corev1.EventTypeNormal, getEvents(t, cs)[0].Type)
}

func TestFinalizeJobRetryDoesNotDuplicateEvent(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", nil), job)
	in := finalizeInput(job, api.OutcomeFailed, api.KeepFailed)
	_, err := finalize(t, a, in)
	require.NoError(t, err)
	_, err = finalize(t, a, in)
	require.NoError(t, err, "AlreadyExists on the Event is success")
	require.Len(t, getEvents(t, cs), 1)
	require.Equal(t, 2, countActions(cs, "create", "events"))

	in.Job.Name, in.Job.UID = "kata-node-a-other", "uid-other" // a later run of the same node
	_, err = finalize(t, a, in)
	require.NoError(t, err)
	require.Len(t, getEvents(t, cs), 2)
}

// TestFinalizeJobReleasesOurFinalizer: whether the Job is kept or deleted, our finalizer comes
// off after the marker is recorded, so a kept Job's TTL can remove it; a Job of older releases
// (no finalizer) needs no patch.
func TestFinalizeJobReleasesOurFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		keep      api.KeepJobs
		finalizer bool
		wantPatch bool
	}{
		{"kept", api.KeepAlways, true, true},
		{"deleted", api.KeepNever, true, true},
		{"made by an older release", api.KeepAlways, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := ourJob(t, testRequest("node-a"))
			if !tc.finalizer {
				job.Finalizers = nil
			}
			cs := fake.NewClientset(testNode("node-a", nil), job)
			keepDeletedJobs(cs)
			a := startedActivities(t, cs)
			cs.ClearActions()
			_, err := finalize(t, a, finalizeInput(job, api.OutcomeSucceeded, tc.keep))
			require.NoError(t, err)
			got := actions(cs)
			require.Equal(t, tc.wantPatch, slices.Contains(got, "patch jobs"), "%v", got)
			if tc.wantPatch {
				require.Less(t, slices.Index(got, "patch nodes"), slices.Index(got, "patch jobs"), "the marker first: %v", got)
			}
			stored, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
			require.NoError(t, err)
			require.NotContains(t, stored.Finalizers, jobspec.FinalizerOutcome)
		})
	}
}

// TestFinalizeJobSaysWhyThePodNeverRan: a timed-out Job's Pod that never started tells why
// (scheduling, a waiting container), in the result and the Node's Event; when WaitJob read it
// before the Pod went, that reading is used.
func TestFinalizeJobSaysWhyThePodNeverRan(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	unschedulable := jobPod(job, "p", t0, corev1.PodPending, 0, "")
	unschedulable.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}}
	configError := jobPod(job, "p", t0, corev1.PodPending, 0, "")
	configError.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `secret "driver-key" not found`}}}}
	creating := jobPod(job, "p", t0, corev1.PodPending, 0, "")
	creating.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "install", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		fromWait string
		want     string
	}{
		{"unschedulable", unschedulable, "", "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."},
		{"init container config", configError, "", `CreateContainerConfigError: secret "driver-key" not found`},
		{"still creating", creating, "", "ContainerCreating"},
		{"Pod gone, read by WaitJob", nil, "ImagePullBackOff: Back-off pulling image", "ImagePullBackOff: Back-off pulling image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{testNode("node-a", nil), job}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			cs, a := newCluster(objs...)
			in := finalizeInput(job, api.OutcomeTimedOut, api.KeepNever)
			in.End.PodReason = tc.fromWait
			res, err := finalize(t, a, in)
			require.NoError(t, err)
			require.Equal(t, tc.want, res.PodReason)
			require.Contains(t, getEvents(t, cs)[0].Message, "Pod: "+tc.want)
		})
	}
}

// kubeletLogs makes the fake serve a container log the way the kubelet does: TailLines picks
// the last lines, then LimitBytes stops the output after that many bytes of them.
func kubeletLogs(cs *fake.Clientset, log string) {
	cs.PrependReactor("get", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "log" {
			return false, nil, nil
		}
		opts := action.(k8stesting.GenericActionImpl).Value.(*corev1.PodLogOptions)
		lines := strings.SplitAfter(log, "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if opts.TailLines != nil && int(*opts.TailLines) < len(lines) {
			lines = lines[len(lines)-int(*opts.TailLines):]
		}
		out := strings.Join(lines, "")
		if opts.LimitBytes != nil && int(*opts.LimitBytes) < len(out) {
			out = out[:*opts.LimitBytes]
		}
		return true, &runtime.Unknown{Raw: []byte(out)}, nil
	})
}

// TestFinalizeJobLogTailEndsWithTheLastLine: the log tail is the END of the log, where the
// error is, also when the last LogTailLines lines hold more than LogTailBytes.
func TestFinalizeJobLogTailEndsWithTheLastLine(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs, a := newCluster(testNode("node-a", nil), job, jobPod(job, "p", t0, corev1.PodFailed, 1, ""))
	var log strings.Builder
	for i := range 300 {
		fmt.Fprintf(&log, "step %03d: installing payload ............................................ ok\n", i)
	}
	log.WriteString("FATAL: checksum mismatch for kata-runtime.tar.zst\n")
	kubeletLogs(cs, log.String())
	res, err := finalize(t, a, finalizeInput(job, api.OutcomeFailed, api.KeepFailed))
	require.NoError(t, err)
	require.LessOrEqual(t, len(res.LogTail), LogTailBytes)
	require.True(t, strings.HasSuffix(res.LogTail, "FATAL: checksum mismatch for kata-runtime.tar.zst\n"),
		"the tail ends with the log's last line; got ...%q", res.LogTail[max(0, len(res.LogTail)-120):])
}

// TestFinalizeJobEventPerRunWithoutJob: two runs that end the node the same way without a Job
// (a drain timed out both times) each leave their Event; only a retry of one run is deduplicated.
func TestFinalizeJobEventPerRunWithoutJob(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	in := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: testHash, RunID: "run-1",
		End: JobEnd{Outcome: api.OutcomeDrainTimedOut, Reason: api.ErrDrainTimedOut, Message: "tenant/web-1 left"}}
	_, err := finalize(t, a, in)
	require.NoError(t, err)
	_, err = finalize(t, a, in)
	require.NoError(t, err)
	require.Len(t, getEvents(t, cs), 1, "a retry of the same run records one Event")

	in.RunID, in.End.Message = "run-2", "tenant/db-0 left" // the rollout run again later
	_, err = finalize(t, a, in)
	require.NoError(t, err)
	events := getEvents(t, cs)
	require.Len(t, events, 2, "the second run's Event is recorded, not taken for the first one's")
}

// TestFinalizeJobWithholdsTheLogTailOfAPodThatReadsSecrets: whatever a Pod that reads Secrets
// prints may be one of them, and the log tail lands in the workflow history, so it is not even
// fetched unless the policy's logTailWithSecrets allows it for the namespace; without a policy
// it is withheld too. The exit code and the termination message still say what happened.
func TestFinalizeJobWithholdsTheLogTailOfAPodThatReadsSecrets(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	secretVolume := func(p *corev1.Pod) {
		p.Spec.Volumes = []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other-sa-token"}}}}
	}
	secretEnv := func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "T", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}}
	}
	allowing := func(a *Activities) {
		p, err := policy.Parse([]byte("namespaces: {kube-system: {logTailWithSecrets: true, secrets: [\"*\"]}}\n"))
		require.NoError(t, err)
		a.Policy = p
	}
	for _, c := range []struct {
		name     string
		pod      func(*corev1.Pod)
		setup    func(*Activities)
		withheld bool
	}{
		{"a Secret volume, no policy", secretVolume, nil, true},
		{"a Secret in env, a policy silent on it", secretEnv, withPolicyOf(t, "namespaces: {kube-system: {secrets: [db]}}\n"), true},
		{"a Secret volume, allowed", secretVolume, allowing, false},
		{"no Secret", func(*corev1.Pod) {}, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := jobPod(job, "p", t0, corev1.PodFailed, 3, "disk full")
			c.pod(pod)
			cs, a := newCluster(testNode("node-a", nil), job, pod)
			if c.setup != nil {
				c.setup(a)
			}
			res, err := finalize(t, a, finalizeInput(job, api.OutcomeFailed, api.KeepFailed))
			require.NoError(t, err)
			require.Equal(t, int32(3), *res.ExitCode)
			require.Equal(t, "disk full", res.TerminationMessage)
			if !c.withheld {
				require.Equal(t, "fake logs", res.LogTail)
				return
			}
			require.NotContains(t, res.LogTail, "fake logs")
			require.Contains(t, res.LogTail, "withheld")
			require.Zero(t, countActions(cs, "get", "pods/log"), "the log is not even read")
		})
	}
}

func withPolicyOf(t *testing.T, text string) func(*Activities) {
	return func(a *Activities) {
		p, err := policy.Parse([]byte(text))
		require.NoError(t, err)
		a.Policy = p
	}
}

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

// A maintained node's Job's success is on the Node at once, but its Event says the Job
// succeeded and the maintenance goes on; the node's own success, recorded once its
// maintenance ended (no Job), is the RolloutSucceeded Event, a second one.
func TestMaintainedNodeTellsTheJobsSuccessFromItsOwn(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	in := finalizeInput(job, api.OutcomeSucceeded, api.KeepFailed)
	in.StepsFollow = true
	_, err := finalize(t, a, in)
	require.NoError(t, err)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(testHash, "succeeded"), node.Annotations[jobspec.NodeMarkerKey("kata")], "a repeated run finds the Job done")
	events := getEvents(t, cs)
	require.Len(t, events, 1)
	require.Equal(t, "RolloutJobSucceeded", events[0].Reason)
	require.Contains(t, events[0].Message, "the Job succeeded; the node's maintenance goes on")

	done := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: testHash, RunID: "run-1",
		End: JobEnd{Outcome: api.OutcomeSucceeded, Message: "Job x and the node's maintenance succeeded"}}
	_, err = finalize(t, a, done)
	require.NoError(t, err)
	events = getEvents(t, cs)
	require.Len(t, events, 2)
	reasons := []string{events[0].Reason, events[1].Reason}
	require.ElementsMatch(t, []string{"RolloutJobSucceeded", "RolloutSucceeded"}, reasons)
	node, err = cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(testHash, "succeeded"), node.Annotations[jobspec.NodeMarkerKey("kata")])
}
