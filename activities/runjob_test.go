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
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

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
