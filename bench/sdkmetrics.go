package main

import (
	"sort"
	"strings"
)

// timer is a latency histogram summed over the series that share a key.
type timer struct {
	Name  string  `json:"name"`
	Key   string  `json:"key,omitempty"` // workflow or activity type, request operation, task type
	Count float64 `json:"count"`
	Sum   float64 `json:"sumSeconds"`
	Mean  float64 `json:"meanSeconds"`
}

// sdkCounter is one of the worker's SDK counters.
type sdkCounter struct {
	Name  string  `json:"name"`
	Key   string  `json:"key,omitempty"`
	Value float64 `json:"value"`
}

// sdkTimerNames are the worker's latencies that say where a node's time goes (the worker's
// collector exports each SDK timer as a histogram <name>_seconds).
var sdkTimerNames = []string{
	"temporal_workflow_task_schedule_to_start_latency",
	"temporal_workflow_task_execution_latency",
	"temporal_workflow_task_replay_latency",
	"temporal_workflow_endtoend_latency",
	"temporal_activity_schedule_to_start_latency",
	"temporal_activity_execution_latency",
	"temporal_local_activity_execution_latency",
	"temporal_local_activity_succeed_endtoend_latency",
	"temporal_request_latency",
}

var sdkCounterNames = []string{
	"temporal_sticky_cache_hit",
	"temporal_sticky_cache_miss",
	"temporal_sticky_cache_total_forced_eviction",
	"temporal_workflow_task_execution_failed",
	"temporal_workflow_task_queue_poll_empty",
	"temporal_workflow_task_queue_poll_succeed",
	"temporal_activity_poll_no_task",
	"temporal_request_failure",
	"temporal_local_activity_total",
}

// serverTimerNames are the Temporal server's histograms that show where its time goes: how
// long history tasks (such as starting a child) wait and run, how long the persistence (the
// dev server's SQLite) takes per operation, and lock waits.
var serverTimerNames = []string{
	"task_latency_queue",
	"task_latency_processing",
	"persistence_latency",
	"lock_latency",
	"history_workflow_execution_cache_lock_hold_duration",
	"task_schedule_to_start_latency",
	"task_attempt", // not a latency: its mean is attempts per task
}

// serverCounterNames count the history tasks and requests the server refused because the
// workflow they touch was locked by another (BusyWorkflow).
var serverCounterNames = []string{
	"task_errors_throttled",
	"service_errors_resource_exhausted",
}

// parseActions sums the Temporal server's action counter by its action_type: what Temporal Cloud
// bills, counted by the server itself (command_StartChildWorkflowExecution and its _Extra, the
// two actions of a child; command_ScheduleActivityTask; grpc_RecordActivityTaskHeartbeat;
// command_BatchMarkers, the local activities of one workflow task; grpc_QueryWorkflow; ...).
func parseActions(text string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if metricName(line) != "action" {
			continue
		}
		labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		out[labels["action_type"]] += value
	}
	return out
}

// parseCounters sums the named counters by "name{key}", key being the first key label present.
func parseCounters(text string, names []string, keyLabels ...string) map[string]float64 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name := metricName(line)
		if !want[name] {
			continue
		}
		labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		out[name+"{"+firstOf(labels, keyLabels...)+"}"] += value
	}
	return out
}

// parseSDKMetrics reads the selected timers and counters from the worker's /metrics text.
func parseSDKMetrics(text string) ([]timer, []sdkCounter) {
	timers := parseTimers(text, "_seconds", sdkTimerNames, "activity_type", "workflow_type", "operation")
	counters := map[string]*sdkCounter{}
	for _, line := range strings.Split(text, "\n") {
		name := metricName(line)
		for _, c := range sdkCounterNames {
			if name != c+"_total" {
				continue
			}
			labels, value, ok := parseSample(line)
			if !ok {
				continue
			}
			key := firstOf(labels, "activity_type", "workflow_type", "operation")
			id := c + "\x00" + key
			if counters[id] == nil {
				counters[id] = &sdkCounter{Name: c, Key: key}
			}
			counters[id].Value += value
		}
	}
	var cs []sdkCounter
	for _, c := range counters {
		cs = append(cs, *c)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Name+cs[i].Key < cs[j].Name+cs[j].Key })
	return sortedTimers(timers), cs
}

// parseTimers sums the _sum and _count series of the named histograms (family name plus
// suffix) by the first key label present.
func parseTimers(text, suffix string, names []string, keyLabels ...string) map[string]*timer {
	want := map[string]string{}
	for _, n := range names {
		want[n+suffix+"_sum"] = n
		want[n+suffix+"_count"] = n
	}
	timers := map[string]*timer{}
	for _, line := range strings.Split(text, "\n") {
		name := metricName(line)
		family, ok := want[name]
		if !ok {
			continue
		}
		labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		key := firstOf(labels, keyLabels...)
		id := family + "\x00" + key
		if timers[id] == nil {
			timers[id] = &timer{Name: family, Key: key}
		}
		if strings.HasSuffix(name, "_sum") {
			timers[id].Sum += value
		} else {
			timers[id].Count += value
		}
	}
	return timers
}

// timersDiff is after minus before, keeping the timers that counted anything in between.
func timersDiff(before, after map[string]*timer) []timer {
	out := map[string]*timer{}
	for id, a := range after {
		d := *a
		if b := before[id]; b != nil {
			d.Count -= b.Count
			d.Sum -= b.Sum
		}
		if d.Count > 0 {
			out[id] = &d
		}
	}
	return sortedTimers(out)
}

func sortedTimers(m map[string]*timer) []timer {
	var ts []timer
	for _, t := range m {
		if t.Count > 0 {
			t.Mean = t.Sum / t.Count
			ts = append(ts, *t)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name+ts[i].Key < ts[j].Name+ts[j].Key })
	return ts
}

func metricName(line string) string {
	if line == "" || line[0] == '#' {
		return ""
	}
	if i := strings.IndexAny(line, "{ "); i >= 0 {
		return line[:i]
	}
	return line
}

func firstOf(labels map[string]string, names ...string) string {
	for _, n := range names {
		if v := labels[n]; v != "" {
			return v
		}
	}
	return ""
}
