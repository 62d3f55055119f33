package activities

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"github.com/noderollout/noderollout/api"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
)

// Prometheus is where a rollout's metric gate asks: the worker's configuration names it (the
// request names only the query), with the TLS and bearer-token options a real Prometheus
// behind a proxy needs.
type Prometheus struct {
	URL string
	// BearerTokenFile, when set, is read for every query (tokens rotate) and sent as
	// "Authorization: Bearer".
	BearerTokenFile string
	// CAFile adds a CA to trust; InsecureSkipVerify skips verification (tests only).
	CAFile             string
	InsecureSkipVerify bool
	// Client is the HTTP client; nil builds one from the options above.
	Client *http.Client
}

// NewPrometheus checks the options and builds the HTTP client.
func NewPrometheus(p Prometheus) (*Prometheus, error) {
	if _, err := url.ParseRequestURI(p.URL); err != nil || !strings.HasPrefix(p.URL, "http") {
		return nil, fmt.Errorf("prometheus-url: %q is not an http(s) URL; give e.g. http://prometheus.monitoring:9090", p.URL)
	}
	if p.Client == nil {
		tlsConfig := &tls.Config{InsecureSkipVerify: p.InsecureSkipVerify} //nolint:gosec // an explicit test-only option
		if p.CAFile != "" {
			pem, err := os.ReadFile(p.CAFile)
			if err != nil {
				return nil, fmt.Errorf("prometheus-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("prometheus-ca-file: %s holds no PEM certificate", p.CAFile)
			}
			tlsConfig.RootCAs = pool
		}
		p.Client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig, Proxy: http.ProxyFromEnvironment}}
	}
	return &p, nil
}

// Query runs an instant query and returns how many series it gave, with the labels of the first.
func (p *Prometheus) Query(ctx context.Context, query string) (int, string, error) {
	u := strings.TrimSuffix(p.URL, "/") + "/api/v1/query?query=" + url.QueryEscape(query)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, "", err
	}
	if p.BearerTokenFile != "" {
		token, err := os.ReadFile(p.BearerTokenFile)
		if err != nil {
			return 0, "", fmt.Errorf("reading the Prometheus bearer token: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, "", err
	}
	var out struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, "", fmt.Errorf("Prometheus answered %s, not a query result: %.200s", resp.Status, body)
	}
	if out.Status != "success" {
		return 0, "", fmt.Errorf("Prometheus refused the query (%s): %s", out.ErrorType, out.Error)
	}
	if len(out.Data.Result) == 0 {
		return 0, "", nil
	}
	first, _ := json.Marshal(out.Data.Result[0].Metric)
	return len(out.Data.Result), string(first), nil
}

// MetricGateInput watches a rollout's metric gate: a PromQL query that must return nothing
// (like an alert) for nodes to go on.
type MetricGateInput struct {
	Query           string `json:"query"`
	IntervalSeconds int64  `json:"intervalSeconds"`
	// ForSeconds is how long the query must have returned nothing before the gate opens.
	ForSeconds int64 `json:"forSeconds"`
	// Open is the gate as the workflow knows it; the watch returns when that changes.
	Open bool `json:"open"`
	// First returns the first answer, whatever it is: the rollout's gate is closed until
	// Prometheus has answered once.
	First bool `json:"first,omitempty"`
}

// MetricGateResult is the gate's new state and why.
type MetricGateResult struct {
	Open   bool      `json:"open"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// metricGateProgress is what a watch heartbeats, so a retried attempt resumes it.
type metricGateProgress struct {
	QuietSince time.Time `json:"quietSince,omitempty"`
}

// WatchMetricGate watches the gate until its state differs from in.Open, and says so: it
// closes as soon as the query returns a series, or Prometheus cannot be asked (a gate never
// passes silently); it opens once the query has returned nothing for in.ForSeconds. The
// query runs every interval in the worker; Temporal sees only the answer and the throttled
// heartbeats, so a gate that holds for days costs a handful of actions, not one per look.
func (a *Activities) WatchMetricGate(ctx context.Context, in MetricGateInput) (MetricGateResult, error) {
	if a.Prometheus == nil {
		return MetricGateResult{}, temporal.NewNonRetryableApplicationError(
			"the request has gates.prometheus but this worker names no Prometheus: start the worker with --prometheus-url (NODEROLLOUT_PROMETHEUS_URL, or prometheus-url in its config file)", api.ErrNoPrometheus, nil)
	}
	interval := time.Duration(max(in.IntervalSeconds, 1)) * time.Second
	if a.MetricGatePoll > 0 {
		interval = a.MetricGatePoll
	}
	var progress metricGateProgress
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &progress)
	}
	// A heartbeat a third of the heartbeat timeout apart, whatever the interval: a watch that
	// holds for days costs a few hundred heartbeats a day, not one per look.
	beatEvery := activity.GetInfo(ctx).HeartbeatTimeout / 3
	var lastBeat time.Time
	for {
		series, labels, err := a.Prometheus.Query(ctx, in.Query)
		now := a.Now()
		if ctx.Err() != nil {
			return MetricGateResult{}, ctx.Err()
		}
		var closedBecause string
		switch {
		case err != nil:
			closedBecause = "Prometheus could not be asked (" + err.Error() + "): a gate never passes silently"
		case series > 0:
			closedBecause = fmt.Sprintf("%s returned %d series, e.g. %s", in.Query, series, labels)
		}
		switch {
		case closedBecause != "":
			progress.QuietSince = time.Time{}
			if in.Open || in.First {
				return MetricGateResult{Open: false, At: now, Reason: closedBecause}, nil
			}
		case in.First:
			return MetricGateResult{Open: true, At: now, Reason: in.Query + " returned nothing"}, nil
		default:
			if progress.QuietSince.IsZero() {
				progress.QuietSince = now
			}
			if !in.Open && now.Sub(progress.QuietSince) >= time.Duration(in.ForSeconds)*time.Second {
				return MetricGateResult{Open: true, At: now, Reason: fmt.Sprintf("%s returned nothing for %v", in.Query, now.Sub(progress.QuietSince).Round(time.Second))}, nil
			}
		}
		if now.Sub(lastBeat) >= beatEvery {
			activity.RecordHeartbeat(ctx, progress)
			lastBeat = now
		}
		if err := sleep(ctx, interval); err != nil {
			return MetricGateResult{}, err
		}
	}
}
