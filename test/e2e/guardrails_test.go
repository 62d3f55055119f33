//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// writePolicy writes a worker policy file for the test.
func writePolicy(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// policyWorker runs a worker with the policy on a task queue of its own.
func policyWorker(t *testing.T, name, queue, policyText string, extra ...string) *Worker {
	t.Helper()
	args := append([]string{"--task-queue", queue, "--policy-file", writePolicy(t, policyText)}, extra...)
	w, err := StartWorker(name+"-"+rand.String(4), args...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	return w
}

// rolloutJobsAnywhere counts the rollout's Jobs in every namespace.
func rolloutJobsAnywhere(t *testing.T, rollout string) int {
	t.Helper()
	list, err := stack.Kube.BatchV1().Jobs(metav1.NamespaceAll).List(context.Background(),
		metav1.ListOptions{LabelSelector: jobspec.LabelRollout + "=" + rollout})
	require.NoError(t, err)
	return len(list.Items)
}

// TestGuardrailPolicyDeniesAtOnceNamingTheRule: each request outside the worker's policy fails
// at PrepareTemplate with PolicyDenied naming the rule and the field, before any node starts.
func TestGuardrailPolicyDeniesAtOnceNamingTheRule(t *testing.T) {
	f := NewFleet(t, 2)
	queue := "e2e-guard-deny-" + rand.String(4)
	policyWorker(t, "guard-deny", queue, fmt.Sprintf(`
namespaces:
  %s: {}
images: [docker.io/library/busybox]
`, f.Namespace))

	privileged := strings.Replace(JobTemplate(time.Second, nil), "        image: busybox\n",
		"        image: busybox\n        securityContext: {privileged: true}\n", 1)
	withSA := strings.Replace(JobTemplate(time.Second, nil), "      restartPolicy: Never\n",
		"      restartPolicy: Never\n      serviceAccountName: cluster-admin-ish\n", 1)
	cases := []struct {
		name, rule, field string
		change            func(*api.RolloutRequest)
	}{
		{"namespace", policy.RuleNamespaces, "namespace", func(r *api.RolloutRequest) { r.Namespace = "kube-system" }},
		{"image", policy.RuleImages, "containers[0].image", func(r *api.RolloutRequest) {
			r.JobTemplate = strings.Replace(r.JobTemplate, "image: busybox", "image: evil.example.com/miner:1", 1)
		}},
		{"privileged", policy.RulePrivileged, "securityContext.privileged", func(r *api.RolloutRequest) { r.JobTemplate = privileged }},
		{"serviceaccount", policy.RuleServiceAccounts, "serviceAccountName", func(r *api.RolloutRequest) { r.JobTemplate = withSA }},
		{"controlplane", policy.RuleProtectedNodeLabels, "nodeSelector", func(r *api.RolloutRequest) {
			r.NodeSelector = "node-role.kubernetes.io/control-plane"
		}},
		{"drain", policy.RuleDrain, "maintenance.drain", func(r *api.RolloutRequest) {
			r.Maintenance = &api.Maintenance{Drain: &api.Drain{}}
		}},
		{"secret", policy.RuleSecrets, "envFrom[0].secretRef.name", func(r *api.RolloutRequest) {
			r.JobTemplate = strings.Replace(r.JobTemplate, "        image: busybox\n",
				"        image: busybox\n        envFrom: [{secretRef: {name: other-sa-token}}]\n", 1)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := f.Request("deny-"+c.name, time.Second)
			c.change(&req)
			began := time.Now()
			_, err := Result(t, StartOn(t, req, queue))
			took := time.Since(began)
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(err, &appErr), "got %v", err)
			require.Equal(t, api.ErrPolicyDenied, appErr.Type(), appErr.Error())
			require.Contains(t, appErr.Error(), `"`+c.rule+`"`)
			require.Contains(t, appErr.Error(), c.field)
			require.Less(t, took, 20*time.Second, "denied at once, not after retries")
			require.Zero(t, rolloutJobsAnywhere(t, req.Name), "no Job created")
			t.Logf("%s: denied in %v: %s", c.name, took.Round(time.Millisecond), appErr.Message())
		})
	}
}

// TestGuardrailPolicyTightenedMidRolloutRefusesTheNextJob: a rollout pins the template it read
// at the start (a ConfigMap edited meanwhile changes nothing for it), and CreateJob checks every
// Job against the worker's policy as it is now: after the workers restart with a policy that no
// longer allows the image, the next node's CreateJob refuses and the node's outcome says why.
// A new run of the rollout then reads the edited ConfigMap and is refused at once. With
// maintenance.cordon the cordon asks about the Job first, so a refused node is never cordoned
// (onFailure keepCordoned would otherwise leave it so).
func TestGuardrailPolicyTightenedMidRolloutRefusesTheNextJob(t *testing.T) {
	for _, cordoned := range []bool{false, true} {
		t.Run(fmt.Sprintf("cordon=%v", cordoned), func(t *testing.T) { policyTightenedMidRollout(t, cordoned) })
	}
}

func policyTightenedMidRollout(t *testing.T, cordoned bool) {
	ctx := context.Background()
	f := NewFleet(t, 3)
	queue := "e2e-guard-mid-" + rand.String(4)
	grants := "{}"
	if cordoned {
		grants = "{cordon: true}"
	}
	allowing := fmt.Sprintf("namespaces: {%s: %s}\nimages: [docker.io/library/busybox]\n", f.Namespace, grants)
	strict := fmt.Sprintf("namespaces: {%s: %s}\nimages: [registry.example.com/node-tools/]\n", f.Namespace, grants)
	first := policyWorker(t, "guard-mid-a", queue, allowing)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "guard-template", Namespace: f.Namespace},
		Data:       map[string]string{activities.DefaultTemplateKey: JobTemplate(3*time.Second, nil)},
	}
	_, err := stack.Kube.CoreV1().ConfigMaps(f.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	require.NoError(t, err)
	req := f.Request("guard-mid", time.Second)
	req.JobTemplate, req.JobTemplateRef = "", &api.TemplateRef{Name: cm.Name}
	req.Parallelism, req.MaxFailures = 1, "100%"
	if cordoned {
		req.Maintenance = &api.Maintenance{Cordon: true}
	}
	run := StartOn(t, req, queue)
	waitFor(t, 60*time.Second, "the first node's Job", func() bool { return rolloutJobsAnywhere(t, req.Name) >= 1 })

	cm.Data[activities.DefaultTemplateKey] = strings.Replace(cm.Data[activities.DefaultTemplateKey], "image: busybox", "image: evil.example.com/miner:1", 1)
	_, err = stack.Kube.CoreV1().ConfigMaps(f.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.NoError(t, first.Stop())
	policyWorker(t, "guard-mid-b", queue, strict)

	res := Succeeded(t, run) // maxFailures 100%: the refused nodes fail, the rollout completes
	require.Equal(t, 1, res.Counts.Succeeded, "the node started under the old policy finished")
	require.Equal(t, 2, res.Counts.Failed)
	for _, r := range res.Failures {
		require.Equal(t, api.ErrPolicyDenied, r.Reason, "node %s", r.Node)
		require.Contains(t, r.Message, `"images"`, "node %s", r.Node)
		require.Contains(t, r.Message, "busybox", "node %s: the pinned template, not the edited ConfigMap", r.Node)
	}
	require.Equal(t, 1, rolloutJobsAnywhere(t, req.Name), "no Job after the policy changed")
	for _, name := range f.Nodes {
		node, err := stack.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.False(t, node.Spec.Unschedulable, "node %s is cordoned: its Job was refused after its cordon", name)
	}

	rerun := req
	rerun.Name = req.Name + "-again"
	_, err = Result(t, StartOn(t, rerun, queue))
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "got %v", err)
	require.Equal(t, api.ErrPolicyDenied, appErr.Type())
	require.Contains(t, appErr.Error(), "evil.example.com/miner")
}

// TestGuardrailRequesterInStatusAndOnTheNode: the starter records who started the rollout;
// `starter status -o json`, the Job, the Node next to its marker, the Node's Event and the
// RolloutRequester search attribute all carry it.
func TestGuardrailRequesterInStatusAndOnTheNode(t *testing.T) {
	ctx := context.Background()
	f := NewFleet(t, 2)
	req := f.Request("guard-who", time.Second)
	out, code := runStarter(t, "start", "-f", writeRequest(t, req), "--wait", "--reason", "kernel patch CVE-1")
	require.Equal(t, 0, code, out)

	out, code = runStarter(t, "status", req.Name, "-o", "json")
	require.Equal(t, 0, code, out)
	var status map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &status), out)
	who, _ := status["requester"].(string)
	require.Contains(t, who, "@", "user@host: %s", out)
	require.Equal(t, "kernel patch CVE-1", status["reason"])
	t.Logf("requester %q", who)

	for node, jobs := range f.Jobs(t, req.Name) {
		require.Len(t, jobs, 1, node)
		require.Equal(t, who, jobs[0].Annotations[activities.AnnotationRequester], "Job on %s", node)
	}
	for _, name := range f.Nodes {
		node, err := stack.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, node.Annotations[jobspec.NodeMarkerKey(req.Name)], name)
		require.Equal(t, who, node.Annotations[activities.NodeRequesterKey(req.Name)], "Node %s", name)
		events, err := stack.Kube.CoreV1().Events(activities.EventNamespace).List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
		})
		require.NoError(t, err)
		found := false
		for _, e := range events.Items {
			found = found || strings.Contains(e.Message, "requested by "+who)
		}
		require.True(t, found, "Node %s: an Event names the requester", name)
	}

	query := fmt.Sprintf("%s = %q AND %s = %q", api.SearchAttributeRolloutName, req.Name, api.SearchAttributeRequester, who)
	waitFor(t, 30*time.Second, "the rollout found by its requester", func() bool {
		resp, err := stack.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		return err == nil && len(resp.GetExecutions()) == 1
	})
}
