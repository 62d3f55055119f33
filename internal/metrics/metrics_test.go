package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSeriesWithDifferentTagSetsShareOneFamily(t *testing.T) {
	c := NewCollector()
	h := c.Handler().WithTags(map[string]string{"namespace": "default"})
	h.WithTags(map[string]string{"outcome": "succeeded"}).Counter("noderollout_nodes").Inc(2)
	h.WithTags(map[string]string{"outcome": "failed"}).Counter("noderollout_nodes").Inc(1)
	h.Counter("noderollout_nodes").Inc(1) // no outcome tag: exported with outcome=""
	h.Gauge("noderollout_jobs_running").Update(3)
	h.Timer("noderollout_job_duration").Record(1500 * time.Millisecond)

	srv := Serve("", c, ready(), BuildInfo{Version: "v1.2.3", Commit: "abc", GoVersion: "go1.26", SDKVersion: "v1.51.0"}, false)
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	require.Equal(t, 200, rec.Code, body)
	require.Contains(t, body, `noderollout_nodes_total{outcome="succeeded",temporal_namespace="default"} 2`)
	require.Contains(t, body, `noderollout_nodes_total{outcome="failed",temporal_namespace="default"} 1`)
	require.Contains(t, body, `noderollout_nodes_total{outcome="",temporal_namespace="default"} 1`)
	require.Contains(t, body, `noderollout_jobs_running{temporal_namespace="default"} 3`)
	require.Contains(t, body, `noderollout_job_duration_seconds_bucket{temporal_namespace="default",le="2.5"} 1`)
	require.Contains(t, body, `noderollout_job_duration_seconds_bucket{temporal_namespace="default",le="1"} 0`)
	require.True(t, strings.Contains(body, "go_goroutines"))
	require.NotContains(t, body, `{namespace=`, "Prometheus' Kubernetes discovery owns the namespace label")
	require.Contains(t, body, "# HELP noderollout_nodes_total Nodes finalized by this worker")
	require.Contains(t, body, `noderollout_build_info{commit="abc",go_version="go1.26",temporal_sdk_version="v1.51.0",version="v1.2.3"} 1`)
}

// WithTags remembers what it derived: the same tags from the same handler give the same series,
// renamed as the first time, and the same tags from another handler give that handler's own.
func TestDerivedHandlersKeepTheirParentsTags(t *testing.T) {
	c := NewCollector()
	polls := c.Handler().WithTags(map[string]string{"worker_type": "WorkflowWorker"})
	activities := c.Handler().WithTags(map[string]string{"worker_type": "ActivityWorker"})
	for range 3 {
		polls.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(1)
	}
	activities.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(1)
	c.Handler().WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(1)

	srv := Serve("", c, ready(), BuildInfo{}, false)
	_, body := probe(t, srv, "/metrics")
	require.Contains(t, body, `temporal_request_total{temporal_namespace="default",worker_type="WorkflowWorker"} 3`)
	require.Contains(t, body, `temporal_request_total{temporal_namespace="default",worker_type="ActivityWorker"} 1`)
	require.Contains(t, body, `temporal_request_total{temporal_namespace="default",worker_type=""} 1`)
}

func TestTimersResolveMilliseconds(t *testing.T) {
	c := NewCollector()
	c.Handler().Timer("temporal_request_latency").Record(3 * time.Millisecond)
	srv := Serve("", c, ready(), BuildInfo{}, false)
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	require.Contains(t, body, `temporal_request_latency_seconds_bucket{le="0.0025"} 0`)
	require.Contains(t, body, `temporal_request_latency_seconds_bucket{le="0.005"} 1`)
	require.Contains(t, body, "# HELP temporal_request_latency_seconds Seconds a gRPC request to Temporal took.")
}

func ready() *Health {
	h := &Health{}
	h.SetReady(true)
	return h
}

func probe(t *testing.T, srv *http.Server, path string) (int, string) {
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec.Code, rec.Body.String()
}

func TestProbesFailOnceTheWorkerStoppedPolling(t *testing.T) {
	h := &Health{}
	srv := Serve("", NewCollector(), h, BuildInfo{}, false)
	code, _ := probe(t, srv, "/healthz")
	require.Equal(t, 200, code, "alive while starting")
	code, _ = probe(t, srv, "/readyz")
	require.Equal(t, 503, code, "not ready before the informer synced")
	h.SetReady(true)
	code, _ = probe(t, srv, "/readyz")
	require.Equal(t, 200, code)

	h.Fail("namespace default is not found")
	code, body := probe(t, srv, "/healthz")
	require.Equal(t, 503, code)
	require.Contains(t, body, "namespace default is not found")
	code, _ = probe(t, srv, "/readyz")
	require.Equal(t, 503, code)
	require.False(t, h.Ready())
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		srv := Serve("", NewCollector(), ready(), BuildInfo{}, pprof)
		rec := httptest.NewRecorder()
		srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
		if pprof {
			require.Equal(t, 200, rec.Code)
			require.Contains(t, rec.Body.String(), "goroutine")
		} else {
			require.Equal(t, 404, rec.Code)
		}
	}
}

// BenchmarkTaggedUpdates is the SDK's pattern: a handler with a few tags, several updates each.
func BenchmarkTaggedUpdates(b *testing.B) {
	h := NewCollector().Handler().WithTags(map[string]string{
		"namespace": "default", "task_queue": "noderollout", "workflow_type": "NodeRollout", "activity_type": "WaitJob",
	})
	for b.Loop() {
		h.Counter("temporal_request").Inc(1)
		h.Timer("temporal_request_latency").Record(3 * time.Millisecond)
	}
}

// BenchmarkWithTags is the SDK deriving a handler for a request: the same few tags each time.
func BenchmarkWithTags(b *testing.B) {
	h := NewCollector().Handler().WithTags(map[string]string{"namespace": "default", "client_name": "temporal-go"})
	for b.Loop() {
		h.WithTags(map[string]string{"operation": "RespondWorkflowTaskCompleted"}).Counter("temporal_request").Inc(1)
	}
}
