//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noderollout/noderollout/api"
)

// taint puts taints on a node as an operator would (kubectl taint).
func taint(t *testing.T, node string, taints ...corev1.Taint) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"taints": taints}})
	require.NoError(t, err)
	_, err = stack.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
}

// A node whose NoSchedule taint the Job's Pod does not tolerate is skipped, naming the taint,
// while a node with a taint the Pod tolerates runs, and our own cordon (maintenance.cordon)
// keeps no node from its Job; taints: ignore runs the skipped node too.
func TestUntoleratedTaintIsSkippedAToleratedOneRuns(t *testing.T) {
	f := NewFleet(t, 3)
	gpu, infra, plain := f.Nodes[0], f.Nodes[1], f.Nodes[2]
	taint(t, gpu, corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule})
	taint(t, infra, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule})
	req := f.Request("taints", time.Second)
	req.JobTemplate = strings.Replace(req.JobTemplate, "      restartPolicy: Never\n",
		"      restartPolicy: Never\n      tolerations:\n      - {key: dedicated, operator: Equal, value: infra, effect: NoSchedule}\n", 1)
	req.Maintenance = &api.Maintenance{Cordon: true}

	dry := req
	dry.DryRun = true
	out, code := runStarter(t, "dry-run", "-f", writeRequest(t, dry))
	require.Zero(t, code, out)
	require.Regexp(t, gpu+`\s+skip: untoleratedTaint \(gpu=true:NoSchedule\)`, out)

	res := Succeeded(t, Start(t, req))
	require.Equal(t, 2, res.Counts.Succeeded)
	require.Equal(t, 1, res.Counts.Skipped)
	require.Empty(t, res.Failures)
	jobs := f.Jobs(t, req.Name)
	require.Empty(t, jobs[gpu], "no Job on the node whose taint the Pod does not tolerate")
	require.Len(t, jobs[infra], 1)
	require.Len(t, jobs[plain], 1)

	req.Taints = api.TaintsIgnore
	req.Rerun = true
	req.Name += "-ignore"
	res = Succeeded(t, Start(t, req))
	require.Equal(t, 3, res.Counts.Succeeded)
	require.Len(t, f.Jobs(t, req.Name)[gpu], 1)
}
