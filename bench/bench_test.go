package main

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/bench/fakestats"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, url string
		want        apiCall
	}{
		{"GET", "/api/v1/nodes/n1", apiCall{"get", "nodes", ""}},
		{"GET", "/api/v1/nodes?labelSelector=a%3Db&limit=500", apiCall{"list", "nodes", ""}},
		{"PATCH", "/api/v1/nodes/n1", apiCall{"patch", "nodes", ""}},
		{"PATCH", "/api/v1/nodes/n1/status", apiCall{"patch", "nodes", "status"}},
		{"GET", "/apis/batch/v1/jobs?labelSelector=x&watch=true", apiCall{"watch", "jobs", ""}},
		{"GET", "/apis/batch/v1/watch/jobs", apiCall{"watch", "jobs", ""}},
		{"GET", "/apis/batch/v1/namespaces/ns/jobs/j", apiCall{"get", "jobs", ""}},
		{"POST", "/apis/batch/v1/namespaces/ns/jobs", apiCall{"create", "jobs", ""}},
		{"DELETE", "/apis/batch/v1/namespaces/ns/jobs/j", apiCall{"delete", "jobs", ""}},
		{"DELETE", "/apis/batch/v1/namespaces/ns/jobs", apiCall{"deletecollection", "jobs", ""}},
		{"PUT", "/apis/batch/v1/namespaces/ns/jobs/j/status", apiCall{"update", "jobs", "status"}},
		{"GET", "/api/v1/namespaces/ns/pods/p/log?tailLines=100", apiCall{"get", "pods", "log"}},
		{"GET", "/api/v1/namespaces/ns", apiCall{"get", "namespaces", ""}},
		{"GET", "/api/v1/namespaces", apiCall{"list", "namespaces", ""}},
		{"POST", "/api/v1/namespaces/default/events", apiCall{"create", "events", ""}},
		{"GET", "/api/v1/namespaces/ns/configmaps/c", apiCall{"get", "configmaps", ""}},
		{"GET", "/apis", apiCall{"get", "(non-resource)", ""}},
		{"GET", "/api/v1", apiCall{"get", "(discovery)", ""}},
		{"GET", "/version", apiCall{"get", "(non-resource)", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			require.NoError(t, err)
			assert.Equal(t, tt.want, classify(tt.method, u))
		})
	}
}

func TestParseRequestTotals(t *testing.T) {
	text := strings.Join([]string{
		`# HELP apiserver_request_total [STABLE] Counter of apiserver requests`,
		`# TYPE apiserver_request_total counter`,
		`apiserver_request_total{code="201",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 120`,
		`apiserver_request_total{code="409",component="apiserver",dry_run="",group="batch",resource="jobs",scope="resource",subresource="",verb="POST",version="v1"} 3`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="cluster",subresource="",verb="LIST",version="v1"} 7`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="resource",subresource="status",verb="PATCH",version="v1"} 5e+02`,
		`apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 99`,
		`apiserver_request_duration_seconds_count{verb="GET"} 4`,
	}, "\n")
	got := parseRequestTotals(text)
	assert.Equal(t, apiCounts{
		{"create", "jobs", ""}:      123,
		{"list", "nodes", ""}:       7,
		{"patch", "pods", "status"}: 500,
	}, got)
	reads, writes := got.totals()
	assert.Equal(t, 7.0, reads)
	assert.Equal(t, 623.0, writes)
	assert.Equal(t, apiCounts{{"create", "jobs", ""}: 23}, got.sub(apiCounts{
		{"create", "jobs", ""}: 100, {"list", "nodes", ""}: 7, {"patch", "pods", "status"}: 500}))
}

func TestParseSample(t *testing.T) {
	labels, v, ok := parseSample(`m{a="x,y",b="q\"uote"} 1.5`)
	require.True(t, ok)
	assert.Equal(t, map[string]string{"a": "x,y", "b": `q"uote`}, labels)
	assert.Equal(t, 1.5, v)
	labels, v, ok = parseSample(`m 7`)
	require.True(t, ok)
	assert.Empty(t, labels)
	assert.Equal(t, 7.0, v)
}

func TestParseSDKMetrics(t *testing.T) {
	text := strings.Join([]string{
		`temporal_activity_schedule_to_start_latency_seconds_sum{activity_type="WaitJob",namespace="default"} 3`,
		`temporal_activity_schedule_to_start_latency_seconds_count{activity_type="WaitJob",namespace="default"} 6`,
		`temporal_activity_schedule_to_start_latency_seconds_bucket{activity_type="WaitJob",le="1"} 6`,
		`temporal_sticky_cache_miss_total{namespace="default"} 4`,
	}, "\n")
	timers, counters := parseSDKMetrics(text)
	assert.Equal(t, []timer{{Name: "temporal_activity_schedule_to_start_latency", Key: "WaitJob", Count: 6, Sum: 3, Mean: 0.5}}, timers)
	assert.Equal(t, []sdkCounter{{Name: "temporal_sticky_cache_miss", Value: 4}}, counters)
}

func TestFleetSpec(t *testing.T) {
	f := newFleetSpec("ab12", 200, 2)
	assert.Len(t, f.nodes, 200)
	assert.Equal(t, "bn-ab12-00000", f.nodes[0])
	assert.Equal(t, []string{"bn-ab12-00025-fail", "bn-ab12-00075-fail", "bn-ab12-00125-fail", "bn-ab12-00175-fail"}, f.fail)
	assert.True(t, slices.IsSorted(f.nodes), "name order is creation order")
	assert.Equal(t, "bench.noderollout.dev/fleet=ab12-200", f.selector())
	assert.Empty(t, newFleetSpec("ab12", 10, 0).fail)

	// One template for every size: the failing Nodes are named, not listed in it.
	var job batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict([]byte(jobTemplate(5)), &job))
	assert.Equal(t, "5", job.Spec.Template.Annotations["noderollout.dev/run-seconds"])
	assert.NotContains(t, job.Spec.Template.Annotations, "noderollout.dev/fail-nodes")
}

func TestSpreadOf(t *testing.T) {
	assert.Equal(t, spread{Median: 3, Min: 1, Max: 9, N: 3}, spreadOf([]float64{9, 1, 3}))
	assert.Equal(t, spread{Median: 2.5, Min: 1, Max: 4, N: 4}, spreadOf([]float64{4, 1, 3, 2}))
	assert.Equal(t, spread{}, spreadOf(nil))
	assert.Equal(t, "3.0 (1.0–9.0)", spreadOf([]float64{9, 1, 3}).format(1))
	assert.Equal(t, "7.00", spreadOf([]float64{7}).format(2))
}

func TestABBAOrder(t *testing.T) {
	systems := []string{systemBaseline, systemNoderollout}
	var got [][]string
	for rep := range 4 {
		got = append(got, abbaOrder(systems, rep))
	}
	assert.Equal(t, [][]string{
		{systemBaseline, systemNoderollout}, {systemNoderollout, systemBaseline},
		{systemBaseline, systemNoderollout}, {systemNoderollout, systemBaseline},
	}, got)
	assert.Equal(t, []string{systemBaseline, systemNoderollout}, systems, "the configured order is left alone")
}

func TestRowsPairEachRepetitionWithItsBaseline(t *testing.T) {
	run := func(system string, rep int, makespan, cpu float64) *result {
		return &result{System: system, Rep: rep, Nodes: 1000, Selected: 1000, Succeeded: 1000, Parallelism: 100, JobSeconds: 5, MakespanS: makespan,
			Process: processUse{CPU: cpu}, StackCPU: map[string]float64{"temporal": 2 * cpu}}
	}
	var results []*result
	for rep, m := range [][2]float64{{60, 90}, {80, 88}, {70, 140}} {
		pair := []*result{run(systemBaseline, rep, m[0], 5), run(systemNoderollout, rep, m[1], 10)}
		if rep%2 == 1 {
			slices.Reverse(pair)
		}
		pairWithBaseline(pair)
		results = append(results, pair...)
	}
	rs := rows(results)
	require.Len(t, rs, 2)
	assert.Equal(t, systemBaseline, rs[0].System)
	assert.Equal(t, spread{Median: 70, Min: 60, Max: 80, N: 3}, rs[0].Makespan)
	assert.Equal(t, spread{Median: 90, Min: 88, Max: 140, N: 3}, rs[1].Makespan)
	// 90/60, 88/80, 140/70: paired ratios, not a ratio of medians (90/70).
	assert.Equal(t, spread{Median: 1.5, Min: 1.1, Max: 2, N: 3}, rs[1].VsBaseline)
	assert.Equal(t, 10.0, rs[1].ClientCPU.Median, "ms per node")
	assert.Equal(t, 20.0, rs[1].TemporalCPU.Median, "ms per node")

	assert.Empty(t, gate(config{gateNodes: 1000, gateRatio: 1.6}, results), "median 1.5x is within 1.6x")
	assert.Len(t, gate(config{gateNodes: 1000, gateRatio: 1.4}, results), 1, "median 1.5x is over 1.4x")
	assert.Contains(t, markdownRows(results), "| 1,000 | 100 | 5 | noderollout | 3 | 90.0 (88.0–140.0) | 1.50 (1.10–2.00)× |")
}

func TestGateActionsHoldsNoderolloutRunsAndRefusesAnUnreadCounter(t *testing.T) {
	run := func(system string, actions map[string]float64) *result {
		r := &result{System: system, Nodes: 100, Selected: 100, Succeeded: 100, JobSeconds: 5, Actions: actions}
		r.derive()
		return r
	}
	cheap := run(systemNoderollout, map[string]float64{"command_StartChildWorkflowExecution": 300, queryAction: 900})
	dear := run(systemNoderollout, map[string]float64{"command_StartChildWorkflowExecution": 700})
	floor := run(systemTemporalFloor, map[string]float64{"command_StartChildWorkflowExecution": 900})
	cfg := config{gateNodes: 1000, gateRatio: 1.8, gateActions: 6}

	assert.Empty(t, gate(cfg, []*result{cheap, floor}), "3 actions per node (queries apart) is within 6; the floor is not held")
	failures := gate(cfg, []*result{dear})
	require.Len(t, failures, 1)
	assert.Contains(t, failures[0], "7.00 Temporal actions per node, over 6")
	failures = gate(cfg, []*result{run(systemNoderollout, nil)})
	require.Len(t, failures, 1)
	assert.Contains(t, failures[0], "no Temporal action counts read")
	assert.Empty(t, gate(config{gateNodes: 1000, gateRatio: 1.8}, []*result{dear}), "no --gate-actions, no check")
}

func TestSummarize(t *testing.T) {
	s := summarize([]float64{4, 1, 3, 2})
	assert.Equal(t, stat{N: 4, Mean: 2.5, P50: 3, P95: 4, Max: 4}, s)
	assert.Equal(t, stat{}, summarize(nil))
}

func TestResultLost(t *testing.T) {
	r := &result{Nodes: 10, Selected: 10, Succeeded: 9, Failed: 1}
	assert.Empty(t, r.lost())
	r.Succeeded = 8
	assert.Contains(t, r.lost(), "add up to 9 of 10")
	r = &result{Nodes: 10, Selected: 9, Succeeded: 9}
	assert.Contains(t, r.lost(), "selected 9 of 10")
}

// Every run on a fleet needs a rollout name of its own: the name keys the Node markers.
func TestRunIDsDifferPerSystemAndRepetition(t *testing.T) {
	f := newFleetSpec("ab12", 10, 0)
	seen := map[string]bool{}
	for rep := range 2 {
		for _, system := range []string{systemNoderollout, systemCandidate, systemBaseline} {
			id := runSpec{system: system, fleet: f, rep: rep}.id()
			assert.False(t, seen[id], id)
			seen[id] = true
		}
	}
}

// An interrupted noderollout run leaves Jobs with the worker's finalizer; the bench's clean-up
// must drop it, or the namespace never goes.
func TestReleaseJobsDropsFinalizers(t *testing.T) {
	held := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "ns", Finalizers: []string{"noderollout.dev/outcome"}}}
	free := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "free", Namespace: "ns"}}
	kube := fake.NewClientset(held, free)
	releaseJobs(context.Background(), kube, "ns")
	for _, name := range []string{"held", "free"} {
		j, err := kube.BatchV1().Jobs("ns").Get(context.Background(), name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, j.Finalizers, name)
	}
}

// A run on the fake fleet says so, gets the fake's counts and drains, and no slot table (it
// has no Jobs or Pods to watch); a traced kwok run keeps its slot table.
func TestReportOfAFakeFleetRun(t *testing.T) {
	cfg := config{mode: "quick", parallelism: 200, jobSeconds: 5}
	fake := &result{System: systemNoderollout, Nodes: 1000, MakespanS: 100, ContinueAsNew: 4,
		FakeKube: &fakestats.Stats{NodeLists: 6, FirstPageLists: 1, Jobs: 1002, MostAtOnce: 200},
		History:  &historyStats{CANDrainSeconds: 20}}
	report := markdownReport(cfg, "r1", time.Now(), []*result{fake})
	assert.Contains(t, report, "`dev/bench.sh scale`")
	assert.Contains(t, report, "| 1,000 | 6 | 0.0060 | 1 | 1002 (0) | 200 | 4 | 20.0 | 5.00 | 20.0% |")
	assert.NotContains(t, report, "Where a window slot's time goes")

	traced := &result{System: systemNoderollout, Nodes: 1000, MakespanS: 100, Slot: slotPhases{Running: stat{N: 1000, Mean: 5}}}
	report = markdownReport(cfg, "r1", time.Now(), []*result{traced})
	assert.Contains(t, report, "`dev/bench.sh quick`")
	assert.Contains(t, report, "Where a window slot's time goes")
	assert.NotContains(t, report, "The fake fleet")
}

func TestReportSaysWhereEachSystemsHistoryBytesGo(t *testing.T) {
	cfg := config{mode: "quick", parallelism: 100, jobSeconds: 5}
	node := &result{System: systemNoderollout, Nodes: 100, History: &historyStats{TotalBytes: 375_600,
		ParentBytesByType: map[string]int{"EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED": 57_700, "EVENT_TYPE_WORKFLOW_TASK_STARTED": 5_700},
		ChildBytesByType:  map[string]int{"EVENT_TYPE_MARKER_RECORDED": 82_200}}}
	old := &result{System: systemNoderollout, Nodes: 100, History: &historyStats{TotalBytes: 1}} // read before bytes by type
	report := markdownReport(cfg, "r1", time.Now(), []*result{node, old})
	assert.Contains(t, report, "- noderollout N=100 repetition 1, 3756 B/node: parent: start_child_workflow_execution_initiated 577, workflow_task_started 57; children: marker_recorded 822\n")
	assert.Equal(t, 1, strings.Count(report, "B/node: parent:"), "a result without bytes by type has no line")
}
