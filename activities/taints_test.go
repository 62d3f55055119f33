package activities

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/noderollout/noderollout/api"
)

// PrepareTemplate reads the template Pod's tolerations for the listing's taint check.
func TestPrepareTemplateReadsTheTolerations(t *testing.T) {
	_, a := newCluster(testNS(testNamespace))
	tmpl := strings.Replace(testTemplate, "      restartPolicy: Never\n", "      restartPolicy: Never\n      tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]\n", 1)
	got, err := execute[PreparedTemplate](t, a, a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: tmpl})
	require.NoError(t, err)
	require.True(t, got.TolerationsRead)
	require.Equal(t, []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, got.Tolerations)
}

// The listing (by selector and by name) puts a node whose taint the Pod does not tolerate in
// Untolerated, named by the taint; a node our cordon left cordoned and one with a taint the
// rollout puts on nodes itself run.
func TestListNodesFindsUntoleratedTaints(t *testing.T) {
	gpu := testNode("gpu", nil)
	gpu.Labels = map[string]string{"pool": "a"}
	gpu.Spec.Taints = []corev1.Taint{{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoExecute}}
	cordoned := testNode("cordoned", nil)
	cordoned.Labels = map[string]string{"pool": "a"}
	cordoned.Spec.Unschedulable = true
	cordoned.Spec.Taints = []corev1.Taint{{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule}}
	own := testNode("own", nil)
	own.Labels = map[string]string{"pool": "a"}
	own.Spec.Taints = []corev1.Taint{{Key: "driver-pending", Effect: corev1.TaintEffectNoSchedule}}
	_, a := newCluster(gpu, cordoned, own)
	check := &api.TaintCheck{OwnKeys: []string{"driver-pending"}}
	for _, in := range []ListNodesInput{
		{Rollout: "r", Selector: "pool=a", Limit: 10, TaintCheck: check},
		{Rollout: "r", Names: []string{"gpu", "cordoned", "own"}, Limit: 10, TaintCheck: check},
	} {
		res, err := a.ListNodes(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, []string{"cordoned", "own"}, res.Nodes)
		require.Equal(t, map[string]string{"gpu": "gpu=true:NoExecute"}, res.Untolerated)
		in.TaintCheck = nil
		res, err = a.ListNodes(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, []string{"cordoned", "gpu", "own"}, res.Nodes, "no check: every node runs")
	}
}
