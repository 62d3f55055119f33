//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities"
)

// pushAlert pushes (firing) or deletes (cleared) the series noderollout_e2e_alert{job=job} at
// the stack's Pushgateway, which the stack's Prometheus scrapes every second.
func pushAlert(t *testing.T, job string, firing bool) {
	t.Helper()
	gateway := os.Getenv("PUSHGATEWAY_URL")
	require.NotEmpty(t, gateway, "PUSHGATEWAY_URL (dev/env)")
	u := gateway + "/metrics/job/" + url.PathEscape(job)
	var req *http.Request
	var err error
	if firing {
		req, err = http.NewRequest(http.MethodPut, u, strings.NewReader("noderollout_e2e_alert 1\n"))
	} else {
		req, err = http.NewRequest(http.MethodDelete, u, nil)
	}
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Less(t, resp.StatusCode, 300, "the Pushgateway answered %s", resp.Status)
}

// promQuery runs an instant query at the stack's Prometheus and returns how many series it gave.
func promQuery(t *testing.T, query string) int {
	t.Helper()
	base := os.Getenv("PROMETHEUS_URL")
	require.NotEmpty(t, base, "PROMETHEUS_URL (dev/env)")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/query?query="+url.QueryEscape(query), nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "success", body.Status)
	return len(body.Data.Result)
}

// The stack's Prometheus sees a series pushed to its Pushgateway within seconds, and stops
// seeing it once it is deleted: what the metric gates' tests steer with.
func TestStackPrometheusSeesPushedSeries(t *testing.T) {
	job := "e2e-" + rand.String(6)
	query := fmt.Sprintf(`noderollout_e2e_alert{job=%q}`, job)
	require.Zero(t, promQuery(t, query))
	pushAlert(t, job, true)
	waitFor(t, 15*time.Second, "the pushed series in Prometheus", func() bool { return promQuery(t, query) == 1 })
	pushAlert(t, job, false)
	waitFor(t, 15*time.Second, "the deleted series gone from Prometheus", func() bool { return promQuery(t, query) == 0 })
}

// The metric gate's watch against the stack's real Prometheus: it closes when the alert series
// is pushed and opens again once the series has been gone for its for.
func TestMetricGateWatchesTheStacksPrometheus(t *testing.T) {
	job := "e2e-gate-" + rand.String(6)
	p, err := activities.NewPrometheus(activities.Prometheus{URL: os.Getenv("PROMETHEUS_URL")})
	require.NoError(t, err)
	acts := activities.New(stack.Kube)
	acts.Prometheus = p
	query := fmt.Sprintf(`noderollout_e2e_alert{job=%q} > 0`, job)
	pushAlert(t, job, true)
	var res activities.MetricGateResult
	require.NoError(t, runActivity(t, acts, acts.WatchMetricGate, activities.MetricGateInput{Query: query, IntervalSeconds: 1, Open: true}, &res))
	require.False(t, res.Open)
	require.Contains(t, res.Reason, "returned 1 series")
	pushAlert(t, job, false)
	start := time.Now()
	require.NoError(t, runActivity(t, acts, acts.WatchMetricGate, activities.MetricGateInput{Query: query, IntervalSeconds: 1, ForSeconds: 3}, &res))
	require.True(t, res.Open, res.Reason)
	require.GreaterOrEqual(t, time.Since(start), 3*time.Second, "open only after three quiet seconds")
}
