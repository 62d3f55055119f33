package activities

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

func TestStoredTemplateTravelsAsItsHashAlone(t *testing.T) {
	cs, a := newCluster(testNS(testNamespace), testNode("node-a", nil), testNode("node-b", nil))
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
	require.Equal(t, hash[:10], cm.Labels[LabelTemplateHash])

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

	_, a := newCluster(testNS(testNamespace), testNode("node-a", nil), tampered)
	_, err := newEnv(a).ExecuteActivity(a.CreateJob, req)
	requireAppError(t, err, api.ErrForeignObject, true)
	_, err = newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate, Store: true})
	requireAppError(t, err, api.ErrForeignObject, true)

	cs, a := newCluster(testNS(testNamespace), testNode("node-a", nil))
	_, err = newEnv(a).ExecuteActivity(a.CreateJob, req)
	appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Contains(t, appErr.Message(), "was deleted while the rollout ran")
	require.Zero(t, countActions(cs, "create", "jobs"))
}

// collidingTemplates are two templates whose SHA-256 share their first 40 bits (cc6aba1e72),
// found by a birthday search in seconds: the second runs something else than the first.
var collidingTemplates = [2]string{
	testTemplate + "# 2314006\n",
	strings.Replace(testTemplate, `args: ["echo", "{{node}}"]`, `args: ["sh", "-c", "echo planted"]`, 1) + "# 1249911\n",
}

// TestStoredTemplateCannotBePlantedUnderACollidingName: a ConfigMap planted, before the
// rollout stores its template, under the name the template would get, holding another template
// whose hash shares the name's 40 bits, is never taken for the rollout's template: the name
// carries the whole SHA-256, and what is read is checked against it.
func TestStoredTemplateCannotBePlantedUnderACollidingName(t *testing.T) {
	approved, planted := collidingTemplates[0], collidingTemplates[1]
	require.NotEqual(t, approved, planted)
	short := func(s string) string { sum := sha256.Sum256([]byte(s)); return hex.EncodeToString(sum[:])[:10] }
	require.Equal(t, short(approved), short(planted), "the pair collides in 40 bits")

	hash := jobspec.TemplateHash(approved)
	require.Len(t, hash, 64, "the template hash is the whole SHA-256")
	for which, name := range map[string]string{"under-the-name": TemplateConfigMapName(hash), "under-the-40-bit-name": TemplateConfigMapName(short(approved))} {
		t.Run(which, func(t *testing.T) {
			plant := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace,
				Labels: map[string]string{LabelTemplateHash: short(approved)}},
				Data: map[string]string{DefaultTemplateKey: planted}}
			cs, a := newCluster(testNS(testNamespace), testNode("node-a", nil), plant)
			val, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: approved, Store: true})
			if err != nil {
				requireAppError(t, err, api.ErrForeignObject, true)
				return
			}
			var prepared PreparedTemplate
			require.NoError(t, val.Get(&prepared))
			req := testRequest("node-a")
			req.Template, req.TemplateHash = "", prepared.Hash
			_, err = newEnv(a).ExecuteActivity(a.CreateJob, req)
			if err != nil {
				requireAppError(t, err, api.ErrForeignObject, true)
				return
			}
			job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), jobspec.JobName("kata", "node-a", "run-1"), metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, []string{"echo", "node-a"}, job.Spec.Template.Spec.Containers[0].Args, "the approved template runs, never the planted one")
		})
	}
}

// TestStoredTemplateOfARolloutFromBeforeTheFullHashStillReads: a rollout started before the
// full hash carries a 10-character hash in its history and stored its template under that
// name; its next nodes read it, checked against those 10 characters.
func TestStoredTemplateOfARolloutFromBeforeTheFullHashStillReads(t *testing.T) {
	legacy := jobspec.TemplateHash(testTemplate)[:10]
	stored := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "noderollout-template-" + legacy, Namespace: testNamespace},
		Data: map[string]string{DefaultTemplateKey: testTemplate}}
	cs, a := newCluster(testNS(testNamespace), testNode("node-a", nil), stored)
	req := testRequest("node-a")
	req.Template, req.TemplateHash = "", legacy
	_, err := newEnv(a).ExecuteActivity(a.CreateJob, req)
	require.NoError(t, err)
	job, err := cs.BatchV1().Jobs(testNamespace).Get(t.Context(), jobspec.JobName("kata", "node-a", "run-1"), metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, legacy, job.Annotations[jobspec.AnnotationTemplateHash])
}
