// Package metrics exposes the worker's metrics, the Temporal SDK's and the rollout's own, in
// the Prometheus text format. It adapts the SDK's metrics.Handler to a Prometheus collector
// directly, so no extra metrics library sits between them.
package metrics

import (
	"net/http"
	httppprof "net/http/pprof"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetrics "go.temporal.io/sdk/client"
)

// timerBuckets are seconds: from a 1 ms gRPC call or local activity to an hour-long
// maintenance Job, one timer type serving both.
var timerBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// renamedTags keeps the SDK's tags clear of the target labels Prometheus' Kubernetes service
// discovery puts on every scraped series (namespace, pod, service, container, job,
// instance): a clash would be renamed exported_* or overwrite the Pod's own label.
var renamedTags = map[string]string{
	"namespace": "temporal_namespace",
	"pod":       "exported_pod",
	"service":   "exported_service",
	"container": "exported_container",
	"job":       "exported_job",
	"instance":  "exported_instance",
}

// Collector holds every series the SDK handler has written and serves them to Prometheus.
type Collector struct {
	mu       sync.Mutex
	families map[string]*family
	// derived caches WithTags: the handler derived from a handler (its key) and the tags given
	// (their tagKey). The SDK derives one for nearly every request and task, from a few tag sets.
	derived sync.Map
}

type kind int

const (
	counter kind = iota
	gauge
	timer
)

type family struct {
	kind   kind
	labels map[string]bool // union of label names seen; missing ones are exported empty
	series map[string]*series
}

type series struct {
	tags    map[string]string
	value   float64  // counter total or gauge value
	count   uint64   // timer
	sum     float64  // timer, seconds
	buckets []uint64 // timer, cumulative per timerBuckets
}

// NewCollector returns an empty collector; register it with a prometheus.Registry.
func NewCollector() *Collector { return &Collector{families: map[string]*family{}} }

// Handler is the SDK-facing side: pass it as client.Options.MetricsHandler.
func (c *Collector) Handler() sdkmetrics.MetricsHandler { return handler{c: c, key: tagKey(nil)} }

// series returns the series of name with these tags, made on first use; key is tagKey(tags).
// The caller holds c.mu.
func (c *Collector) series(name string, k kind, key string, tags map[string]string) *series {
	f := c.families[name]
	if f == nil {
		f = &family{kind: k, labels: map[string]bool{}, series: map[string]*series{}}
		c.families[name] = f
	}
	s := f.series[key]
	if s == nil {
		s = &series{tags: tags}
		if k == timer {
			s.buckets = make([]uint64, len(timerBuckets))
		}
		f.series[key] = s
		for l := range tags {
			f.labels[l] = true
		}
	}
	return s
}

// tagKey names a tag set: its pairs in key order. The SDK's sets are mostly of one tag, which
// needs no sorting.
func tagKey(tags map[string]string) string {
	if len(tags) == 1 {
		for k, v := range tags {
			return k + "=" + v + "\x00"
		}
	}
	keys := make([]string, 0, len(tags))
	size := 0
	for k, v := range tags {
		keys = append(keys, k)
		size += len(k) + len(v) + 2
	}
	sort.Strings(keys)
	var b strings.Builder
	b.Grow(size)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(tags[k])
		b.WriteByte(0)
	}
	return b.String()
}

func (c *Collector) update(name string, k kind, h handler, apply func(*series)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	apply(c.series(name, k, h.key, h.tags))
}

// Describe sends nothing: the series are only known as the SDK writes them (an unchecked collector).
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect exports every series, padding each with the labels its family has seen elsewhere.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, f := range c.families {
		labels := make([]string, 0, len(f.labels))
		for l := range f.labels {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		metricName := sanitize(name)
		var desc *prometheus.Desc
		switch f.kind {
		case counter:
			desc = prometheus.NewDesc(metricName+"_total", help(name), labels, nil)
		case gauge:
			desc = prometheus.NewDesc(metricName, help(name), labels, nil)
		case timer:
			desc = prometheus.NewDesc(metricName+"_seconds", help(name), labels, nil)
		}
		for _, s := range f.series {
			values := make([]string, len(labels))
			for i, l := range labels {
				values[i] = s.tags[l]
			}
			switch f.kind {
			case counter:
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, s.value, values...)
			case gauge:
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, s.value, values...)
			case timer:
				buckets := make(map[float64]uint64, len(timerBuckets))
				for i, ub := range timerBuckets {
					buckets[ub] = s.buckets[i]
				}
				ch <- prometheus.MustNewConstHistogram(desc, s.count, s.sum, buckets, values...)
			}
		}
	}
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == ':' {
			return r
		}
		return '_'
	}, name)
}

// handler carries its tags' series key, computed once when the tags are set rather than on
// every update: the SDK records several metrics per task with the same handler.
type handler struct {
	c    *Collector
	tags map[string]string
	key  string // tagKey(tags)
}

// WithTags is the handler with tags added (renamed and sanitized). A tag set seen before from
// the same handler returns the handler derived then: merging, renaming and keying the tags
// afresh for every request was most of what the worker spent on metrics.
func (h handler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	id := h.key + "\x01" + tagKey(tags)
	if d, ok := h.c.derived.Load(id); ok {
		return d.(handler)
	}
	d := h.derive(tags)
	h.c.derived.Store(id, d)
	return d
}

func (h handler) derive(tags map[string]string) handler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		k = sanitize(k)
		if r, ok := renamedTags[k]; ok {
			k = r
		}
		merged[k] = v
	}
	return handler{c: h.c, tags: merged, key: tagKey(merged)}
}

func (h handler) Counter(name string) sdkmetrics.MetricsCounter { return metric{h, name} }
func (h handler) Gauge(name string) sdkmetrics.MetricsGauge     { return metric{h, name} }
func (h handler) Timer(name string) sdkmetrics.MetricsTimer     { return metric{h, name} }

type metric struct {
	h    handler
	name string
}

func (m metric) Inc(n int64) {
	m.h.c.update(m.name, counter, m.h, func(s *series) { s.value += float64(n) })
}

func (m metric) Update(v float64) {
	m.h.c.update(m.name, gauge, m.h, func(s *series) { s.value = v })
}

func (m metric) Record(d time.Duration) {
	m.h.c.update(m.name, timer, m.h, func(s *series) {
		secs := d.Seconds()
		s.count++
		s.sum += secs
		for i, ub := range timerBuckets {
			if secs <= ub {
				s.buckets[i]++
			}
		}
	})
}

// Health is what /healthz and /readyz answer: ready once the Job informer synced and the
// worker polls; failed for good once the Temporal worker stopped on a fatal error
// (namespace not found, credentials refused), which a restart may cure.
type Health struct {
	ready  atomic.Bool
	failed atomic.Pointer[string]
}

// SetReady marks the worker ready to take tasks, or not (while it stops).
func (h *Health) SetReady(ready bool) { h.ready.Store(ready) }

// Fail records why the worker stopped polling; both probes fail from then on.
func (h *Health) Fail(reason string) { h.failed.Store(&reason) }

// Ready tells whether /readyz answers 200.
func (h *Health) Ready() bool { return h.ready.Load() && h.failed.Load() == nil }

// BuildInfo labels the constant noderollout_build_info series.
type BuildInfo struct{ Version, Commit, GoVersion, SDKVersion string }

// Serve answers /metrics from the collector and /healthz and /readyz from health.
func Serve(addr string, c *Collector, health *Health, build BuildInfo, pprof bool) *http.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "noderollout_build_info",
			Help: "Always 1; the labels say which build of the worker runs.",
			ConstLabels: prometheus.Labels{
				"version": build.Version, "commit": build.Commit,
				"go_version": build.GoVersion, "temporal_sdk_version": build.SDKVersion,
			},
		}, func() float64 { return 1 }))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if reason := health.failed.Load(); reason != nil {
			http.Error(w, "unhealthy: the Temporal worker stopped: "+*reason, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if reason := health.failed.Load(); reason != nil {
			http.Error(w, "not ready: the Temporal worker stopped: "+*reason, http.StatusServiceUnavailable)
			return
		}
		if !health.ready.Load() {
			http.Error(w, "not ready: Job informer not synced or worker not polling", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	if pprof {
		mux.HandleFunc("/debug/pprof/", httppprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", httppprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", httppprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", httppprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	}
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}
