package activities

import (
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

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
	require.Equal(t, "CompletionsReached", w.End.Reason)
}
