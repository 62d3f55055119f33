package workflows

import (
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// taintedFleet is a cluster of four nodes: one our own cordon left cordoned (an earlier run
// kept it so), one with a taint the template does not tolerate, one with a taint it
// tolerates, one with a taint that only steers a scheduler.
func taintedFleet() []string {
	return []string{"node-cordoned", "node-gpu", "node-infra", "node-prefer"}
}

func taintedNode(name string, unschedulable bool, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Unschedulable: unschedulable, Taints: taints}}
}

// runTaintedFleet runs req over taintedFleet with the real listing on a fake cluster, and
// returns the nodes whose child ran and the rollout's result.
func runTaintedFleet(t *testing.T, req api.RolloutRequest) ([]string, api.RolloutResult) {
	return runTaintedFleetPrepared(t, req, true)
}

// runTaintedFleetPrepared is runTaintedFleet whose preparation says whether it read the
// template's tolerations (false: as a worker from before the check recorded it).
func runTaintedFleetPrepared(t *testing.T, req api.RolloutRequest, tolerationsRead bool) ([]string, api.RolloutResult) {
	t.Helper()
	ran, res, err := runTaintedFleetEnding(t, req, tolerationsRead)
	require.NoError(t, err)
	return ran, res
}

// runTaintedFleetEnding is runTaintedFleetPrepared that returns how the rollout ended.
func runTaintedFleetEnding(t *testing.T, req api.RolloutRequest, tolerationsRead bool) ([]string, api.RolloutResult, error) {
	t.Helper()
	kube := fake.NewSimpleClientset(
		taintedNode("node-cordoned", true, corev1.Taint{Key: jobspec.UnschedulableTaintKey, Effect: corev1.TaintEffectNoSchedule}),
		taintedNode("node-gpu", false, corev1.Taint{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}),
		taintedNode("node-infra", false, corev1.Taint{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoExecute}),
		taintedNode("node-prefer", false, corev1.Taint{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}),
	)
	cluster := activities.New(kube)
	env, a := newTestEnv(nil)
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h", TolerationsRead: tolerationsRead,
		Tolerations: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoExecute}}}, nil)
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(cluster.ListNodes)
	var mu sync.Mutex
	var ran []string
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(_ workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, in.Node)
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	}).Maybe()
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	slices.Sort(ran)
	var res api.RolloutResult
	if err := env.GetWorkflowError(); err != nil {
		return ran, res, err
	}
	require.NoError(t, env.GetWorkflowResult(&res))
	return ran, res, nil
}

// A canary whose taint the Job does not tolerate is skipped, so it proves nothing: the
// rollout stops after the canary stage, naming it and its reason, and starts no other node.
func TestACanaryWithAnUntoleratedTaintStopsTheRollout(t *testing.T) {
	req := request(taintedFleet()...)
	req.Canary = &api.Canary{Nodes: []string{"node-gpu", "node-infra"}}
	ran, _, err := runTaintedFleetEnding(t, req, true)
	appErr := requireAppError(t, err, api.ErrCanaryFailed)
	require.Contains(t, appErr.Message(), "1 of 2 canary nodes did not run")
	require.Contains(t, appErr.Message(), "not run: node-gpu (skipped "+api.ReasonUntoleratedTaint+")")
	require.Equal(t, []string{"node-infra"}, ran)
}

// A node whose taint the Pod does not tolerate is skipped, named by its taint, and not charged
// to the failure budget (none is allowed here); our own cordon's taint, a tolerated taint and a
// PreferNoSchedule taint keep no node from its Job.
func TestUntoleratedTaintSkipsTheNodeWithOurCordonPresent(t *testing.T) {
	req := request(taintedFleet()...)
	req.Maintenance = &api.Maintenance{Cordon: true}
	ran, res := runTaintedFleet(t, req)
	require.Equal(t, []string{"node-cordoned", "node-infra", "node-prefer"}, ran)
	require.Equal(t, 1, res.Counts.Skipped)
	require.Equal(t, 3, res.Counts.Succeeded)
	require.Empty(t, res.Failures)

	// The dry run lists the node it would skip, with the taint.
	req.DryRun = true
	_, res = runTaintedFleet(t, req)
	i := slices.IndexFunc(res.Planned, func(p api.PlannedNode) bool { return p.Node == "node-gpu" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, api.PlannedNode{Node: "node-gpu", Skip: api.SkipUntoleratedTaint, Reason: "gpu=true:NoSchedule"}, res.Planned[i])
	require.Equal(t, 1, res.Counts.Skipped)
	require.Equal(t, 3, res.Counts.Pending)
}

// The skipped node's result says which taint kept it and how to run it anyway.
func TestUntoleratedTaintResultNamesTheTaint(t *testing.T) {
	r := untoleratedResult(queuedNode{name: "node-gpu", skip: api.SkipUntoleratedTaint, reason: "gpu=true:NoSchedule"})
	require.Equal(t, api.OutcomeSkipped, r.Outcome)
	require.Equal(t, api.ReasonUntoleratedTaint, r.Reason)
	require.Contains(t, r.Message, "gpu=true:NoSchedule")
	require.Contains(t, r.Message, "taints: ignore")
}

// taints: ignore runs every node whatever its taints.
func TestTaintsIgnoreRunsEveryNode(t *testing.T) {
	req := request(taintedFleet()...)
	req.Taints = api.TaintsIgnore
	ran, res := runTaintedFleet(t, req)
	require.Equal(t, taintedFleet(), ran)
	require.Equal(t, 0, res.Counts.Skipped)
}

// A rollout whose template was prepared before the check (its recorded preparation says
// nothing of tolerations) goes on as it began: no node is skipped for a taint.
func TestRolloutPreparedBeforeTheTaintCheckChecksNoTaints(t *testing.T) {
	ran, res := runTaintedFleetPrepared(t, request(taintedFleet()...), false)
	require.Equal(t, taintedFleet(), ran)
	require.Equal(t, 0, res.Counts.Skipped)
}

// A taint the request's own onSuccess adds (an earlier run of it left node-gpu so) keeps no
// node from its Job: the rollout re-runs the nodes it marked.
func TestTaintTheRolloutAddsItselfDoesNotSkipTheNode(t *testing.T) {
	req := request(taintedFleet()...)
	req.Maintenance = &api.Maintenance{Cordon: true, OnSuccess: &api.OnSuccess{
		AddTaints: []api.Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}}}}
	ran, res := runTaintedFleet(t, req)
	require.Equal(t, taintedFleet(), ran)
	require.Equal(t, 0, res.Counts.Skipped)
}
