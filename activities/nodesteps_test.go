package activities

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// bootNode is a node on boot id, Ready or not.
func bootNode(id string, ready corev1.ConditionStatus) *corev1.Node {
	n := healthyNode("n1", ready)
	n.Status.NodeInfo.BootID = id
	return n
}

// TestWaitRebootWaitsForANewBootAndItsConditions: the old boot, then a new boot not yet Ready,
// do not end the wait; the new boot Ready does.
func TestWaitRebootWaitsForANewBootAndItsConditions(t *testing.T) {
	cs := fake.NewClientset(bootNode("b1", corev1.ConditionTrue))
	a := New(cs)
	a.HealthPollInterval = time.Millisecond
	states := []*corev1.Node{bootNode("b1", corev1.ConditionTrue), bootNode("b1", corev1.ConditionFalse), bootNode("b2", corev1.ConditionFalse), bootNode("b2", corev1.ConditionTrue)}
	gets := 0
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		n := states[min(gets, len(states)-1)]
		gets++
		return true, n, nil
	})
	_, err := newEnv(a).ExecuteActivity(a.WaitReboot, RebootWaitInput{Node: "n1", BootID: "b1",
		Conditions: map[string]string{"Ready": "True"}, BackBy: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, len(states), gets, "it ended at the first read of the new boot Ready")
}

// TestWaitRebootTimesOut: a node still on its old boot at the deadline is RebootTimedOut, and
// the message says why; one that rebooted but is not Ready says that.
func TestWaitRebootTimesOut(t *testing.T) {
	for id, want := range map[string]string{"b1": `its boot ID is still "b1"`, "b2": "it rebooted, but Ready=False"} {
		a := New(fake.NewClientset(bootNode(id, corev1.ConditionFalse)))
		a.HealthPollInterval = time.Millisecond
		_, err := newEnv(a).ExecuteActivity(a.WaitReboot, RebootWaitInput{Node: "n1", BootID: "b1",
			Conditions: map[string]string{"Ready": "True"}, BackBy: time.Now().Add(20 * time.Millisecond), Job: JobRef{Namespace: "ns", Name: "reboot-1"}})
		appErr := requireAppError(t, err, api.ErrRebootTimedOut, true)
		require.Contains(t, appErr.Message(), want)
		require.Contains(t, appErr.Message(), "ns/reboot-1")
	}
}

// TestRebootRequestedReadsTheTerminationMessage: only a container that ended with
// reboot-required asks for the reboot.
func TestRebootRequestedReadsTheTerminationMessage(t *testing.T) {
	pod := func(name, msg string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{batchv1.ControllerUidLabel: "uid-" + name}},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "c", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: msg}}}}}}
	}
	a := New(fake.NewClientset(pod("asks", "reboot-required\n"), pod("quiet", "done")))
	asks, err := a.rebootRequested(context.Background(), JobRef{Namespace: "ns", Name: "asks", UID: "uid-asks"})
	require.NoError(t, err)
	require.True(t, asks)
	quiet, err := a.rebootRequested(context.Background(), JobRef{Namespace: "ns", Name: "quiet", UID: "uid-quiet"})
	require.NoError(t, err)
	require.False(t, quiet)
}

// TestWaitBlockingPods: a matching Pod running on the node blocks it until the deadline, named
// in the error; Pods of other nodes, other labels or that ended do not; once it ends the wait does.
func TestWaitBlockingPods(t *testing.T) {
	training := func(name, node string, phase corev1.PodPhase) *corev1.Pod {
		return tenantPod(name, node, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "training"}; p.Status.Phase = phase })
	}
	cs := fake.NewClientset(training("t1", "n1", corev1.PodRunning), training("t2", "n2", corev1.PodRunning),
		training("t3", "n1", corev1.PodSucceeded), tenantPod("web", "n1", nil))
	a := New(cs)
	a.HealthPollInterval = time.Millisecond
	_, err := newEnv(a).ExecuteActivity(a.WaitBlockingPods, BlockingPodsInput{Node: "n1", Selector: "app=training", FreeBy: time.Now().Add(20 * time.Millisecond)})
	appErr := requireAppError(t, err, api.ErrBlocked, true)
	require.Contains(t, appErr.Message(), "1 Pod(s)")
	require.Contains(t, appErr.Message(), "tenant/t1")
	require.NotContains(t, appErr.Message(), "t2")

	lists := 0
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		if lists < 3 {
			return false, nil, nil
		}
		return true, &corev1.PodList{Items: []corev1.Pod{*training("t1", "n1", corev1.PodSucceeded)}}, nil
	})
	_, err = newEnv(a).ExecuteActivity(a.WaitBlockingPods, BlockingPodsInput{Node: "n1", Selector: "app=training", FreeBy: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, 3, lists, "it ended at the first list after the Pod ended")
}

// TestMarkNodeDoneTouchesOnlyTheNamedKeys: the labels set, the named taint lifted, the added
// one there (its value updated when present), every other label and taint as it was; a second
// run writes nothing.
func TestMarkNodeDoneTouchesOnlyTheNamedKeys(t *testing.T) {
	n := testNode("n1", nil)
	n.Labels = map[string]string{"pool": "gpu", "example.com/gpu-driver": "535"}
	n.Spec.Taints = []corev1.Taint{{Key: "example.com/driver-not-ready", Effect: corev1.TaintEffectNoSchedule},
		{Key: "other", Value: "x", Effect: corev1.TaintEffectNoExecute}, {Key: "example.com/driver", Value: "535", Effect: corev1.TaintEffectPreferNoSchedule}}
	cs, a := newCluster(n)
	in := MarkNodeInput{Rollout: "gpu", Namespace: testNamespace, Node: "n1", OnSuccess: &api.OnSuccess{
		Labels: map[string]string{"example.com/gpu-driver": "550.54"}, RemoveTaints: []string{"example.com/driver-not-ready"},
		AddTaints: []api.Taint{{Key: "example.com/driver", Value: "550.54", Effect: "PreferNoSchedule"}}}}
	_, err := newEnv(a).ExecuteActivity(a.MarkNodeDone, in)
	require.NoError(t, err)
	got, err := cs.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"pool": "gpu", "example.com/gpu-driver": "550.54"}, got.Labels)
	require.Equal(t, []corev1.Taint{{Key: "other", Value: "x", Effect: corev1.TaintEffectNoExecute},
		{Key: "example.com/driver", Value: "550.54", Effect: corev1.TaintEffectPreferNoSchedule}}, got.Spec.Taints)
	require.Equal(t, 1, countActions(cs, "patch", "nodes"))
	_, err = newEnv(a).ExecuteActivity(a.MarkNodeDone, in)
	require.NoError(t, err)
	require.Equal(t, 1, countActions(cs, "patch", "nodes"), "a node already marked is not written again")
}

// TestMarkNodeDoneAsksThePolicyFirst: a key the namespace's rules forbid (by default the
// node's role) is refused before any write.
func TestMarkNodeDoneAsksThePolicyFirst(t *testing.T) {
	cs, a := newCluster(testNode("n1", nil))
	p, err := policy.Parse([]byte("namespaces: {\"*\": {}}\n"))
	require.NoError(t, err)
	a.Policy = p
	_, err = newEnv(a).ExecuteActivity(a.MarkNodeDone, MarkNodeInput{Namespace: testNamespace, Node: "n1",
		OnSuccess: &api.OnSuccess{Labels: map[string]string{"node-role.kubernetes.io/gpu": ""}}})
	appErr := requireAppError(t, err, api.ErrPolicyDenied, true)
	require.Contains(t, appErr.Message(), policy.RuleForbiddenNodeLabels)
	require.Zero(t, countActions(cs, "patch", "nodes"))
	require.Zero(t, countActions(cs, "get", "nodes"), "refused before the node is even read")
}

// TestCreateStepJobRunsOnlyATemplateItsRolloutPrepared: a node of a running Rollout gets its
// step Job only from a step template that Rollout's memo lists; another stored template is
// refused before anything is written.
func TestCreateStepJobRunsOnlyATemplateItsRolloutPrepared(t *testing.T) {
	rollout := &commonpb.WorkflowExecution{WorkflowId: "rollout-kata", RunId: "r1"}
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	req := testRequest("node-a")
	req.Template = ""
	for name, c := range map[string]struct {
		listed  []string
		refused bool
	}{
		"listed":        {listed: []string{"other", req.TemplateHash}},
		"not listed":    {listed: []string{"other"}, refused: true},
		"memo has none": {},
	} {
		t.Run(name, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil), testNS(testNamespace))
			require.NoError(t, a.storeTemplate(context.Background(), testNamespace, testTemplate, req.TemplateHash))
			a.Lineage = &Lineage{Temporal: lineageOf(rollout, "Rollout", running, "main-hash", c.listed...),
				RolloutType: "Rollout", NodeTypes: []string{testCallerType}}
			_, err := newEnv(a).ExecuteActivity(a.CreateStepJob, StepJobRequest{JobRequest: req, Step: StepReboot})
			if !c.refused {
				require.NoError(t, err)
				require.Equal(t, 1, countActions(cs, "create", "jobs"))
				return
			}
			appErr := requireAppError(t, err, api.ErrNotStartedByARollout, true)
			require.Contains(t, appErr.Message(), "did not prepare")
			require.Zero(t, countActions(cs, "create", "jobs"), "nothing written")
		})
	}
}
