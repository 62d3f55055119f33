package activities

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
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
