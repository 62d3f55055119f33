package main

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"
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
	assert.Equal(t, []string{"bn-ab12-00025", "bn-ab12-00075", "bn-ab12-00125", "bn-ab12-00175"}, f.fail)
	assert.Equal(t, "bench.noderollout.dev/fleet=ab12-200", f.selector())
	assert.Empty(t, newFleetSpec("ab12", 10, 0).fail)

	var job batchv1.Job
	require.NoError(t, yaml.UnmarshalStrict([]byte(jobTemplate(5, f.fail)), &job))
	assert.Equal(t, "5", job.Spec.Template.Annotations["noderollout.dev/run-seconds"])
	assert.Equal(t, strings.Join(f.fail, ","), job.Spec.Template.Annotations["noderollout.dev/fail-nodes"])
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
