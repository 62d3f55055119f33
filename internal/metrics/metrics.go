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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdkmetrics "go.temporal.io/sdk/client"
)

// timerBuckets are seconds, from a fast Job to a long maintenance one.
var timerBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// Collector holds every series the SDK handler has written and serves them to Prometheus.
type Collector struct {
	mu       sync.Mutex
	families map[string]*family
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
func (c *Collector) Handler() sdkmetrics.MetricsHandler { return handler{c: c} }

func (c *Collector) series(name string, k kind, tags map[string]string) *series {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.families[name]
	if f == nil {
		f = &family{kind: k, labels: map[string]bool{}, series: map[string]*series{}}
		c.families[name] = f
	}
	key := tagKey(tags)
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

func tagKey(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + tags[k] + "\x00")
	}
	return b.String()
}

func (c *Collector) update(name string, k kind, tags map[string]string, apply func(*series)) {
	s := c.series(name, k, tags)
	c.mu.Lock()
	apply(s)
	c.mu.Unlock()
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
			desc = prometheus.NewDesc(metricName+"_total", name, labels, nil)
		case gauge:
			desc = prometheus.NewDesc(metricName, name, labels, nil)
		case timer:
			desc = prometheus.NewDesc(metricName+"_seconds", name, labels, nil)
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

type handler struct {
	c    *Collector
	tags map[string]string
}

func (h handler) WithTags(tags map[string]string) sdkmetrics.MetricsHandler {
	merged := make(map[string]string, len(h.tags)+len(tags))
	for k, v := range h.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[sanitize(k)] = v
	}
	return handler{c: h.c, tags: merged}
}

func (h handler) Counter(name string) sdkmetrics.MetricsCounter { return metric{h, name} }
func (h handler) Gauge(name string) sdkmetrics.MetricsGauge     { return metric{h, name} }
func (h handler) Timer(name string) sdkmetrics.MetricsTimer     { return metric{h, name} }

type metric struct {
	h    handler
	name string
}

func (m metric) Inc(n int64) {
	m.h.c.update(m.name, counter, m.h.tags, func(s *series) { s.value += float64(n) })
}

func (m metric) Update(v float64) {
	m.h.c.update(m.name, gauge, m.h.tags, func(s *series) { s.value = v })
}

func (m metric) Record(d time.Duration) {
	m.h.c.update(m.name, timer, m.h.tags, func(s *series) {
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

// Serve answers /metrics from the collector and /healthz and /readyz from ready.
func Serve(addr string, c *Collector, ready func() bool, pprof bool) *http.Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
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
