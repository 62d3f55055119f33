package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func createJob(t *testing.T, a *Activities, in JobRequest) (JobRef, error) {
	t.Helper()
	return execute[JobRef](t, a, a.CreateJob, in)
}

func TestCreateJob(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	in := testRequest("node-a")
	in.Owner = &api.OwnerRef{APIVersion: "v1", Kind: "ConfigMap", Name: "kata", UID: "uid-owner"}

	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	name := jobspec.JobName("kata", "node-a", "run-1")
	require.Equal(t, JobRef{Namespace: testNamespace, Name: name, UID: "uid-" + name, RunID: "run-1", Node: "node-a", CreatedAt: t0,
		NodeUID: "uid-node-node-a"}, ref)
	require.ElementsMatch(t, []string{"get nodes", "create jobs"}, actions(cs), "the node check and the create go out together")

	for _, act := range cs.Actions() {
		switch act := act.(type) {
		case k8stesting.CreateActionImpl:
			require.Equal(t, FieldManager, act.CreateOptions.FieldManager)
		case k8stesting.GetActionImpl:
			require.Equal(t, "nodes", act.GetResource().Resource)
			require.Equal(t, "0", act.GetOptions.ResourceVersion, "served from the watch cache")
		}
	}
	job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "node-a", job.Spec.Template.Spec.NodeName)
	require.Equal(t, "kata", job.Labels[jobspec.LabelRollout])
	require.Equal(t, "run-1", job.Annotations[jobspec.AnnotationRunID])
	require.Equal(t, in.TemplateHash, job.Annotations[jobspec.AnnotationTemplateHash])
	require.Contains(t, job.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "kata", UID: types.UID("uid-owner")})
}

func TestCreateJobNodeGone(t *testing.T) {
	cs, a := newCluster()
	_, err := createJob(t, a, testRequest("node-a"))
	appErr := requireAppError(t, err, api.ErrNodeGone, true)
	require.Contains(t, appErr.Error(), `"node-a"`)
	// The cached read said NotFound and a quorum read confirmed it; the Job made meanwhile is
	// deleted again, our finalizer taken off.
	require.ElementsMatch(t, []string{"get nodes", "get nodes", "create jobs", "get jobs", "patch jobs", "delete jobs"}, actions(cs))
	require.Zero(t, countJobs(t, cs))
}

func TestCreateJobTrustsAQuorumReadOverTheCache(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	stampCreatedJobs(cs)
	// The watch cache has not seen the new Node yet.
	cs.PrependReactor("get", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.(k8stesting.GetActionImpl).GetOptions.ResourceVersion == "0" {
			return true, nil, apierrors.NewNotFound(corev1.Resource("nodes"), "node-a")
		}
		return false, nil, nil
	})
	ref, err := createJob(t, a, testRequest("node-a"))
	require.NoError(t, err)
	require.Equal(t, "uid-node-node-a", ref.NodeUID)
	require.ElementsMatch(t, []string{"get nodes", "get nodes", "create jobs"}, actions(cs))
	require.Equal(t, 1, countJobs(t, cs))
}

// A create that may repeat a run which finished the node reads the Node first, from etcd, and
// creates nothing when the Node records this run's outcome.
func TestCreateJobAfterALostTaskCreatesNothingForAFinalizedRun(t *testing.T) {
	in := testRequest("node-a")
	in.FirstTask = false
	cs, a := newCluster(testNode("node-a", map[string]string{
		jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(in.TemplateHash, "failed"),
		jobspec.NodeRunKey("kata"):    "run-1",
	}))

	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	require.Equal(t, api.OutcomeFailed, ref.Finalized)
	require.Equal(t, jobspec.JobName("kata", "node-a", "run-1"), ref.Name)
	require.Equal(t, []string{"get nodes"}, actions(cs))
	require.Equal(t, "", cs.Actions()[0].(k8stesting.GetActionImpl).GetOptions.ResourceVersion, "a quorum read")
	require.Zero(t, countJobs(t, cs))
}

func TestCreateJobAfterALostTaskCreatesForAnotherRunsMarker(t *testing.T) {
	in := testRequest("node-a")
	in.FirstTask = false
	cs, a := newCluster(testNode("node-a", map[string]string{
		jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(in.TemplateHash, "failed"),
		jobspec.NodeRunKey("kata"):    "run-0", // an earlier rollout's run failed here
	}))
	stampCreatedJobs(cs)

	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	require.Empty(t, ref.Finalized)
	require.Equal(t, "uid-node-node-a", ref.NodeUID)
	require.Equal(t, []string{"get nodes", "create jobs"}, actions(cs), "the Node first, then the create")
	require.Equal(t, 1, countJobs(t, cs))
}

func TestCreateJobAfterALostTaskOnAGoneNodeCreatesNothing(t *testing.T) {
	in := testRequest("node-a")
	in.FirstTask = false
	cs, a := newCluster()
	_, err := createJob(t, a, in)
	requireAppError(t, err, api.ErrNodeGone, true)
	require.Equal(t, []string{"get nodes", "get jobs"}, actions(cs), "only a look for a Job an earlier attempt made")
}

func TestCreateJobAdoptsItsOwnJob(t *testing.T) {
	in := testRequest("node-a")
	existing := ourJob(t, in) // an earlier attempt created it; its reply was lost
	cs, a := newCluster(testNode("node-a", nil), existing)

	ref, err := createJob(t, a, in)
	require.NoError(t, err)
	want := refOf(existing, "node-a")
	want.NodeUID = "uid-node-node-a"
	want.RunID = "run-1"
	require.Equal(t, want, ref)
	require.ElementsMatch(t, []string{"get nodes", "create jobs", "get jobs"}, actions(cs))
}

func TestCreateJobRefusesForeignObject(t *testing.T) {
	in := testRequest("node-a")
	for _, tc := range []struct {
		name   string
		change func(*batchv1.Job)
	}{
		{"not ours", func(j *batchv1.Job) { j.Labels = map[string]string{"app": "other"}; j.Annotations = nil }},
		{"another rollout", func(j *batchv1.Job) { j.Labels[jobspec.LabelRollout] = "other" }},
		{"another run", func(j *batchv1.Job) { j.Annotations[jobspec.AnnotationRunID] = "run-0" }},
		{"another template", func(j *batchv1.Job) { j.Annotations[jobspec.AnnotationTemplateHash] = "ffffffffff" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			existing := ourJob(t, in)
			tc.change(existing)
			cs, a := newCluster(testNode("node-a", nil), existing)
			_, err := createJob(t, a, in)
			appErr := requireAppError(t, err, api.ErrForeignObject, true)
			require.Contains(t, appErr.Error(), testNamespace+"/"+existing.Name)
			require.ElementsMatch(t, []string{"get nodes", "create jobs", "get jobs"}, actions(cs))
		})
	}
}

func TestCreateJobErrors(t *testing.T) {
	for _, tc := range []struct {
		name         string
		err          error
		wantType     string
		nonRetryable bool
		wantText     string
	}{
		{"forbidden", forbidden("jobs"), api.ErrForbidden, true, "grant"},
		{"invalid", apierrors.NewInvalid(batchv1.SchemeGroupVersion.WithKind("Job").GroupKind(), "j", nil), api.ErrInvalidRequest, true, "rejected"},
		{"namespace deleted", apierrors.NewNotFound(batchv1.Resource("namespaces"), testNamespace), api.ErrInvalidRequest, true, "namespace"},
		{"server error", apierrors.NewInternalError(errors.New("boom")), "", false, "boom"},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), "", false, "slow down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil))
			failOn(cs, "create", "jobs", tc.err)
			_, err := createJob(t, a, testRequest("node-a"))
			appErr := requireAppError(t, err, tc.wantType, tc.nonRetryable)
			require.Contains(t, appErr.Error(), tc.wantText)
			require.Equal(t, 1, countActions(cs, "create", "jobs"), "no retry inside the activity")
		})
	}
}

func TestCreateJobBadTemplate(t *testing.T) {
	cs, a := newCluster(testNode("node-a", nil))
	in := testRequest("node-a")
	in.Template = "apiVersion: v1\nkind: Pod\n"
	in.TemplateHash = jobspec.TemplateHash(in.Template)
	_, err := createJob(t, a, in)
	requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Zero(t, countActions(cs, "create", "jobs"))
}

func countJobs(t *testing.T, cs *fake.Clientset) int {
	t.Helper()
	jobs, err := cs.BatchV1().Jobs(testNamespace).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	return len(jobs.Items)
}

// TestCreateJobRetryOnAGoneNodeRemovesTheJobItMade: an attempt created the Job and its reply
// was lost; the Node was deleted before the retry. The retry reports the node gone, which tells
// the workflow that no Job was made, so it must not leave the earlier attempt's Job (held by
// our finalizer) behind.
func TestCreateJobRetryOnAGoneNodeRemovesTheJobItMade(t *testing.T) {
	in := testRequest("node-a")
	in.FirstTask = false
	made := ourJob(t, in) // by the attempt whose reply was lost
	require.Contains(t, made.Finalizers, jobspec.FinalizerOutcome)
	cs, a := newCluster(made)
	_, err := createJob(t, a, in)
	requireAppError(t, err, api.ErrNodeGone, true)
	require.Zero(t, countJobs(t, cs), "the Job the earlier attempt made is deleted")

	// Someone else's Job under the name is left alone.
	foreign := ourJob(t, in)
	foreign.Annotations[jobspec.AnnotationRunID] = "run-other"
	cs = fake.NewClientset(foreign)
	a = newActivities(cs)
	_, err = createJob(t, a, in)
	requireAppError(t, err, api.ErrNodeGone, true)
	require.Equal(t, 1, countJobs(t, cs))
}

// TestCreateJobTakesAnInlineTemplateOnlyUnderItsOwnHash: a node given a template with another
// template's hash (a node workflow started by hand, a forged input) creates nothing, so no
// node is ever marked done for a template that did not run on it; RunJob, which creates
// through CreateJob, too. A rollout from before the full hash passes its 10-character hash.
func TestCreateJobTakesAnInlineTemplateOnlyUnderItsOwnHash(t *testing.T) {
	other := testTemplate + "# another template\n"
	own := jobspec.TemplateHash(testTemplate)
	for name, hash := range map[string]string{
		"another template's hash":  jobspec.TemplateHash(other),
		"another template's short": jobspec.TemplateHash(other)[:10],
		"a prefix of its own":      own[:len(own)-1],
		"none":                     "",
	} {
		t.Run(name, func(t *testing.T) {
			cs, a := newCluster(testNS(testNamespace), testNode("node-a", nil))
			req := testRequest("node-a")
			req.TemplateHash = hash
			_, err := newEnv(a).ExecuteActivity(a.CreateJob, req)
			appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
			require.Contains(t, appErr.Message(), "templateHash")
			_, err = newEnv(a).ExecuteActivity(a.RunJob, RunJobInput{Job: req, WatchSeconds: 1})
			requireAppError(t, err, api.ErrInvalidRequest, true)
			require.Zero(t, countActions(cs, "create", "jobs"))
		})
	}
	_, a := newCluster(testNS(testNamespace), testNode("node-a", nil))
	req := testRequest("node-a")
	req.TemplateHash = jobspec.TemplateHash(testTemplate)[:10]
	_, err := newEnv(a).ExecuteActivity(a.CreateJob, req)
	require.NoError(t, err, "a hash of a rollout from before the full hash")
}

const waitTimeout = 10 * time.Second

// clock is a settable a.Now.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// startedActivities runs the shared informer for the test's lifetime.
func startedActivities(t *testing.T, cs *fake.Clientset) *Activities {
	t.Helper()
	a := newActivities(cs)
	a.HeartbeatInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, a.Jobs.Start(ctx))
	return a
}

type waitResult struct {
	end JobEnd
	err error
}

// waitJob runs WaitJob in the background; waiting closes once it has subscribed and
// heartbeated for the first time.
func waitJob(t *testing.T, env *testsuite.TestActivityEnvironment, a *Activities, in WaitJobInput) (result <-chan waitResult, waiting <-chan struct{}) {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) {
		once.Do(func() { close(started) })
	})
	done := make(chan waitResult, 1)
	go func() {
		val, err := env.ExecuteActivity(a.WaitJob, in)
		var end JobEnd
		if err == nil {
			err = val.Get(&end)
		}
		done <- waitResult{end, err}
	}()
	return done, started
}

// waitEnd receives WaitJob's return and requires that it returned without an error: the Job's end.
func waitEnd(t *testing.T, result <-chan waitResult) JobEnd {
	t.Helper()
	r := receive(t, result, "WaitJob to return")
	require.NoError(t, r.err)
	return r.end
}

// requireEndsAs requires that WaitJob returned an end of outcome, for the tests that ask nothing
// else of the end.
func requireEndsAs(t *testing.T, result <-chan waitResult, outcome api.Outcome) {
	t.Helper()
	require.Equal(t, outcome, waitEnd(t, result).Outcome)
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func withCondition(job *batchv1.Job, typ batchv1.JobConditionType, reason, message string) *batchv1.Job {
	job = job.DeepCopy()
	job.Status.Conditions = append(job.Status.Conditions, batchv1.JobCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: message,
		LastTransitionTime: metav1.NewTime(t0.Add(time.Minute)),
	})
	return job
}

func TestWaitJobCompletesWhileWaiting(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	cs.ClearActions()

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 3600})
	receive(t, waiting, "WaitJob to start")
	_, err := cs.BatchV1().Jobs(testNamespace).UpdateStatus(t.Context(),
		withCondition(job, batchv1.JobComplete, "CompletionsReached", "Reached expected number of succeeded pods"), metav1.UpdateOptions{})
	require.NoError(t, err)

	end := waitEnd(t, result)
	// The controller's words for a plain success are dropped: they say only "succeeded".
	require.Equal(t, JobEnd{Outcome: api.OutcomeSucceeded, FinishedAt: t0.Add(time.Minute)}, end)
	require.Zero(t, countActions(cs, "get", "jobs"), "the informer, not GETs, reports the Job")
}

func TestWaitJobFinishedOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		typ     batchv1.JobConditionType
		reason  string
		outcome api.Outcome
	}{
		{"failed", batchv1.JobFailed, "BackoffLimitExceeded", api.OutcomeFailed},
		{"failed after failure target", batchv1.JobFailed, "PodFailurePolicy", api.OutcomeFailed},
		{"active deadline", batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, api.OutcomeTimedOut},
		{"complete after success criteria met", batchv1.JobComplete, "SuccessPolicy", api.OutcomeSucceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := ourJob(t, testRequest("node-a"))
			if tc.typ == batchv1.JobFailed {
				job = withCondition(job, batchv1.JobFailureTarget, tc.reason, "it happened")
			} else {
				job = withCondition(job, batchv1.JobSuccessCriteriaMet, tc.reason, "it happened")
			}
			job = withCondition(job, tc.typ, tc.reason, "it happened")
			cs := fake.NewClientset(testNode("node-a", nil), job)
			a := startedActivities(t, cs)
			result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
			end := waitEnd(t, result)
			require.Equal(t, tc.outcome, end.Outcome)
			require.Equal(t, tc.reason, end.Reason)
			require.Equal(t, "it happened", end.Message)
		})
	}
}

func TestWaitJobDeletedWhileWaiting(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	require.NoError(t, cs.BatchV1().Jobs(testNamespace).Delete(t.Context(), job.Name, metav1.DeleteOptions{}))

	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeFailed, end.Outcome)
	require.Equal(t, api.ReasonJobDeleted, end.Reason)
	require.Zero(t, countActions(cs, "get", "jobs"), "the informer saw the deletion")
	require.Equal(t, 1, countActions(cs, "list", "pods"), "the deleted Job's Pods are looked for once")
}

func TestWaitJobMissingFromCacheAndServer(t *testing.T) {
	job := ourJob(t, testRequest("node-a")) // never stored
	cs := fake.NewClientset(testNode("node-a", nil))
	a := startedActivities(t, cs)
	a.Now = func() time.Time { return t0.Add(informerGrace) } // past the grace for informer lag
	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	end := waitEnd(t, result)
	require.Equal(t, api.ReasonJobDeleted, end.Reason)
	require.Equal(t, 1, countActions(cs, "get", "jobs"))
	require.Zero(t, countActions(cs, "delete", "jobs"), "nothing to delete")
}

// TestWaitJobTrustsTheInformerForANewJob: a Job just created and not yet in the cache is not
// read from the API server; its informer event is awaited.
func TestWaitJobTrustsTheInformerForANewJob(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil))
	a := startedActivities(t, cs)
	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	done := job.DeepCopy()
	done.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	_, err := cs.BatchV1().Jobs(testNamespace).Create(t.Context(), done, metav1.CreateOptions{})
	require.NoError(t, err)
	requireEndsAs(t, result, api.OutcomeSucceeded)
	require.Zero(t, countActions(cs, "get", "jobs"), "no polling read")
}

func TestWaitJobReplacedByAnotherJob(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	ref := refOf(job, "node-a")
	ref.UID = "uid-of-a-job-deleted-long-ago"
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	a.Now = func() time.Time { return t0.Add(informerGrace) }
	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: ref})
	end := waitEnd(t, result)
	require.Equal(t, api.ReasonJobDeleted, end.Reason)
	_, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.NoError(t, err, "someone else's Job is left alone")
}

func TestWaitJobPastDeadlineDeletesJob(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	// A retried attempt starting after the deadline (counted from creation) ends at once.
	a.Now = func() time.Time { return t0.Add(31 * time.Minute) }

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 1800})
	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeTimedOut, end.Outcome)
	require.Equal(t, api.ReasonJobTimeout, end.Reason)
	require.Equal(t, t0.Add(31*time.Minute), end.FinishedAt)
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
	_, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), job.Name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err))
}

func TestWaitJobDeadlineReachedWhileWaiting(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	clk := &clock{now: t0.Add(29 * time.Minute)}
	a.Now = clk.Now

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 1800})
	receive(t, waiting, "WaitJob to start")
	select {
	case r := <-result:
		t.Fatalf("WaitJob returned before its deadline: %+v", r)
	default:
	}
	clk.Advance(2 * time.Minute)

	requireEndsAs(t, result, api.OutcomeTimedOut)
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
}

func TestWaitJobNodeDeleted(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	a.NodeCheckInterval = 10 * time.Millisecond

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	require.Eventually(t, func() bool { return countActions(cs, "get", "nodes") > 0 }, waitTimeout, time.Millisecond,
		"the node is checked while the Job runs")
	require.NoError(t, cs.CoreV1().Nodes().Delete(t.Context(), "node-a", metav1.DeleteOptions{}))

	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeNodeGone, end.Outcome)
	require.Equal(t, api.ReasonNodeDeleted, end.Reason)
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
}

func TestWaitJobCancelled(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := newEnv(a)
	env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})

	result, waiting := waitJob(t, env, a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	cancel()
	r := receive(t, result, "WaitJob to return after cancellation")
	require.ErrorContains(t, r.err, context.Canceled.Error())
}

func TestWaitJobNeedsStart(t *testing.T) {
	_, a := newCluster()
	_, err := newEnv(a).ExecuteActivity(a.WaitJob, WaitJobInput{Job: JobRef{Namespace: testNamespace, Name: "j"}})
	requireAppError(t, err, "", false)
}

// A Job that finishes and is removed at once (ttlSecondsAfterFinished: 0) still reports how
// it ended, even when the waiter only looks after the deletion.
func TestWaitJobFinishedThenDeleted(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	sub := a.Jobs.Subscribe(testNamespace, job.Name)
	defer sub.Close()

	_, err := cs.BatchV1().Jobs(testNamespace).UpdateStatus(t.Context(),
		withCondition(job, batchv1.JobComplete, "CompletionsReached", ""), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, cs.BatchV1().Jobs(testNamespace).Delete(t.Context(), job.Name, metav1.DeleteOptions{}))
	require.Eventually(t, func() bool { _, gone := sub.Last(); return gone }, waitTimeout, time.Millisecond)

	w := jobWait{a: a, ref: refOf(job, "node-a"), sub: sub}
	st, err := w.check(t.Context())
	require.NoError(t, err)
	require.Equal(t, jobEnded, st.kind)
	require.Equal(t, api.OutcomeSucceeded, st.end.Outcome)
}

func TestJobWatcherIgnoresOtherJobs(t *testing.T) {
	cs := fake.NewClientset()
	a := startedActivities(t, cs)
	sub := a.Jobs.Subscribe(testNamespace, "foreign")
	defer sub.Close()
	foreign := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: testNamespace}}
	_, err := cs.BatchV1().Jobs(testNamespace).Create(t.Context(), foreign, metav1.CreateOptions{})
	require.NoError(t, err)

	// A Job of ours created afterwards is seen, so the foreign one had its chance too.
	ours := ourJob(t, testRequest("node-a"))
	other := a.Jobs.Subscribe(testNamespace, ours.Name)
	defer other.Close()
	_, err = cs.BatchV1().Jobs(testNamespace).Create(t.Context(), ours, metav1.CreateOptions{})
	require.NoError(t, err)
	receive(t, other.Changed(), "our Job's event")
	job, _ := sub.Last()
	require.Nil(t, job, "a Job without the rollout label is not reported")
}

// endsOncePodGone deletes the Job's last Pod and requires WaitJob to return then, without an
// error.
func endsOncePodGone(t *testing.T, cs *fake.Clientset, pod *corev1.Pod, result <-chan waitResult) waitResult {
	t.Helper()
	require.NoError(t, cs.CoreV1().Pods(testNamespace).Delete(t.Context(), pod.Name, metav1.DeleteOptions{}))
	r := receive(t, result, "WaitJob to return once the Pod is gone")
	require.NoError(t, r.err)
	return r
}

// requireStillWaiting fails if WaitJob has returned.
func requireStillWaiting(t *testing.T, result <-chan waitResult, why string) {
	t.Helper()
	select {
	case r := <-result:
		t.Fatalf("WaitJob returned %+v, but %s", r, why)
	default:
	}
}

// TestWaitJobAwaitsThePodsOfAFinishedJob: where the Job controller does not count terminating
// Pods (before Kubernetes 1.29; Complete then comes while Pods may still stop), a finished Job
// frees the node only once its Pods have stopped, which WaitJob checks by listing them.
func TestWaitJobAwaitsThePodsOfAFinishedJob(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobComplete, "CompletionsReached", "")
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	cs := fake.NewClientset(testNode("node-a", nil), job, pod)
	a := fastWaits(startedActivities(t, cs))

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	require.Eventually(t, func() bool { return countActions(cs, "list", "pods") >= 3 }, waitTimeout, time.Millisecond)
	requireStillWaiting(t, result, "a Pod of the Job still runs")

	pod.Status.Phase = corev1.PodSucceeded
	_, err := cs.CoreV1().Pods(testNamespace).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	requireEndsAs(t, result, api.OutcomeSucceeded)
	require.Zero(t, countActions(cs, "delete", "jobs"), "a finished Job is left to FinalizeJob")
}

// TestWaitJobTrustsTheJobControllersPodCount: where the Job controller adds Complete only once
// the Pods stopped (Kubernetes 1.31 on: after SuccessCriteriaMet), its Complete condition with
// nothing active or terminating needs no request to confirm.
func TestWaitJobTrustsTheJobControllersPodCount(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobSuccessCriteriaMet, "CompletionsReached", "")
	job = withCondition(job, batchv1.JobComplete, "CompletionsReached", "")
	job.Status.Terminating = new(int32(0))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	a.TrustJobPodCounts = true // the API server says 1.31 or later
	cs.ClearActions()
	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	requireEndsAs(t, result, api.OutcomeSucceeded)
	require.Empty(t, actions(cs), "no Pod list, no Job GET")
}

// TestWaitJobOnA130ClusterListsThePodsAfterFailJob: on Kubernetes 1.30 a podFailurePolicy's
// FailJob adds FailureTarget and Failed in the sync that deletes the active Pods, which it
// does not count as terminating: the pattern the count is trusted by on 1.31, with a Pod still
// in its grace period. Below 1.31 (or with the version unknown) the Pods are listed.
func TestWaitJobOnA130ClusterListsThePodsAfterFailJob(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobFailureTarget, batchv1.JobReasonPodFailurePolicy, "container exited 3")
	job = withCondition(job, batchv1.JobFailed, batchv1.JobReasonPodFailurePolicy, "container exited 3")
	job.Status.Terminating = new(int32(0))
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	pod.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)} // deleted with the Failed, in its grace period
	cs := fake.NewClientset(testNode("node-a", nil), job, pod)
	a := fastWaits(startedActivities(t, cs))
	a.TrustJobPodCounts = TrustsJobPodCounts(version.MustParseGeneric("v1.30.4"))

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	require.Eventually(t, func() bool { return countActions(cs, "list", "pods") >= 2 }, waitTimeout, time.Millisecond,
		"the Pods are listed: a 1.30 Job's count is not to be trusted")
	requireStillWaiting(t, result, "a Pod of the Job is still terminating")

	r := endsOncePodGone(t, cs, pod, result)
	require.Equal(t, api.OutcomeFailed, r.end.Outcome)
}

// Only 1.31 and later are trusted; so is not a version the worker could not read.
func TestTrustsJobPodCounts(t *testing.T) {
	for v, want := range map[string]bool{"v1.30.14": false, "v1.31.0": true, "v1.37.2": true, "v1.31.2+k3s1": true, "v2.0.0": true} {
		require.Equal(t, want, TrustsJobPodCounts(version.MustParseGeneric(v)), v)
	}
	require.False(t, TrustsJobPodCounts(nil))
}

// TestWaitJobWaitsForFailedAfterFailureTarget: FailureTarget decides the outcome while the
// Pods are still being stopped; the node is free only at Failed.
func TestWaitJobWaitsForFailedAfterFailureTarget(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobFailureTarget, "PodFailurePolicy", "container exited 3")
	job.Status.Terminating = new(int32(1))
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := fastWaits(startedActivities(t, cs))
	a.Now = func() time.Time { return t0.Add(2 * time.Minute) } // within the grace for terminating Pods

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	requireStillWaiting(t, result, "the Job's Pod is still terminating")

	failed := withCondition(job, batchv1.JobFailed, "PodFailurePolicy", "container exited 3")
	failed.Status.Conditions[1].LastTransitionTime = metav1.NewTime(t0.Add(3 * time.Minute))
	failed.Status.Terminating = new(int32(0))
	_, err := cs.BatchV1().Jobs(testNamespace).UpdateStatus(t.Context(), failed, metav1.UpdateOptions{})
	require.NoError(t, err)
	end := waitEnd(t, result)
	// Finished when Failed came, not at FailureTarget (t0+1m).
	require.Equal(t, JobEnd{Outcome: api.OutcomeFailed, Reason: "PodFailurePolicy", Message: "container exited 3", FinishedAt: t0.Add(3 * time.Minute)}, end)
	require.Zero(t, countActions(cs, "delete", "jobs"))
}

// TestWaitJobDeletesAJobStuckInFailureTarget: a FailureTarget that does not turn into Failed
// within five minutes (a kubelet that never confirms the Pod stopped) gets the Job deleted and
// its Pods awaited; the outcome says so.
func TestWaitJobDeletesAJobStuckInFailureTarget(t *testing.T) {
	for _, tc := range []struct {
		typ     batchv1.JobConditionType
		outcome api.Outcome
	}{{batchv1.JobFailureTarget, api.OutcomeFailed}, {batchv1.JobSuccessCriteriaMet, api.OutcomeSucceeded}} {
		t.Run(string(tc.typ), func(t *testing.T) {
			job := withCondition(ourJob(t, testRequest("node-a")), tc.typ, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
			job.Status.Terminating = new(int32(1))
			cs := fake.NewClientset(testNode("node-a", nil), job)
			a := fastWaits(startedActivities(t, cs))
			clk := &clock{now: t0.Add(5 * time.Minute)} // the condition came at t0+1m
			a.Now = clk.Now

			result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
			receive(t, waiting, "WaitJob to start")
			requireStillWaiting(t, result, "the grace has not passed")
			clk.Advance(time.Minute + time.Second)

			end := waitEnd(t, result)
			require.Equal(t, tc.outcome, end.Outcome)
			require.Equal(t, api.ReasonTerminationStuck, end.Reason)
			require.Contains(t, end.Message, "BackoffLimitExceeded")
			require.Contains(t, end.Message, "did not stop within 5m0s")
			requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
		})
	}
}

// TestConditionWordsLeaveOutWhatWasDropped: a stuck Job's message quotes its condition's words
// and shows no empty brackets or colons for words a plain success dropped.
func TestConditionWordsLeaveOutWhatWasDropped(t *testing.T) {
	require.Equal(t, " (BackoffLimitExceeded: Job has reached the specified backoff limit)",
		conditionWords(JobEnd{Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}))
	require.Equal(t, " (PodFailurePolicy)", conditionWords(JobEnd{Reason: "PodFailurePolicy"}))
	require.Equal(t, " (container exited 3)", conditionWords(JobEnd{Message: "container exited 3"}))
	require.Empty(t, conditionWords(JobEnd{Outcome: api.OutcomeSucceeded}))
}

// TestWaitJobTimeoutAwaitsThePodsAndSaysWhyThePodNeverRan: at the deadline WaitJob reads what
// the Pod was waiting for, deletes the Job (Foreground) and returns only when its Pods are gone.
func TestWaitJobTimeoutAwaitsThePodsAndSaysWhyThePodNeverRan(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	pod := jobPod(job, "p", t0, corev1.PodPending, 0, "")
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "install", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "busybox:nope"`},
	}}}
	cs := fake.NewClientset(testNode("node-a", nil), job, pod)
	a := fastWaits(startedActivities(t, cs))
	a.Now = func() time.Time { return t0.Add(31 * time.Minute) }

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 1800})
	require.Eventually(t, func() bool { return countActions(cs, "delete", "jobs") == 1 && countActions(cs, "list", "pods") >= 3 },
		waitTimeout, time.Millisecond)
	requireStillWaiting(t, result, "the Job's Pod is still there")
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)

	r := endsOncePodGone(t, cs, pod, result)
	require.Equal(t, api.OutcomeTimedOut, r.end.Outcome)
	require.Equal(t, api.ReasonJobTimeout, r.end.Reason)
	require.Equal(t, `ImagePullBackOff: Back-off pulling image "busybox:nope"`, r.end.PodReason)
}

// TestWaitJobNodeGoneBoundsThePodWait: the Pods of a deleted Node never report stopping; the
// wait for them ends after NodeGonePodWait and says so.
func TestWaitJobNodeGoneBoundsThePodWait(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	cs := fake.NewClientset(job, pod) // no Node
	a := fastWaits(startedActivities(t, cs))
	a.NodeCheckInterval = 10 * time.Millisecond
	a.NodeGonePodWait = 200 * time.Millisecond

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeNodeGone, end.Outcome)
	require.Contains(t, end.Message, "1 Pod(s) of it had not gone after 200ms")
	requireDelete(t, cs, job.Name, metav1.DeletePropagationForeground)
}

// TestWaitJobFinishedJobHeldByOurFinalizer: a Job whose TTL deleted it after it finished (our
// finalizer keeps it) reports how it really ended; one that failed because it was deleted while
// running reports JobDeleted.
func TestWaitJobFinishedJobHeldByOurFinalizer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		typ        batchv1.JobConditionType
		deletedAt  time.Time
		reason     string // the condition's
		wantReason string
	}{
		{"completed, then deleted by its TTL", batchv1.JobComplete, t0.Add(2 * time.Minute), "CompletionsReached", ""},
		{"completed by its success policy, then deleted by its TTL", batchv1.JobComplete, t0.Add(2 * time.Minute), "SuccessPolicy", "SuccessPolicy"},
		{"failed, then deleted by its TTL", batchv1.JobFailed, t0.Add(2 * time.Minute), "BackoffLimitExceeded", "BackoffLimitExceeded"},
		{"deleted while running, failed meanwhile", batchv1.JobFailed, t0.Add(30 * time.Second), "BackoffLimitExceeded", api.ReasonJobDeleted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := withCondition(ourJob(t, testRequest("node-a")), tc.typ, tc.reason, "") // at t0+1m
			job.Status.Terminating = new(int32(0))
			job.DeletionTimestamp = &metav1.Time{Time: tc.deletedAt}
			cs := fake.NewClientset(testNode("node-a", nil), job)
			a := fastWaits(startedActivities(t, cs))
			result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
			end := waitEnd(t, result)
			require.Equal(t, tc.wantReason, end.Reason)
		})
	}
}

// TestWaitJobErrorsLeaveTheJobToTheCaller: WaitJob's non-retryable errors are typed, and each
// means the Job may still run (the caller deletes it before releasing the node).
func TestWaitJobErrorsLeaveTheJobToTheCaller(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		name     string
		verb     string
		err      error
		deadline bool
		wantType string
	}{
		{"reading the Job refused", "get", forbidden("jobs"), false, api.ErrForbidden},
		{"delete at the deadline refused by RBAC", "delete", forbidden("jobs"), true, api.ErrForbidden},
		{"delete at the deadline denied by a webhook", "delete",
			apierrors.NewForbidden(gr, "j", errors.New(`admission webhook "freeze.example.com" denied the request: change freeze`)), true, api.ErrAdmissionDenied},
		{"finalizer removal refused", "patch", forbidden("jobs"), true, api.ErrForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := ourJob(t, testRequest("node-a"))
			objs := []runtime.Object{testNode("node-a", nil)}
			if tc.deadline {
				objs = append(objs, job)
			}
			cs := fake.NewClientset(objs...)
			failOn(cs, tc.verb, "jobs", tc.err)
			a := fastWaits(startedActivities(t, cs))
			a.Now = func() time.Time { return t0.Add(31 * time.Minute) } // past the informer grace and the deadline
			result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 1800})
			r := receive(t, result, "WaitJob to return")
			requireAppError(t, r.err, tc.wantType, true)
			require.Contains(t, NonRetryableErrors, tc.wantType)
		})
	}
}

// Each heartbeat is a persisted update on the Temporal server; a Job that ends before the first
// tick must cost none.
func TestWaitJobDoesNotHeartbeatBeforeTheFirstInterval(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobComplete, "CompletionsReached", "done")
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := startedActivities(t, cs)
	a.HeartbeatInterval = time.Hour
	env := newEnv(a)
	var heartbeats atomic.Int32
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { heartbeats.Add(1) })

	val, err := env.ExecuteActivity(a.WaitJob, WaitJobInput{Job: refOf(job, "node-a")})
	require.NoError(t, err)
	var end JobEnd
	require.NoError(t, val.Get(&end))
	require.Equal(t, api.OutcomeSucceeded, end.Outcome)
	require.Zero(t, heartbeats.Load())
}

// TestWaitJobListsThePodsWhenAFinishedJobStillCountsThemTerminating: before Kubernetes 1.31 the
// Job controller adds Failed at once, with status.terminating counting the Pods that were then
// terminating (one deleted earlier: an eviction, a person), and never updates a finished Job
// again (kubernetes/kubernetes#123775): the count stays above zero after the Pods are gone. No
// event will come for the Job, so the Pods are listed.
func TestWaitJobListsThePodsWhenAFinishedJobStillCountsThemTerminating(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobFailed, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")
	job.Status.Terminating = new(int32(1)) // frozen: the Job is finished
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	pod.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)} // in its grace period
	cs := fake.NewClientset(testNode("node-a", nil), job, pod)
	a := fastWaits(startedActivities(t, cs))

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	receive(t, waiting, "WaitJob to start")
	require.Eventually(t, func() bool { return countActions(cs, "list", "pods") >= 2 }, waitTimeout, time.Millisecond,
		"the Pods are listed, as the Job's count will not change")
	requireStillWaiting(t, result, "a Pod of the Job is still terminating")

	r := endsOncePodGone(t, cs, pod, result)
	require.Equal(t, api.OutcomeTimedOut, r.end.Outcome)
	require.Zero(t, countActions(cs, "delete", "jobs"), "a finished Job is left to FinalizeJob")
}

// TestWaitJobListsThePodsWhenAFinishedJobCountsNoneTerminating: before Kubernetes 1.31 the Job
// controller adds Failed in the same sync that deletes the Job's active Pods and does not count
// those in status.terminating (kubernetes/kubernetes#125089): a Failed Job with active 0 and
// terminating 0 may still have a Pod in its grace period on the node. Only where the terminal
// condition follows its interim one (1.31 on, every Job) does it come after the Pods stopped.
func TestWaitJobListsThePodsWhenAFinishedJobCountsNoneTerminating(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	job.Status.Terminating = new(int32(0))
	pod := jobPod(job, "p", t0, corev1.PodRunning, 0, "")
	pod.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)} // deleted with the Failed, in its grace period
	cs := fake.NewClientset(testNode("node-a", nil), job, pod)
	a := fastWaits(startedActivities(t, cs))

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	var early *waitResult
	require.Eventually(t, func() bool {
		select {
		case r := <-result:
			early = &r
			return true
		default:
			return countActions(cs, "list", "pods") >= 2
		}
	}, waitTimeout, time.Millisecond)
	require.Nil(t, early, "WaitJob returned while a Pod of the Job was terminating")
	requireStillWaiting(t, result, "a Pod of the Job is still terminating")

	r := endsOncePodGone(t, cs, pod, result)
	require.Equal(t, api.OutcomeFailed, r.end.Outcome)
}

// TestWaitJobDecidedBeforeItsDeadline: a Job whose outcome was decided before its deadline
// (SuccessCriteriaMet, Kubernetes 1.31 on) while a Pod of it still stops past the deadline
// ended in time, as it would have where Complete comes at once: its Pods are awaited and its
// outcome kept, not turned into a timeout.
func TestWaitJobDecidedBeforeItsDeadline(t *testing.T) {
	job := withCondition(ourJob(t, testRequest("node-a")), batchv1.JobSuccessCriteriaMet, "CompletionsReached", "")
	job.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(29*time.Minute + 30*time.Second))
	job.Status.Terminating = new(int32(1)) // an extra Pod, deleted as the Job succeeded
	cs := fake.NewClientset(testNode("node-a", nil), job)
	a := fastWaits(startedActivities(t, cs))
	a.Now = func() time.Time { return t0.Add(30*time.Minute + 30*time.Second) } // past the 30 min deadline

	result, waiting := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a"), TimeoutSeconds: 1800})
	select {
	case r := <-result:
		t.Fatalf("WaitJob returned %+v while the Job's outcome was decided and a Pod of it stopping", r)
	case <-waiting:
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for WaitJob to start")
	}
	complete := withCondition(job, batchv1.JobComplete, "CompletionsReached", "")
	complete.Status.Terminating = new(int32(0))
	_, err := cs.BatchV1().Jobs(testNamespace).UpdateStatus(t.Context(), complete, metav1.UpdateOptions{})
	require.NoError(t, err)
	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeSucceeded, end.Outcome, "%+v", end)
	require.Zero(t, countActions(cs, "delete", "jobs"))
}

// TestWaitJobRetriedAfterItsNodeWentStillSaysNodeGone: an attempt that deleted the Job because
// its Node was deleted and then failed while awaiting the Pods (a worker restart, an API error)
// leaves the Job being deleted; the next attempt reports the node gone, which does not count
// against the rollout's failure budget, not a Job someone deleted (a failure).
func TestWaitJobRetriedAfterItsNodeWentStillSaysNodeGone(t *testing.T) {
	job := ourJob(t, testRequest("node-a"))
	job.DeletionTimestamp = &metav1.Time{Time: t0.Add(time.Minute)} // by the earlier attempt, Foreground
	job.Finalizers = []string{metav1.FinalizerDeleteDependents}
	cs := fake.NewClientset(job) // no Node
	a := fastWaits(startedActivities(t, cs))
	a.NodeGonePodWait = waitTimeout / 2

	result, _ := waitJob(t, newEnv(a), a, WaitJobInput{Job: refOf(job, "node-a")})
	end := waitEnd(t, result)
	require.Equal(t, api.OutcomeNodeGone, end.Outcome, "%+v", end)
	require.Equal(t, api.ReasonNodeDeleted, end.Reason)
}

// WatchJob returns the Job's end when it has ended and Running, not an error, when its time
// is up first; the Job is left as it is.
func TestWatchJobEndsOrSaysRunning(t *testing.T) {
	running := ourJob(t, testRequest("node-a"))
	cs := fake.NewClientset(testNode("node-a", nil), running)
	a := startedActivities(t, cs)

	start := time.Now()
	val, err := newEnv(a).ExecuteActivity(a.WatchJob, WatchJobInput{WaitJobInput: WaitJobInput{Job: refOf(running, "node-a"), TimeoutSeconds: 3600}, ForSeconds: 1})
	require.NoError(t, err)
	var w JobWatch
	require.NoError(t, val.Get(&w))
	require.True(t, w.Running, "%+v", w)
	require.GreaterOrEqual(t, time.Since(start), time.Second, "it watched for its whole time")
	_, err = cs.BatchV1().Jobs(testNamespace).Get(t.Context(), running.Name, metav1.GetOptions{})
	require.NoError(t, err, "a Job still running is left in place")

	_, err = cs.BatchV1().Jobs(testNamespace).UpdateStatus(t.Context(),
		withCondition(running, batchv1.JobComplete, "CompletionsReached", "done"), metav1.UpdateOptions{})
	require.NoError(t, err)
	val, err = newEnv(a).ExecuteActivity(a.WatchJob, WatchJobInput{WaitJobInput: WaitJobInput{Job: refOf(running, "node-a"), TimeoutSeconds: 3600}, ForSeconds: 60})
	require.NoError(t, err)
	w = JobWatch{}
	require.NoError(t, val.Get(&w))
	require.False(t, w.Running)
	require.Equal(t, api.OutcomeSucceeded, w.End.Outcome)
	require.Empty(t, w.End.Reason, "a plain success's reason is dropped")
}

func runJob(t *testing.T, a *Activities, in RunJobInput) RunJobResult {
	t.Helper()
	r, err := execute[RunJobResult](t, a, a.RunJob, in)
	require.NoError(t, err)
	return r
}

// completeOnCreate makes the fake's Jobs complete as they are created, as a Job of a few
// seconds does by the time a watch looks.
func completeOnCreate(cs *fake.Clientset) {
	cs.PrependReactor("create", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		job := action.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		job.Status = withCondition(job, batchv1.JobComplete, "CompletionsReached", "done").Status
		return false, nil, nil
	})
}

// A Job that ends within the watch is created, watched and finalized by one call; the same
// call repeated by the same run (its record lost) finds the run's outcome on the Node and
// creates nothing.
func TestRunJobRunsAShortJobToItsEndOnce(t *testing.T) {
	cs := fake.NewClientset(testNode("node-a", nil))
	stampCreatedJobs(cs)
	completeOnCreate(cs)
	a := startedActivities(t, cs)
	in := RunJobInput{Job: testRequest("node-a"), WatchSeconds: 60, TimeoutSeconds: 3600, KeepJobs: api.KeepFailed}

	r := runJob(t, a, in)
	require.True(t, r.Done, "%+v", r)
	require.False(t, r.Running)
	require.Equal(t, api.OutcomeSucceeded, r.End.Outcome)
	name := jobspec.JobName("kata", "node-a", "run-1")
	require.Equal(t, name, r.Job.Name)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, jobspec.NodeMarker(in.Job.TemplateHash, "succeeded"), node.Annotations[jobspec.NodeMarkerKey("kata")])
	require.Equal(t, "run-1", node.Annotations[jobspec.NodeRunKey("kata")])
	_, err = cs.BatchV1().Jobs(testNamespace).Get(t.Context(), name, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "a succeeded Job is deleted: %v", err)

	in.Job.FirstTask = false
	again := runJob(t, a, in)
	require.Equal(t, api.OutcomeSucceeded, again.Job.Finalized)
	require.False(t, again.Done)
	require.Equal(t, 1, countActions(cs, "create", "jobs"), "the repeat created no second Job")
}

// A RunJob asked to trim (NodeRolloutV5) leaves out of its result what its request says and an
// empty finalize result; the workflow's restore gives back the whole reference. A Job it
// finalized leaves no reference at all: the workflow needs only its planned name.
func TestRunJobTrimmedLeavesOutWhatTheRequestSays(t *testing.T) {
	cs := fake.NewClientset(testNode("node-a", nil))
	stampCreatedJobs(cs)
	completeOnCreate(cs)
	a := startedActivities(t, cs)
	in := RunJobInput{Job: testRequest("node-a"), WatchSeconds: 60, TimeoutSeconds: 3600, KeepJobs: api.KeepFailed, Trim: true}

	done := runJob(t, a, in)
	require.True(t, done.Done, "%+v", done)
	recorded, err := json.Marshal(done)
	require.NoError(t, err)
	require.JSONEq(t, `{"end":{"outcome":"succeeded","finishedAt":`+jsonOf(t, done.End.FinishedAt)+`},"done":true}`, string(recorded))
	require.Equal(t, PlannedJob(in.Job), done.Job.RestoredFrom(PlannedJob(in.Job)))

	// A Job that outlasts the watch goes on to the workflow's next steps, which need its UID.
	cs = fake.NewClientset(testNode("node-b", nil))
	stampCreatedJobs(cs)
	in = RunJobInput{Job: testRequest("node-b"), WatchSeconds: 1, TimeoutSeconds: 3600, KeepJobs: api.KeepFailed, Trim: true}
	running := runJob(t, startedActivities(t, cs), in)
	require.True(t, running.Running, "%+v", running)
	require.NotEmpty(t, running.Job.UID)
	require.Empty(t, running.Job.Namespace+running.Job.Name+running.Job.Node+running.Job.RunID, "%+v", running.Job)
	require.Equal(t, JobRef{Namespace: testNamespace, Name: jobspec.JobName("kata", "node-b", "run-1"), UID: running.Job.UID, RunID: "run-1",
		Node: "node-b", CreatedAt: running.Job.CreatedAt, NodeUID: running.Job.NodeUID}, running.Job.RestoredFrom(PlannedJob(in.Job)))
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// A reference whose parts differ from the plan keeps them through a trim and a restore.
func TestTrimKeepsWhatThePlanDoesNotSay(t *testing.T) {
	planned := PlannedJob(testRequest("node-a"))
	adopted := planned
	adopted.Name, adopted.UID = "someone-elses-name", "u1"
	trimmed := adopted.TrimmedOf(planned)
	require.Equal(t, "someone-elses-name", trimmed.Name)
	require.Empty(t, trimmed.Namespace)
	require.Equal(t, adopted, trimmed.RestoredFrom(planned))
}

// enforceNodeResourceVersion makes the fake refuse a Node patch whose resourceVersion is not
// the Node's, as the API server does (the fake applies any patch).
func enforceNodeResourceVersion(cs *fake.Clientset) {
	cs.PrependReactor("patch", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		patch := action.(k8stesting.PatchAction)
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch.GetPatch(), &body); err != nil || body.Metadata.ResourceVersion == "" {
			return false, nil, nil
		}
		current, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", patch.GetName())
		if err != nil {
			return false, nil, nil
		}
		if rv := current.(*corev1.Node).ResourceVersion; rv != body.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(corev1.Resource("nodes"), patch.GetName(),
				fmt.Errorf("the object has been modified: resourceVersion %s, not %s", rv, body.Metadata.ResourceVersion))
		}
		return false, nil, nil
	})
}

// shortJobCluster holds node-a at resourceVersion 7, refuses a Node patch made from an older
// read, and completes each Job as it is created.
func shortJobCluster() *fake.Clientset {
	node := testNode("node-a", nil)
	node.ResourceVersion = "7"
	cs := fake.NewClientset(node)
	stampCreatedJobs(cs)
	completeOnCreate(cs)
	enforceNodeResourceVersion(cs)
	return cs
}

// A short Job's marker is patched onto the Node as the create read it: one Node read per node,
// not two.
func TestRunJobReadsTheNodeOnce(t *testing.T) {
	cs := shortJobCluster()
	a := startedActivities(t, cs)
	r := runJob(t, a, RunJobInput{Job: testRequest("node-a"), WatchSeconds: 60, TimeoutSeconds: 3600})
	require.True(t, r.Done, "%+v", r)
	require.Equal(t, 1, countActions(cs, "get", "nodes"), "%v", actions(cs))
	require.Equal(t, 1, countActions(cs, "patch", "nodes"))
	require.Equal(t, jobspec.NodeMarker(jobspec.TemplateHash(testTemplate), "succeeded"), nodeAnnotations(t, a, "node-a")[jobspec.NodeMarkerKey("kata")])
}

// A Node that changed between the create and the finalize refuses the marker's patch; the
// finalize reads it again and records the previous template from what it now holds.
func TestRunJobRereadsANodeThatChangedSinceTheCreate(t *testing.T) {
	cs := shortJobCluster()
	nodes := corev1.SchemeGroupVersion.WithResource("nodes")
	var reads atomic.Int32
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads.Add(1) != 1 {
			return false, nil, nil
		}
		// The create reads the Node as it was; then another rollout's template lands on it.
		obj, err := cs.Tracker().Get(nodes, "", "node-a")
		require.NoError(t, err)
		before := obj.(*corev1.Node).DeepCopy()
		after := before.DeepCopy()
		after.ResourceVersion = "8"
		after.Annotations = map[string]string{jobspec.NodeMarkerKey("kata"): jobspec.NodeMarker(hashV1, "succeeded")}
		require.NoError(t, cs.Tracker().Update(nodes, after, ""))
		return true, before, nil
	})
	a := startedActivities(t, cs)
	req := testRequest("node-a")
	r := runJob(t, a, RunJobInput{Job: req, WatchSeconds: 60, TimeoutSeconds: 3600})
	require.True(t, r.Done, "%+v", r)
	require.Equal(t, 2, countActions(cs, "get", "nodes"), "%v", actions(cs))
	require.Equal(t, 2, countActions(cs, "patch", "nodes"), "the first patch is refused")
	got := nodeAnnotations(t, a, "node-a")
	require.Equal(t, jobspec.NodeMarker(req.TemplateHash, "succeeded"), got[jobspec.NodeMarkerKey("kata")])
	require.Equal(t, hashV1, got[jobspec.NodePreviousKey("kata")], "the previous template is the one the Node held at the finalize")
}

// A Job still running when the watch ends is left to WaitJob: nothing is finalized.
func TestRunJobLeavesALongJobToWaitJob(t *testing.T) {
	cs := fake.NewClientset(testNode("node-a", nil))
	stampCreatedJobs(cs)
	a := startedActivities(t, cs)
	r := runJob(t, a, RunJobInput{Job: testRequest("node-a"), WatchSeconds: 1, TimeoutSeconds: 3600})
	require.True(t, r.Running, "%+v", r)
	require.False(t, r.Done)
	require.NotEmpty(t, r.Job.UID)
	node, err := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Empty(t, node.Annotations, "not finalized")
	require.Equal(t, 1, countJobs(t, cs))
}

// A finalize that fails returns the Job's end without Done, for the workflow to finalize again.
func TestRunJobReturnsTheEndWhenFinalizeFails(t *testing.T) {
	cs := fake.NewClientset(testNode("node-a", nil))
	stampCreatedJobs(cs)
	completeOnCreate(cs)
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("nodes"), "node-a", errors.New("rbac"))
	})
	a := startedActivities(t, cs)
	r := runJob(t, a, RunJobInput{Job: testRequest("node-a"), WatchSeconds: 60, TimeoutSeconds: 3600})
	require.False(t, r.Done)
	require.False(t, r.Running)
	require.Equal(t, api.OutcomeSucceeded, r.End.Outcome)
}
