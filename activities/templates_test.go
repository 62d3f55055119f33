package activities

import (
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities/jobspec"
)

func TestStoredTemplateTravelsAsItsHashAlone(t *testing.T) {
	cs := fake.NewClientset(testNS(testNamespace), testNode("node-a", nil), testNode("node-b", nil))
	stampCreatedJobs(cs)
	a := newActivities(cs)
	val, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate, Store: true})
	require.NoError(t, err)
	var prepared PreparedTemplate
	require.NoError(t, val.Get(&prepared))
	hash := jobspec.TemplateHash(testTemplate)
	require.Equal(t, PreparedTemplate{Hash: hash}, prepared, "the text stays out of the history")

	cm, err := cs.CoreV1().ConfigMaps(testNamespace).Get(t.Context(), TemplateConfigMapName(hash), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, testTemplate, cm.Data[DefaultTemplateKey])
	require.True(t, *cm.Immutable)
	require.Equal(t, hash, cm.Labels[LabelTemplateHash])

	// Another worker (a fresh Activities) reads it once, then from memory.
	readsBefore := countActions(cs, "get", "configmaps")
	b := newActivities(cs)
	for _, node := range []string{"node-a", "node-b"} {
		req := testRequest(node)
		req.Template = ""
		_, err := newEnv(b).ExecuteActivity(b.CreateJob, req)
		require.NoError(t, err)
	}
	job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), jobspec.JobName("kata", "node-a", "run-1"), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "busybox", job.Spec.Template.Spec.Containers[0].Image)
	require.Equal(t, 1, countActions(cs, "get", "configmaps")-readsBefore, "one read per template, not per node: %v", actions(cs))
	var jobs *batchv1.JobList
	jobs, err = cs.BatchV1().Jobs(testNamespace).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, jobs.Items, 2)

	// Storing the same template again (a second rollout, a retried attempt) is fine.
	_, err = newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate, Store: true})
	require.NoError(t, err)
}

func TestStoredTemplateThatChangedOrVanishedIsRefused(t *testing.T) {
	hash := jobspec.TemplateHash(testTemplate)
	tampered := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: TemplateConfigMapName(hash), Namespace: testNamespace},
		Data: map[string]string{DefaultTemplateKey: testTemplate + "# changed\n"}}
	req := testRequest("node-a")
	req.Template = ""

	cs := fake.NewClientset(testNS(testNamespace), testNode("node-a", nil), tampered)
	a := newActivities(cs)
	_, err := newEnv(a).ExecuteActivity(a.CreateJob, req)
	requireAppError(t, err, ErrForeignObject, true)
	_, err = newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate, Store: true})
	requireAppError(t, err, ErrForeignObject, true)

	cs = fake.NewClientset(testNS(testNamespace), testNode("node-a", nil))
	a = newActivities(cs)
	_, err = newEnv(a).ExecuteActivity(a.CreateJob, req)
	appErr := requireAppError(t, err, ErrInvalidRequest, true)
	require.Contains(t, appErr.Message(), "was deleted while the rollout ran")
	require.Zero(t, countActions(cs, "create", "jobs"))
}
