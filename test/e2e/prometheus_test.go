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
	enumspb "go.temporal.io/api/enums/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
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

// gateStatus is the rollout's status once its metric gate has answered.
func gateStatus(t *testing.T, id string) api.RolloutStatus {
	t.Helper()
	st, err := status(id)
	require.NoError(t, err)
	return st
}

// A Prometheus alert series pushed mid-rollout pauses the rollout within one interval of
// Prometheus seeing it (no node starts while it fires; the node in flight gets an Event), and
// clearing it resumes the rollout once the query has been quiet for the gate's for.
func TestPrometheusGatePausesTheRolloutAndClearingResumesIt(t *testing.T) {
	f := NewFleet(t, 3)
	job := "e2e-gate-" + rand.String(6)
	query := fmt.Sprintf(`noderollout_e2e_alert{job=%q} > 0`, job)
	req := f.Request("gate", 6*time.Second)
	req.Parallelism = 1
	req.Gates = &api.Gates{Prometheus: &api.PrometheusGate{Query: query, For: "3s", Interval: "1s"}}
	run := Start(t, req)
	t.Cleanup(func() { pushAlert(t, job, false) })

	waitFor(t, 30*time.Second, "the second node running", func() bool {
		st := gateStatus(t, run.GetID())
		return st.Counts.Succeeded == 1 && st.Counts.Running == 1
	})
	pushAlert(t, job, true)
	waitFor(t, 15*time.Second, "Prometheus seeing the alert", func() bool { return promQuery(t, query) == 1 })
	seen := time.Now()
	var paused api.RolloutStatus
	waitFor(t, 10*time.Second, "the rollout paused by its gate", func() bool {
		paused = gateStatus(t, run.GetID())
		return paused.Gate != nil && paused.Gate.Asked && !paused.Gate.Open
	})
	t.Logf("paused %v after Prometheus saw the series (interval 1s); gate closed at %s", time.Since(seen).Round(10*time.Millisecond), paused.Gate.Since.Format(time.RFC3339Nano))
	require.Less(t, paused.Gate.Since.Sub(seen), 2*time.Second, "the gate closes within one interval (1s), plus the query and the workflow task on a loaded machine")
	require.Equal(t, "paused", paused.Phase)
	require.Contains(t, paused.Gate.Reason, "returned 1 series")
	out, code := runStarter(t, "status", run.GetID())
	require.Zero(t, code, out)
	require.Contains(t, out, "CLOSED: the rollout paused itself")
	t.Logf("starter status of the paused rollout:\n%s", out)

	// The node in flight when the gate closed is told so.
	running := ""
	for node, jobs := range f.Jobs(t, req.Name) {
		if len(jobs) == 1 && jobs[0].Status.CompletionTime == nil && jobs[0].CreationTimestamp.Time.Before(seen) {
			running = node
		}
	}
	if running != "" {
		waitFor(t, 15*time.Second, "the gate's Event on "+running, func() bool {
			evs, err := stack.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + running + ",reason=RolloutGateClosed"})
			return err == nil && len(evs.Items) > 0
		})
	}

	// The node in flight finishes; none starts while the alert fires.
	waitFor(t, 30*time.Second, "the node in flight to finish", func() bool { return gateStatus(t, run.GetID()).Counts.Succeeded == 2 })
	cleared := time.Now()
	pushAlert(t, job, false)
	res := Succeeded(t, run)
	require.Equal(t, 3, res.Counts.Succeeded)
	var startedAfter []string
	// Creation times have whole seconds: compare at that resolution (a Job made at 17:54:01.5
	// reads 17:54:01, which is before a bound of 17:54:01.2).
	quietUntil := cleared.Add(3 * time.Second).Truncate(time.Second)
	for node, jobs := range f.Jobs(t, req.Name) {
		if created := jobs[0].CreationTimestamp.Time; created.After(seen) {
			startedAfter = append(startedAfter, node)
			require.False(t, created.Before(quietUntil), "%s's Job was created at %s, before the alert had been quiet for 3s (cleared at %s)", node, created, cleared)
		}
	}
	require.Len(t, startedAfter, 1, "only the third node starts after the alert, once it is cleared")

	// What the watch cost Temporal: one activity per state of the gate (the first look, open
	// until the alert, closed until quiet, open until the end), however many looks it took.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := stack.Temporal.GetWorkflowHistory(ctx, run.GetID(), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	watches, events := 0, 0
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(t, err)
		events++
		if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "WatchMetricGate" {
			watches++
		}
	}
	t.Logf("the rollout's history: %d events, %d WatchMetricGate activities", events, watches)
	require.Equal(t, 4, watches)
}
