package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/mocks"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// The watch's cache keeps only part of each Node; every verdict on two kept Nodes must be the
// verdict on the full ones, and an update the handler drops (mayMatter false) must be one no
// rollout is owed anything for.
func TestNodeWatchCacheKeepsWhatItJudgesBy(t *testing.T) {
	rng := rand.New(rand.NewPCG(36, 1))
	owedSeen, droppedSeen := 0, 0
	for i := range 5000 {
		old := randomNode(rng)
		n := old.DeepCopy()
		for range 1 + rng.IntN(3) {
			changeNode(rng, n)
		}
		if rng.IntN(8) == 0 {
			old = nil // an added Node
		}
		r := randomConvergingRollout(rng)
		full := nodeChange{old: old, new: n}
		kept := nodeChange{new: keptOfNode(n)}
		if old != nil {
			kept.old = keptOfNode(old)
			require.Equal(t, mayMatter(old, n), mayMatter(kept.old, kept.new), "case %d: mayMatter on the kept Nodes", i)
			if !mayMatter(old, n) {
				droppedSeen++
				require.False(t, r.owes(full), "case %d: an update the handler drops owed a rollout something", i)
			}
		}
		owes := r.owes(full)
		require.Equal(t, owes, r.owes(kept), "case %d: owes on the kept Nodes", i)
		if owes {
			owedSeen++
		}
	}
	require.Greater(t, owedSeen, 500, "the cases must exercise owed nodes")
	require.Greater(t, droppedSeen, 500, "the cases must exercise dropped heartbeats")
}

// A cordon alone (no taint yet: the node lifecycle controller adds that later, if it runs)
// reaches a converging rollout whose field selector names spec.unschedulable.
func TestNodeWatchTellsACordonToAFieldSelector(t *testing.T) {
	node := convergeNode("n1", true, true, "")
	node.Spec.Unschedulable = true
	kube := fake.NewClientset(node)
	tc, told := watchedRollout(t, "spec.unschedulable=false", nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &NodeWatch{Kube: kube, Temporal: tc, TaskQueue: "q", Logger: slog.New(slog.DiscardHandler), Gather: 10 * time.Millisecond, ListEvery: 10 * time.Millisecond}
	require.NoError(t, w.Run(ctx))

	node.Spec.Unschedulable = false
	_, err := kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(told()) == 2 }, 10*time.Second, 10*time.Millisecond, "a resync at the start, then the uncordoned node")
	require.Equal(t, []api.NodesChanged{{Resync: true}, {Nodes: []string{"n1"}}}, told())
}

// A node that changes while Temporal is out of reach (the list of converging rollouts, or the
// signal to one, fails) is not dropped: once Temporal answers, the rollout is told to look at
// all its nodes. A rollout that has ended meanwhile (NotFound) is owed nothing.
func TestNodeWatchTellsAChangeThatAnOutageKeptFromTheRollout(t *testing.T) {
	down := serviceerror.NewUnavailable("connection refused")
	for name, c := range map[string]struct {
		listErr, signalErr error
		want               []api.NodesChanged
	}{
		"list refused":   {listErr: down, want: []api.NodesChanged{{Resync: true}, {Resync: true}}},
		"signal refused": {signalErr: down, want: []api.NodesChanged{{Resync: true}, {Nodes: []string{"n1"}}, {Resync: true}}},
		"rollout ended":  {signalErr: serviceerror.NewNotFound("workflow not found"), want: []api.NodesChanged{{Resync: true}, {Nodes: []string{"n1"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			node := convergeNode("n1", false, true, "")
			kube := fake.NewClientset(node)
			tc, told := watchedRollout(t, "", c.listErr, c.signalErr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &NodeWatch{Kube: kube, Temporal: tc, TaskQueue: "q", Logger: slog.New(slog.DiscardHandler),
				Gather: 10 * time.Millisecond, ListEvery: 10 * time.Millisecond, RetryEvery: 20 * time.Millisecond}
			require.NoError(t, w.Run(ctx))
			node.Labels["pool"] = "gpu" // joins the rollout's selector
			_, err := kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(told()) == len(c.want) }, 10*time.Second, 5*time.Millisecond)
			require.Never(t, func() bool { return len(told()) > len(c.want) }, 200*time.Millisecond, 5*time.Millisecond,
				"once told, the rollout is not told again")
			require.Equal(t, c.want, told())
		})
	}
}

// watchedRollout is a Temporal client that lists one running converging rollout ("gpu",
// selector pool=gpu and fieldSelector) and records the words signalled to it. The second
// list fails with listErr and the second signal with signalErr, when set: the first of each
// is the watch's resync at its start.
func watchedRollout(t *testing.T, fieldSelector string, listErr, signalErr error) (*mocks.Client, func() []api.NodesChanged) {
	tc := &mocks.Client{}
	memo := map[string]string{
		api.MemoMode: api.ModeConverge, "name": "gpu", "templateHash": "h",
		"nodeSelector": "pool=gpu", "fieldSelector": fieldSelector,
	}
	fieldsOf := map[string]*commonpb.Payload{}
	for k, v := range memo {
		p, err := converter.GetDefaultDataConverter().ToPayload(v)
		require.NoError(t, err)
		fieldsOf[k] = p
	}
	listed := &workflowservice.ListWorkflowExecutionsResponse{
		Executions: []*workflowpb.WorkflowExecutionInfo{{
			Execution: &commonpb.WorkflowExecution{WorkflowId: "rollout-gpu"},
			Memo:      &commonpb.Memo{Fields: fieldsOf},
		}},
	}
	if listErr != nil {
		tc.On("ListWorkflow", mock.Anything, mock.Anything).Return(listed, nil).Once()
		tc.On("ListWorkflow", mock.Anything, mock.Anything).Return(nil, listErr).Once()
	}
	tc.On("ListWorkflow", mock.Anything, mock.Anything).Return(listed, nil)
	var mu sync.Mutex
	var told []api.NodesChanged
	record := func(args mock.Arguments) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, args.Get(4).(api.NodesChanged))
	}
	signal := func() *mock.Call {
		return tc.On("SignalWorkflow", mock.Anything, "rollout-gpu", "", api.SignalNodesChanged, mock.Anything).Run(record)
	}
	if signalErr != nil {
		signal().Return(nil).Once()
		signal().Return(signalErr).Once()
	}
	signal().Return(nil)
	return tc, func() []api.NodesChanged {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(told)
	}
}

// What the watch's cache holds per Node of a real kubelet's shape, whole and as kept:
// go test ./activities -run '^$' -bench NodeWatchCache -benchtime 1x
func BenchmarkNodeWatchCache(b *testing.B) {
	raw, err := json.Marshal(kubeletShapedNode("ip-10-0-12-34.eu-west-1.compute.internal"))
	require.NoError(b, err)
	decode := func() *corev1.Node {
		n := &corev1.Node{}
		require.NoError(b, json.Unmarshal(raw, n))
		return n
	}
	const nodes = 2000
	// whole: the Node as decoded, less its managed fields (which every cache of ours drops).
	whole := heapHeldBy(func() any {
		held := make([]*corev1.Node, nodes)
		for i := range held {
			held[i] = decode()
			held[i].ManagedFields = nil
		}
		return held
	})
	kept := heapHeldBy(func() any {
		held := make([]*corev1.Node, nodes)
		for i := range held {
			held[i] = keptOfNode(decode())
		}
		return held
	})
	for b.Loop() {
		_ = keptOfNode(decode())
	}
	// After the loop: its start deletes metrics reported before it.
	b.ReportMetric(float64(len(raw)), "JSON-B/node")
	b.ReportMetric(float64(whole)/nodes, "whole-B/node")
	b.ReportMetric(float64(kept)/nodes, "kept-B/node")
}

// heapHeldBy is how many heap bytes what build returns holds after a collection.
func heapHeldBy(build func() any) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	held := build()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(held)
	return after.HeapAlloc - before.HeapAlloc
}

// kubeletShapedNode is a Node as a cloud kubelet reports it: cloud labels, 50 images (the
// kubelet's default cap on the list), five conditions, addresses, capacity and managed fields.
func kubeletShapedNode(name string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("6f1c2a3e-0d4b-4f6a-9a7e-3b2c1d0e9f8a"), ResourceVersion: "123456789",
		Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
			"node.kubernetes.io/instance-type": "m6i.2xlarge", "topology.kubernetes.io/region": "eu-west-1",
			"topology.kubernetes.io/zone": "eu-west-1a", "eks.amazonaws.com/nodegroup": "general-purpose-2026",
			"eks.amazonaws.com/capacityType": "ON_DEMAND", "pool": "general",
		},
		Annotations: map[string]string{
			"node.alpha.kubernetes.io/ttl":                           "0",
			"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			"csi.volume.kubernetes.io/nodeid":                        `{"ebs.csi.aws.com":"i-0a1b2c3d4e5f67890"}`,
			jobspec.NodeMarkerKey("gpu"):                             "h:succeeded",
		},
	}}
	for _, m := range []string{"kubelet", "kube-controller-manager", "aws-cloud-controller-manager", "kube-scheduler"} {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: m, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fmt.Sprintf(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:images":{},"f:nodeInfo":{"f:bootID":{},"f:kernelVersion":{}}},"f:manager":"%s"}`, m)),
		})
	}
	n.Spec.ProviderID = "aws:///eu-west-1a/i-0a1b2c3d4e5f67890"
	n.Spec.PodCIDR = "10.244.12.0/24"
	n.Spec.PodCIDRs = []string{"10.244.12.0/24"}
	now := metav1.NewTime(time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		kind           corev1.NodeConditionType
		status         corev1.ConditionStatus
		reason, detail string
	}{
		{corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"},
		{corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
		{corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"},
		{corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"},
		{"KernelDeadlock", corev1.ConditionFalse, "KernelHasNoDeadlock", "kernel has no deadlock"},
	} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c.kind, Status: c.status,
			LastHeartbeatTime: now, LastTransitionTime: now, Reason: c.reason, Message: c.detail})
	}
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.12.34"}, {Type: corev1.NodeHostName, Address: name},
		{Type: corev1.NodeInternalDNS, Address: name},
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32386524Ki"),
		corev1.ResourcePods: resource.MustParse("58"), corev1.ResourceEphemeralStorage: resource.MustParse("104845292Ki"),
		"hugepages-1Gi": resource.MustParse("0"), "hugepages-2Mi": resource.MustParse("0"),
	}
	n.Status.Capacity, n.Status.Allocatable = resources, resources.DeepCopy()
	n.Status.NodeInfo = corev1.NodeSystemInfo{
		MachineID: "ec2a1b2c3d4e5f6a7b8c9d0e1f2a3b4c", SystemUUID: "ec2a1b2c-3d4e-5f6a-7b8c-9d0e1f2a3b4c",
		BootID: "0e6b2f4a-1c3d-4e5f-8a9b-0c1d2e3f4a5b", KernelVersion: "6.1.119-129.201.amzn2023.x86_64",
		OSImage: "Amazon Linux 2023.6.20241212", ContainerRuntimeVersion: "containerd://1.7.23",
		KubeletVersion: "v1.33.5-eks-1234567", OperatingSystem: "linux", Architecture: "amd64",
	}
	for i := range 50 {
		repo := fmt.Sprintf("602401143452.dkr.ecr.eu-west-1.amazonaws.com/team-%02d/service-image-%02d", i%7, i)
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("%s@sha256:%064x", repo, i*7919+1), fmt.Sprintf("%s:v1.%d.%d", repo, i, i*3)},
			SizeBytes: int64(50_000_000 + i*1_234_567),
		})
	}
	return n
}

// randomNode is a Node with a random share of what the watch judges by and what it does not.
func randomNode(rng *rand.Rand) *corev1.Node {
	n := kubeletShapedNode(fmt.Sprintf("n-%d", rng.IntN(4)))
	n.Labels = map[string]string{}
	if rng.IntN(2) == 0 {
		n.Labels["pool"] = "gpu"
	}
	n.Annotations = map[string]string{}
	if m := []string{"", "h:succeeded", "h:aborted", "d:succeeded", "old:failed"}[rng.IntN(5)]; m != "" {
		n.Annotations[jobspec.NodeMarkerKey("gpu")] = m
	}
	n.Spec.Unschedulable = rng.IntN(3) == 0
	if rng.IntN(3) == 0 {
		n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	}
	setCondition(n, corev1.NodeReady, rng.IntN(4) != 0)
	return n
}

// changeNode makes one random change, most of them of the kind a heartbeat makes.
func changeNode(rng *rand.Rand, n *corev1.Node) {
	switch rng.IntN(12) {
	case 0:
		n.UID = types.UID(fmt.Sprintf("uid-%d", rng.IntN(1000)))
	case 1:
		if _, ok := n.Labels["pool"]; ok {
			delete(n.Labels, "pool")
		} else {
			n.Labels["pool"] = "gpu"
		}
	case 2:
		n.Annotations[jobspec.NodeMarkerKey("gpu")] = []string{"h:succeeded", "h:failed", "h:aborted", "d:succeeded"}[rng.IntN(4)]
	case 3:
		n.Spec.Unschedulable = !n.Spec.Unschedulable
	case 4:
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
		} else {
			n.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}
	case 5:
		setCondition(n, corev1.NodeReady, !nodeReady(n))
	case 6:
		setCondition(n, corev1.NodeDiskPressure, rng.IntN(2) == 0)
	case 7:
		n.Status.Images = n.Status.Images[:rng.IntN(len(n.Status.Images)+1)]
	default:
		n.ResourceVersion = fmt.Sprint(rng.Int())
		for i := range n.Status.Conditions {
			n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(time.Unix(rng.Int64N(1e9), 0))
		}
	}
}

// setCondition sets a condition's status, adding the condition if the Node has none of its type.
func setCondition(n *corev1.Node, kind corev1.NodeConditionType, true_ bool) {
	status := corev1.ConditionFalse
	if true_ {
		status = corev1.ConditionTrue
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == kind {
			n.Status.Conditions[i].Status = status
			return
		}
	}
	n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: kind, Status: status})
}

// randomConvergingRollout is the rollout "gpu" with or without onDeselect and a field selector.
func randomConvergingRollout(rng *rand.Rand) convergingRollout {
	r := convergingRollout{name: "gpu", hash: "h", selector: labels.Everything(), fieldSelector: fields.Everything()}
	if rng.IntN(2) == 0 {
		r.selector = labels.SelectorFromSet(labels.Set{"pool": "gpu"})
	}
	if rng.IntN(2) == 0 {
		r.fieldSelector = fields.OneTermEqualSelector("spec.unschedulable", "false")
	}
	if rng.IntN(2) == 0 {
		r.deselectHash = "d"
	}
	return r
}
