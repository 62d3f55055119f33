package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/noderollout/noderollout/bench/fakestats"
)

// result is one system's rollout on one fleet size: what the table, CSV and plot show.
type result struct {
	System      string  `json:"system"`
	Rep         int     `json:"repetition"` // 0-based; the systems alternate ABBA across repetitions
	Nodes       int     `json:"nodes"`
	Parallelism int     `json:"parallelism"`
	JobSeconds  float64 `json:"jobSeconds"`
	MakespanS   float64 `json:"makespanSeconds"`
	// EndNoticeLagS is, for a workflow, how long after its last run's close (server time) the
	// client's wait for the result returned; the makespan ends at the close.
	EndNoticeLagS  float64 `json:"endNoticeLagSeconds,omitempty"`
	IdealS         float64 `json:"idealSeconds"`
	Ratio          float64 `json:"makespanRatio"`
	VsBaseline     float64 `json:"vsBaseline,omitempty"`
	VsSUC          float64 `json:"vsSUC,omitempty"` // against the faster peer run (suc, suc-qps) of the same repetition
	Selected       int     `json:"selected"`
	Succeeded      int     `json:"succeeded"`
	Failed         int     `json:"failed"`
	Other          int     `json:"other"`
	ExpectedFailed int     `json:"expectedFailed"`
	ContinueAsNew  int     `json:"continueAsNew"`

	// Own is the requests of the system's own client process (worker or baseline), counted by
	// the proxy it talks through; All is every client's, from the API server's metrics.
	Own apiCounts `json:"ownRequests"`
	// OwnLatency is the mean seconds the API server took per kind of own request, as the
	// proxy saw it: what a call costs outside the client process.
	OwnLatency       map[string]float64 `json:"ownLatencySeconds,omitempty"`
	All              apiCounts          `json:"allRequests"`
	OwnWritesPerNode float64            `json:"ownWritesPerNode"`
	OwnReadsPerNode  float64            `json:"ownReadsPerNode"`
	AllWritesPerNode float64            `json:"allWritesPerNode"`
	AllReadsPerNode  float64            `json:"allReadsPerNode"`
	OwnJobGets       float64            `json:"ownJobGets"`

	History                 *historyStats `json:"history,omitempty"`
	HistoryEventsPerNode    float64       `json:"historyEventsPerNode"`
	HistoryBytesPerNode     float64       `json:"historyBytesPerNode"`
	ActivityAttemptsPerNode float64       `json:"activityAttemptsPerNode"`
	HistoryWarnings         []string      `json:"historyWarnings,omitempty"`

	Process        processUse         `json:"process"` // the worker or the baseline
	StackCPU       map[string]float64 `json:"stackCPUSeconds"`
	MachineBusyPct float64            `json:"machineBusyPercent"`
	LoadAvg        float64            `json:"loadAverage1m"` // the machine's, at the start

	Slot           slotPhases         `json:"slotPhases"`
	SDKTimers      []timer            `json:"sdkTimers,omitempty"`
	ServerTimers   []timer            `json:"temporalServerTimers,omitempty"`
	ServerCounters map[string]float64 `json:"temporalServerCounters,omitempty"`
	SDKCounters    []sdkCounter       `json:"sdkCounters,omitempty"`
	Error          string             `json:"error,omitempty"`

	// Actions is what Temporal counted as billable actions during the run, by type (the
	// server's own action counter, before/after difference; nothing else uses the server
	// meanwhile). ActionsPerNode leaves out the queries: those are whoever follows the rollout
	// (the bench's progress line every 15 s, or the --watch command), counted apart in
	// QueriesPerNode and, for a --watch command, WatchQueriesPerMinute.
	Actions               map[string]float64 `json:"temporalActions,omitempty"`
	ActionsPerNode        float64            `json:"actionsPerNode"`
	QueriesPerNode        float64            `json:"queriesPerNode"`
	Watch                 string             `json:"watch,omitempty"`
	WatchQueriesPerMinute float64            `json:"watchQueriesPerMinute,omitempty"`

	// FakeKube is what the fake cluster of a --fake-kube-bin run counted.
	FakeKube *fakestats.Stats `json:"fakeKube,omitempty"`

	// Peer is what only the peer's runs (suc, suc-qps) measure.
	Peer *peerStats `json:"peer,omitempty"`

	start, end time.Time
}

// queryAction is the action type of a query (QueryWorkflow): it comes from whoever follows a
// rollout, not from the rollout.
const queryAction = "grpc_QueryWorkflow"

// allCPU is the CPU seconds of the client process and the whole stack during the rollout.
func (r *result) allCPU() float64 {
	all := r.Process.CPU
	for _, v := range r.StackCPU {
		all += v
	}
	return all
}

// cpuFloor is the makespan the same work would take on this machine's cores never idling.
// temporalCPU is the Temporal server's CPU seconds, its database's included when that is
// PostgreSQL (every backend); SQLite runs inside the dev server.
func (r *result) temporalCPU() float64 { return r.StackCPU["temporal"] + r.StackCPU["postgres"] }

func (r *result) cpuFloor() float64 { return r.allCPU() / float64(runtime.NumCPU()) }

// fill takes the differences of everything sampled before and after the rollout.
func (r *result) fill(before, after usage) {
	r.StackCPU = map[string]float64{}
	for name, cpu := range after.stackCPU {
		if before.pids[name] == after.pids[name] { // not restarted meanwhile
			r.StackCPU[name] = cpu - before.stackCPU[name]
		}
	}
	if dt := after.total - before.total; dt > 0 {
		r.MachineBusyPct = 100 * (after.busy - before.busy) / dt
	}
	r.ServerTimers = timersDiff(before.server, after.server)
	r.ServerCounters = map[string]float64{}
	for k, v := range after.serverN {
		if d := v - before.serverN[k]; d > 0 {
			r.ServerCounters[k] = d
		}
	}
	r.Actions = map[string]float64{}
	for k, v := range after.actions {
		if d := v - before.actions[k]; d > 0 {
			r.Actions[k] = d
		}
	}
	r.Own = after.own.sub(before.own)
	r.OwnLatency = map[string]float64{}
	for k, secs := range after.ownSecs.sub(before.ownSecs) {
		if n := r.Own[k]; n > 0 {
			r.OwnLatency[k.Verb+" "+k.Resource+subSuffix(k.Subresource)] = secs / n
		}
	}
	r.All = after.apiserver.sub(before.apiserver)
}

// derive computes the ratios and per-node figures.
func (r *result) derive() {
	if r.IdealS > 0 {
		r.Ratio = r.MakespanS / r.IdealS
	}
	n := float64(r.Nodes)
	if n == 0 {
		return
	}
	reads, writes := r.Own.totals()
	r.OwnReadsPerNode, r.OwnWritesPerNode = reads/n, writes/n
	reads, writes = r.All.totals()
	r.AllReadsPerNode, r.AllWritesPerNode = reads/n, writes/n
	r.OwnJobGets = r.Own.get("get", "jobs")
	if h := r.History; h != nil {
		r.HistoryEventsPerNode = float64(h.ParentEvents+h.ChildEvents) / n
		r.HistoryBytesPerNode = float64(h.TotalBytes) / n
		r.ActivityAttemptsPerNode = float64(h.ActivityAttempts+h.LocalAttempts) / n
	}
	var actions float64
	for k, v := range r.Actions {
		if k != queryAction {
			actions += v
		}
	}
	r.ActionsPerNode, r.QueriesPerNode = actions/n, r.Actions[queryAction]/n
	if r.Watch != "" && r.MakespanS > 0 {
		r.WatchQueriesPerMinute = r.Actions[queryAction] / (r.MakespanS / 60)
	}
}

// usesTemporal says whether the system runs on Temporal, so that its actions mean something.
func usesTemporal(system string) bool { return isNoderollout(system) || system == systemTemporalFloor }

// lost says why the rollout's counts do not account for every node, or "".
func (r *result) lost() string {
	switch total := r.Succeeded + r.Failed + r.Other; {
	case r.Error != "" && total != r.Nodes:
		return "did not finish: " + r.Error
	case r.Selected != r.Nodes:
		return fmt.Sprintf("selected %d of %d nodes", r.Selected, r.Nodes)
	case total != r.Nodes:
		return fmt.Sprintf("results add up to %d of %d nodes (%d succeeded, %d failed, %d other)",
			total, r.Nodes, r.Succeeded, r.Failed, r.Other)
	}
	return ""
}

// MarshalJSON writes the counts as a sorted list: JSON objects cannot have struct keys.
func (c apiCounts) MarshalJSON() ([]byte, error) {
	type entry struct {
		apiCall
		Count float64 `json:"count"`
	}
	list := make([]entry, 0, len(c))
	for k, v := range c {
		list = append(list, entry{k, v})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].Count != list[j].Count {
			return list[i].Count > list[j].Count
		}
		return fmt.Sprint(list[i].apiCall) < fmt.Sprint(list[j].apiCall)
	})
	return json.Marshal(list)
}

func subSuffix(sub string) string {
	if sub == "" {
		return ""
	}
	return "/" + sub
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (c *apiCounts) UnmarshalJSON(b []byte) error {
	var list []struct {
		apiCall
		Count float64 `json:"count"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return err
	}
	*c = apiCounts{}
	for _, e := range list {
		(*c)[e.apiCall] += e.Count
	}
	return nil
}

// sorted returns the counts largest first, as "verb resource[/sub] count" strings.
func (c apiCounts) sorted() []string {
	type entry struct {
		name  string
		count float64
	}
	var list []entry
	for k, v := range c {
		name := k.Verb + " " + k.Resource + subSuffix(k.Subresource)
		list = append(list, entry{name, v})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].count != list[j].count {
			return list[i].count > list[j].count
		}
		return list[i].name < list[j].name
	})
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = fmt.Sprintf("%s %.0f", e.name, e.count)
	}
	return out
}
