package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

func TestParseActionsSumsByTypeOverNamespacesAndOperations(t *testing.T) {
	text := strings.Join([]string{
		`# HELP action action counter`,
		`# TYPE action counter`,
		`action{action_type="command_StartChildWorkflowExecution",namespace="default",operation="RespondWorkflowTaskCompleted",service_name="frontend"} 123`,
		`action{action_type="command_StartChildWorkflowExecution_Extra",namespace="default",operation="RespondWorkflowTaskCompleted",service_name="frontend"} 123`,
		`action{action_type="grpc_QueryWorkflow",namespace="default",operation="QueryWorkflow",service_name="frontend"} 30`,
		`action{action_type="grpc_QueryWorkflow",namespace="other",operation="QueryWorkflow",service_name="frontend"} 8`,
		`actions_total{action_type="x"} 5`,
	}, "\n")
	assert.Equal(t, map[string]float64{
		"command_StartChildWorkflowExecution":       123,
		"command_StartChildWorkflowExecution_Extra": 123,
		"grpc_QueryWorkflow":                        38,
	}, parseActions(text))
}

func TestActionsPerNodeLeaveTheQueriesOut(t *testing.T) {
	before := usage{actions: map[string]float64{"command_ScheduleActivityTask": 10, queryAction: 2}}
	after := usage{actions: map[string]float64{"command_ScheduleActivityTask": 18, "command_BatchMarkers": 8, queryAction: 6}}
	r := &result{System: systemNoderollout, Nodes: 4, MakespanS: 120, Watch: "status-w"}
	r.fill(before, after)
	r.derive()
	assert.Equal(t, map[string]float64{"command_ScheduleActivityTask": 8, "command_BatchMarkers": 8, queryAction: 4}, r.Actions)
	assert.Equal(t, 4.0, r.ActionsPerNode)
	assert.Equal(t, 1.0, r.QueriesPerNode)
	assert.Equal(t, 2.0, r.WatchQueriesPerMinute, "4 queries in 2 minutes")
}

func TestPairWithSUCTakesTheFasterPeerRun(t *testing.T) {
	rep := []*result{
		{System: systemBaseline, MakespanS: 10},
		{System: systemNoderollout, MakespanS: 12},
		{System: systemSUC, MakespanS: 60},
		{System: systemSUCQPS, MakespanS: 20},
	}
	pairWithSUC(rep)
	assert.InDelta(t, 0.5, rep[0].VsSUC, 1e-9)
	assert.InDelta(t, 0.6, rep[1].VsSUC, 1e-9)
	assert.InDelta(t, 3.0, rep[2].VsSUC, 1e-9)
	assert.InDelta(t, 1.0, rep[3].VsSUC, 1e-9)

	noPeer := []*result{{System: systemBaseline, MakespanS: 10}}
	pairWithSUC(noPeer)
	assert.Zero(t, noPeer[0].VsSUC)
}

func TestSUCPlanSelectsTheFleetPAtOnceForD(t *testing.T) {
	f := newFleetSpec("r1", 3, 0)
	plan := sucPlan("bench-x", runSpec{system: systemSUC, fleet: f, namespace: "ns", parallelism: 7, jobSeconds: 2.5})
	concurrency, _, _ := unstructured.NestedInt64(plan.Object, "spec", "concurrency")
	assert.EqualValues(t, 7, concurrency)
	selector, _, _ := unstructured.NestedStringMap(plan.Object, "spec", "nodeSelector", "matchLabels")
	assert.Equal(t, map[string]string{labelFleet: f.id}, selector)
	annotations := plan.GetAnnotations()
	assert.Equal(t, "2.5", annotations["noderollout.dev/run-seconds"], "kwok's run time, copied by SUC to its Pods")
	assert.Equal(t, "ns", plan.GetNamespace())
	image, _, _ := unstructured.NestedString(plan.Object, "spec", "upgrade", "image")
	assert.NotEmpty(t, image)
}

func TestTracerCountsASUCJobFromWhenItMayRunUntilTheNodeIsLabelled(t *testing.T) {
	tr := &tracer{nodes: map[string]*nodeTimes{}}
	zero, one := int32(0), int32(1)
	job := func(uid string, parallelism *int32, conditions ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "apply-on-n1", UID: types.UID(uid), Labels: map[string]string{sucNodeLabel: "n1"}},
			Spec:       batchv1.JobSpec{Parallelism: parallelism},
			Status:     batchv1.JobStatus{Conditions: conditions},
		}
	}
	// Created paused, then deleted as out of turn: no slot held.
	tr.job(job("a", &zero), false)
	tr.job(cache.DeletedFinalStateUnknown{Obj: job("a", &zero)}, true)
	assert.NotContains(t, tr.nodes, "n1", "a paused Job holds no slot, and its deletion frees none")

	tr.job(job("b", &one), false)
	require.Contains(t, tr.nodes, "n1")
	created := tr.nodes["n1"].jobCreated
	assert.False(t, created.IsZero())
	tr.pod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{sucNodeLabel: "n1"}}}) // not yet scheduled
	assert.False(t, tr.nodes["n1"].podCreated.IsZero(), "an unscheduled Pod counts for its Job's node")
	tr.job(job("b", &one, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}), false)
	labelled := time.Now().Add(time.Second)
	tr.release("n1", labelled)
	ph := tr.phases(created.Add(-time.Second), labelled.Add(time.Second), 1)
	assert.Equal(t, 1, ph.JobDoneToGone.N, "done -> the Node's label")
	assert.InDelta(t, labelled.Sub(tr.nodes["n1"].jobFinished).Seconds(), ph.JobDoneToGone.Mean, 1e-6)
}
