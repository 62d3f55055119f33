package metrics

import (
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

	srv := Serve("", c, func() bool { return true }, false)
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	require.Equal(t, 200, rec.Code, body)
	require.Contains(t, body, `noderollout_nodes_total{namespace="default",outcome="succeeded"} 2`)
	require.Contains(t, body, `noderollout_nodes_total{namespace="default",outcome="failed"} 1`)
	require.Contains(t, body, `noderollout_nodes_total{namespace="default",outcome=""} 1`)
	require.Contains(t, body, `noderollout_jobs_running{namespace="default"} 3`)
	require.Contains(t, body, `noderollout_job_duration_seconds_bucket{namespace="default",le="2.5"} 1`)
	require.Contains(t, body, `noderollout_job_duration_seconds_bucket{namespace="default",le="1"} 0`)
	require.True(t, strings.Contains(body, "go_goroutines"))
}

func TestReadyzFollowsReadiness(t *testing.T) {
	ready := false
	srv := Serve("", NewCollector(), func() bool { return ready }, false)
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, 503, rec.Code)
	ready = true
	rec = httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, 200, rec.Code)
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	for _, pprof := range []bool{false, true} {
		srv := Serve("", NewCollector(), func() bool { return true }, pprof)
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
