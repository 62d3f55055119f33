package activities

import (
	"github.com/noderollout/noderollout/api"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
)

// fakePrometheus answers instant queries with as many series as firing says (down: 503);
// from the query numbered changeAt on, with then's answer instead.
type fakePrometheus struct {
	mu       sync.Mutex
	firing   int
	down     bool
	changeAt int32
	then     *fakePrometheus
	asked    atomic.Int32
	auth     string
}

func (f *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.asked.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = r.Header.Get("Authorization")
	if f.then != nil && n >= f.changeAt {
		f.firing, f.down = f.then.firing, f.then.down
	}
	if f.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	if r.URL.Path != "/api/v1/query" || r.URL.Query().Get("query") == "" {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	result := "["
	for i := range f.firing {
		if i > 0 {
			result += ","
		}
		result += `{"metric":{"alertname":"NodeNotHealthy","node":"n` + string(rune('0'+i)) + `"},"value":[1,"1"]}`
	}
	result += "]"
	_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"vector","result":` + result + `}}`))
}

func gateActivities(t *testing.T, f *fakePrometheus) (*Activities, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	token := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(token, []byte("s3cret\n"), 0o600))
	p, err := NewPrometheus(Prometheus{URL: srv.URL, BearerTokenFile: token})
	require.NoError(t, err)
	a := newActivities(fake.NewClientset())
	a.Prometheus = p
	a.MetricGatePoll = 5 * time.Millisecond
	return a, srv
}

func watchGate(t *testing.T, a *Activities, in MetricGateInput) (MetricGateResult, error) {
	t.Helper()
	type answer struct {
		res MetricGateResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		val, err := newEnv(a).ExecuteActivity(a.WatchMetricGate, in)
		var res MetricGateResult
		if err == nil {
			err = val.Get(&res)
		}
		done <- answer{res, err}
	}()
	select {
	case ans := <-done:
		return ans.res, ans.err
	case <-time.After(10 * time.Second): // a gate that never changes fails here, not by hanging
		t.Fatal("the watch did not answer within 10 s")
		return MetricGateResult{}, nil
	}
}

// An open gate closes as soon as the query returns a series (naming it), and the token is sent.
func TestMetricGateClosesWhenTheQueryFires(t *testing.T) {
	f := &fakePrometheus{changeAt: 3, then: &fakePrometheus{firing: 2}}
	a, _ := gateActivities(t, f)
	res, err := watchGate(t, a, MetricGateInput{Query: `ALERTS{severity="page"}`, Open: true})
	require.NoError(t, err)
	require.False(t, res.Open)
	require.Contains(t, res.Reason, "returned 2 series")
	require.Contains(t, res.Reason, "NodeNotHealthy")
	require.Equal(t, int32(3), f.asked.Load(), "it kept looking while the query returned nothing, and answered at the first series")
	require.Equal(t, "Bearer s3cret", f.auth)
}

// A Prometheus that cannot be asked closes the gate: it never passes silently.
func TestMetricGateClosesWhenPrometheusIsDown(t *testing.T) {
	f := &fakePrometheus{down: true}
	a, _ := gateActivities(t, f)
	res, err := watchGate(t, a, MetricGateInput{Query: "up == 0", Open: true})
	require.NoError(t, err)
	require.False(t, res.Open)
	require.Contains(t, res.Reason, "could not be asked")
}

// A closed gate opens only once the query has returned nothing for the whole of for.
func TestMetricGateOpensAfterQuietFor(t *testing.T) {
	f := &fakePrometheus{firing: 1, changeAt: 4, then: &fakePrometheus{}}
	a, _ := gateActivities(t, f)
	clock := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	a.Now = func() time.Time { // every look is ten seconds later
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(10 * time.Second)
		return clock
	}
	res, err := watchGate(t, a, MetricGateInput{Query: "up == 0", ForSeconds: 60, Open: false})
	require.NoError(t, err)
	require.True(t, res.Open)
	require.Contains(t, res.Reason, "returned nothing for 1m0s")
	require.Equal(t, int32(3+7), f.asked.Load(), "three firing looks, then quiet from the fourth until the seventh quiet one, a minute later")
}

// Without a Prometheus in the worker's configuration, a metric gate is refused for good.
func TestMetricGateWithoutPrometheusIsRefused(t *testing.T) {
	a := newActivities(fake.NewClientset())
	_, err := newEnv(a).ExecuteActivity(a.WatchMetricGate, MetricGateInput{Query: "up", Open: true})
	requireAppError(t, err, api.ErrNoPrometheus, true)
}

func TestNewPrometheusNamesBadOptions(t *testing.T) {
	_, err := NewPrometheus(Prometheus{URL: "prometheus:9090"})
	require.ErrorContains(t, err, "prometheus-url")
	_, err = NewPrometheus(Prometheus{URL: "http://p:9090", CAFile: "/nonexistent"})
	require.ErrorContains(t, err, "prometheus-ca-file")
}

// The first look answers whatever it finds: the rollout's gate is closed until Prometheus
// has answered once, open at once if the query returns nothing, closed naming the series or
// the failure otherwise.
func TestMetricGateFirstLookAnswersAtOnce(t *testing.T) {
	for _, c := range []struct {
		f    *fakePrometheus
		open bool
		says string
	}{{&fakePrometheus{}, true, "returned nothing"}, {&fakePrometheus{firing: 1}, false, "returned 1 series"}, {&fakePrometheus{down: true}, false, "could not be asked"}} {
		a, _ := gateActivities(t, c.f)
		res, err := watchGate(t, a, MetricGateInput{Query: "up == 0", ForSeconds: 600, First: true})
		require.NoError(t, err)
		require.Equal(t, c.open, res.Open, c.says)
		require.Contains(t, res.Reason, c.says)
		require.Equal(t, int32(1), c.f.asked.Load())
	}
}
