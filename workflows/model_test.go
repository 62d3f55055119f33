package workflows

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The model test hunts the next defect where features meet. Each seed makes a random fleet
// (zones, nodes another rollout holds, nodes already done, names that do not exist), a random
// request (window, per-domain limit, failure budget, batch growth, canaries with soak and
// approval, delay between nodes, maintenance with or without a reboot and onSuccess, a check
// Job, continue-as-new, a cluster-wide budget) and a random script of events (Job outcomes and
// durations, nodes that do not come back from a reboot or fail their check, pause and resume
// alone and in bursts, setParallelism, approve, abort, cluster-budget grants and slots leaked to
// others, worker crashes as failed activity attempts, a node workflow terminated by hand, a
// converging rollout replaced with a new pace or a new template, which every node then runs
// again, nodes tainted against the Job's Pod, the worker's policy refusing a node's Job). It
// runs the real Rollout and node workflows over a fake cluster, one test environment per run
// (continue-as-new starts the next), and checks the invariants at every node start (what a
// Rollout may start), at every Job created (one per node at a time), and at the end (outcomes,
// cordons, markers, history). A failure names its seed; rerun it with
// NODEROLLOUT_MODEL_SEED=<seed> (NODEROLLOUT_MODEL_TRACE=1 prints what happened).
// NODEROLLOUT_MODEL_SEEDS sets how many seeds run and NODEROLLOUT_MODEL_FROM the first (make
// soak runs 5,000 others).

const (
	modelRoot     = "model-rollout"
	modelHash     = "model-hash"
	modelHash2    = "model-hash-2" // the template a replacement may bring (modelTemplate2)
	modelRollout  = "model"
	modelHorizon  = 12 * 24 * time.Hour // no scenario runs longer; events stop here
	modelTickStep = 15 * time.Minute    // how often the model's budget coordinator looks
	// modelNodeWrite is how long a cordon or an uncordon takes, long enough for an abort to
	// land in it; under the 12 s at which the test environment heartbeats a workflow task
	// that runs a local activity (past it, the environment stalls for seconds of wall time).
	modelNodeWrite = time.Second
)

// modelBefore runs the model on the code paths from before the seams were closed (the
// versions that closed them pinned to their default), to show what the model finds there:
// NODEROLLOUT_MODEL_BEFORE=1.
var modelBefore = os.Getenv("NODEROLLOUT_MODEL_BEFORE") != ""

func TestModel(t *testing.T) {
	seeds := 1000 // about 25 s on two cores
	if v, err := strconv.Atoi(os.Getenv("NODEROLLOUT_MODEL_SEEDS")); err == nil && v > 0 {
		seeds = v
	}
	first := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("NODEROLLOUT_MODEL_FROM"), 10, 64); err == nil {
		first = v
	}
	if v, err := strconv.ParseUint(os.Getenv("NODEROLLOUT_MODEL_SEED"), 10, 64); err == nil {
		first, seeds = v, 1
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			m := newModel(seed)
			problems := m.run(t)
			if os.Getenv("NODEROLLOUT_MODEL_TRACE") != "" {
				t.Logf("scenario: %s\nwhat happened:\n%s", m.describe(), strings.Join(m.log, "\n"))
			}
			if len(problems) > 0 {
				t.Fatalf("seed %d (rerun: NODEROLLOUT_MODEL_SEED=%d go test ./workflows -run TestModel)\nscenario: %s\n%s\nwhat happened:\n%s",
					seed, seed, m.describe(), strings.Join(problems, "\n"), strings.Join(m.log, "\n"))
			}
		})
	}
}

// modelNode is one node of the fake fleet and of the fake cluster.
type modelNode struct {
	name, zone string
	missing    bool          // named in the request, no Node object
	done       bool          // marked succeeded for this template before the rollout
	heldFor    time.Duration // another rollout holds it this long from the start
	// Converge scenarios: a node that joins at joinAt (absent before), and one whose marker
	// is wiped at driftAt (0: never), which the rollout must run again.
	joinAt, driftAt time.Duration
	joined          bool
	drifts          int  // drifts that came after a run of it ended
	wiped           bool // its marker was wiped since its last run ended
	// markedThisRun: the running run has recorded its outcome on the Node; driftedAfterMark:
	// a drift wiped that record later, and the run has not recorded one since. Such a drift
	// counts as one after the run once the run ends: nothing of the run restores the marker.
	markedThisRun, driftedAfterMark bool
	failedRuns                      int    // runs that ended failed (retryFailedAfter runs them again)
	markerBefore                    string // the marker when its last run began (an aborted run may leave it)
	jobTakes                        time.Duration
	jobFails                        bool
	unhealthy                       bool // fails its health gate
	// refused: the worker's policy refuses this rollout's Job on the node (a cordon or a
	// drain alone it would allow), so the rollout must not touch the node at all.
	refused bool
	// The reboot (maintenance.reboot): rebootFails, the node does not come back in time;
	// boots counts its boots; rebootJobs, our reboot Jobs there now.
	rebootFails       bool
	boots, rebootJobs int
	// The check Job (gates.checkJob): checkFails, it fails there; checkJobs, ours there now.
	// markedDone: maintenance.onSuccess marked the node done.
	checkFails, markedDone bool
	checkJobs              int
	// blockedFor: Pods that gates.blockingPods.selector matches run on the node until this
	// long after the scenario's start; nothing may be done to the node before.
	blockedFor time.Duration
	// tainted: the node carries a taint the Job's Pod does not tolerate (taintedScenario), so
	// the rollout must never run it.
	tainted bool

	// The fake cluster's state of the node.
	cordoned, ourCordon bool
	cordonedOnce        bool   // we cordoned it at some point
	liftedDuringAbort   bool   // our cordon was being lifted (after its success) when the abort came
	marker              string // outcome recorded for markerHash
	markerHash          string // the template the marker speaks of
	liveJobs            int
	jobCreated          time.Time // when our live Job was created
	// What the rollout did with it.
	runs     int       // node workflow executions
	running  bool      // one runs now
	outcome  string    // the last run's outcome
	started  time.Time // the last run's start
	ended    time.Time // the last run's end
	attempts int       // child starts the rollout made (busy refusals included)
	// templateRuns: runs a replacement with a new template may add (one for a node that had
	// run, or was done, at the hand-over).
	templateRuns int
}

// modelEvent is one scripted event at an offset from the scenario's start.
type modelEvent struct {
	at   time.Duration
	kind string // pause, resume, burst, parallelism, approve, abort, leak, unleak, join, drift, replace
	n    int
	node string // join and drift
	// late (pause and resume): the worker is away when the signal comes, so it reaches the run
	// with whatever workflow task comes next (a timer's, a child's end), not in one of its
	// own; the worker is back late after it, when the signal is sent once more (unless another
	// pause or resume came since) so that a task surely comes.
	late  time.Duration
	words []string // burst: pauses and resumes sent together
	// template (replace): the replacement brings a new template (modelTemplate2), which every
	// node then runs again; otherwise only a new parallelism.
	template bool
}

type model struct {
	// standIns holds the nodes whose stand-in (a node workflow handed over in flight, begun
	// again in the next run's environment) has not yet adopted its Job: the drain it repeats
	// is one the child it stands for had finished. A sync.Map, read from mock matchers.
	standIns sync.Map
	// checkJobs holds the names of the check Jobs made, for the mock matchers.
	checkJobs sync.Map
	seed      uint64
	rng       *rand.Rand
	start     time.Time
	nodes     map[string]*modelNode
	order     []string
	req       api.RolloutRequest
	cluster   api.Cluster
	events    []modelEvent
	crashes   bool       // some activity attempts fail as if their worker died
	gate      *modelGate // gates.prometheus; nil in most scenarios (model_gate_test.go)
	// abortInUncordon: the abort comes while a node's uncordon runs (uncordoning says when).
	abortInUncordon bool
	termination     *modelTermination // nil in most scenarios (model_terminate_test.go)
	abortScheduled  bool
	// converge: the request has mode: converge; nodes join and drift, and it ends by an abort.
	converge bool
	now      func() time.Time

	mu       sync.Mutex
	problems []string
	log      []string // what happened, for a failure's report
	// What the model saw happen, in absolute virtual time.
	pausedAt, resumedAt []time.Time
	lastSteer           int        // the event of the latest pause or resume
	parallelism         []timedInt // accepted setParallelism, and the request's at start
	approvedAt          time.Time
	approvals           int
	// replacedAt: the replacing run began (a replaced rollout starts afresh: its own canary
	// stage and approval, its own failure budget).
	replacedAt     time.Time
	replacePending bool         // accepted, not yet handed over
	played         map[int]bool // events played, by index
	lastStartAt    time.Time    // the rollout's last child start, busy refusals included
	abortedAt      time.Time
	// pendingTemplate: the accepted replacement brings modelTemplate2; templateReplaced: the
	// replacing run runs it (every node's marker of modelHash is then stale).
	pendingTemplate, templateReplaced bool
	// taintedScenario: the template's tolerations are known, and some nodes are tainted.
	taintedScenario bool
	// The model's cluster-wide budget coordinator.
	queue   []string
	held    map[string]bool
	leaks   int
	runs    int // workflow runs (continue-as-new + 1)
	peak    int // the largest history of one run
	attempt map[string]int
	// started is the child each node last started as: its workflow type and input, for the
	// stand-in that carries a handed-over node on in the next run's environment.
	started map[string]startedChild
}

type startedChild struct {
	workflowType string
	in           NodeRolloutInput
	asked        bool // the rollout asked it to tell the rollout when it ends (SignalNotifyWhenFree)
}

type timedInt struct {
	at time.Time
	n  int
}

func newModel(seed uint64) *model {
	m := &model{seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), nodes: map[string]*modelNode{},
		held: map[string]bool{}, attempt: map[string]int{}, started: map[string]startedChild{}}
	r := m.rng
	m.start = time.Date(2026, 3, 2, r.IntN(24), 0, 0, 0, time.UTC)
	zones := 1 + r.IntN(3)
	n := 4 + r.IntN(13)
	for i := range n {
		node := &modelNode{name: fmt.Sprintf("n-%02d", i), zone: fmt.Sprintf("z%d", r.IntN(zones)),
			jobTakes: time.Duration(1+r.IntN(90)) * time.Minute, jobFails: r.IntN(100) < 15}
		switch x := r.IntN(100); {
		case x < 5:
			node.missing = true
		case x < 12:
			node.done, node.marker, node.markerHash = true, string(api.OutcomeSucceeded), modelHash
		case x < 27:
			node.heldFor = time.Duration(10+r.IntN(600)) * time.Minute
		}
		m.nodes[node.name] = node
		m.order = append(m.order, node.name)
	}
	req := api.RolloutRequest{Name: modelRollout, Namespace: "jobs", Nodes: slices.Clone(m.order), JobTemplate: sampleTemplate,
		Parallelism: 1 + r.IntN(6)}
	req.MaxFailures = api.IntOrPercent([]string{"0", "1", "2", "25%", "100%"}[r.IntN(5)])
	if r.IntN(4) == 0 {
		req.Batch = &api.Batch{Initial: 1, Growth: []string{api.GrowthLinear, api.GrowthExponential}[r.IntN(2)]}
	}
	if r.IntN(3) == 0 {
		req.MaintenanceWindow = &api.MaintenanceWindow{Start: fmt.Sprintf("%02d:00", r.IntN(24)), Duration: fmt.Sprintf("%dh", 2+r.IntN(8))}
	}
	if r.IntN(3) == 0 {
		req.Topology = &api.Topology{Key: zoneKey, MaxPerDomain: 1 + r.IntN(2)}
	}
	if r.IntN(3) == 0 {
		var canaries []string
		for _, name := range m.order {
			if !m.nodes[name].missing && !m.nodes[name].done && len(canaries) < 1+r.IntN(2) {
				canaries = append(canaries, name)
			}
		}
		if len(canaries) > 0 {
			req.Canary = &api.Canary{Nodes: canaries, Approval: r.IntN(2) == 0}
			if r.IntN(2) == 0 {
				req.Canary.Soak = fmt.Sprintf("%dm", 10+r.IntN(60))
			}
		}
	}
	if r.IntN(4) == 0 {
		req.DelayBetweenNodes = fmt.Sprintf("%dm", 1+r.IntN(5))
	}
	if r.IntN(3) == 0 {
		req.ContinueAsNewAfter = 2 + r.IntN(6)
	}
	if r.IntN(3) == 0 {
		mt := &api.Maintenance{Cordon: true, OnFailure: []string{api.OnFailureKeepCordoned, api.OnFailureUncordon}[r.IntN(2)]}
		if r.IntN(2) == 0 {
			mt.Drain = &api.Drain{Timeout: "30m"}
		}
		if r.IntN(2) == 0 {
			mt.Health = &api.HealthGate{Timeout: "20m"}
			mt.Soak = fmt.Sprintf("%dm", 1+r.IntN(20))
			for _, name := range m.order {
				m.nodes[name].unhealthy = r.IntN(100) < 10
			}
		}
		req.Maintenance = mt
	}
	if r.IntN(3) == 0 {
		m.cluster = api.Cluster{Name: "c1", Budget: 1 + r.IntN(3)}
	}
	m.crashes = r.IntN(3) == 0
	m.req = req
	if r.IntN(4) == 0 {
		m.makeConverge()
	}
	for _, n := range m.nodes {
		n.joined = n.joinAt == 0
	}
	m.script()
	m.scriptGate()
	m.scriptTermination()
	m.scriptStrayWords()
	m.scriptNewTemplates()
	m.scriptPolicy()
	m.scriptReboot()
	m.scriptCheckAndMark()
	m.scriptBlockingPods()
	m.scriptTaints()
	return m
}

// modelTaint is the taint of a tainted node, which the model's template does not tolerate.
const modelTaint = "gpu=true:NoSchedule"

// scriptTaints: a fifth of the scenarios taint some nodes with a taint the Job's Pod does not
// tolerate. Such a node is never run (it is skipped, named by its taint), and a canary that is
// one proves nothing. Drawn after everything else, so the scenarios of the seeds stay as they
// were.
func (m *model) scriptTaints() {
	r := m.rng
	if r.IntN(5) != 0 {
		return
	}
	m.taintedScenario = true
	for _, name := range m.order {
		m.nodes[name].tainted = r.IntN(100) < 12
	}
}

// untolerated says the rollout, which reads the template's tolerations, must not run node.
func (m *model) untolerated(node string) bool {
	return m.taintedScenario && m.nodes[node].tainted
}

// modelBlockingTimeout is how long a node waits for its blocking Pods before it is blocked.
const modelBlockingTimeout = time.Hour

// scriptBlockingPods: a quarter of the scenarios hold each node while Pods matching
// gates.blockingPods run on it, which on some nodes run for up to a day and a half (some
// longer than the node waits). Drawn after everything else, so the scenarios of the seeds stay
// as they were.
func (m *model) scriptBlockingPods() {
	r := m.rng
	if r.IntN(4) != 0 {
		return
	}
	gates := api.Gates{}
	if m.req.Gates != nil {
		gates = *m.req.Gates
	}
	gates.BlockingPods = &api.BlockingPodsGate{Selector: "app=critical", Timeout: modelBlockingTimeout.String()}
	m.req.Gates = &gates
	for _, name := range m.order {
		if r.IntN(100) < 30 {
			m.nodes[name].blockedFor = time.Duration(10+r.IntN(36*60)) * time.Minute
		}
	}
}

// touchWhileBlocked fails the model when the rollout writes to a node (what) while its blocking
// Pods still run (callers hold m.mu).
func (m *model) touchWhileBlocked(node, what string) {
	if until := m.start.Add(m.nodes[node].blockedFor); m.now().Before(until) {
		m.fail("%s: %s at %s, while its blocking Pods ran (until %s)", node, what, m.now(), until)
	}
}

// scriptCheckAndMark: a quarter of the scenarios run a check Job on each node after its Job
// (gates.checkJob), which fails on some nodes; half of the maintained ones mark each node done
// (maintenance.onSuccess). Drawn after everything else, so the scenarios of the seeds stay as
// they were.
func (m *model) scriptCheckAndMark() {
	r := m.rng
	if r.IntN(4) == 0 {
		gates := api.Gates{}
		if m.req.Gates != nil {
			gates = *m.req.Gates
		}
		gates.CheckJob = &api.CheckJobGate{JobTemplate: strings.Replace(sampleTemplate, "name: c\n", "name: check\n", 1), Timeout: "30m"}
		m.req.Gates = &gates
		for _, name := range m.order {
			m.nodes[name].checkFails = r.IntN(100) < 10
		}
	}
	if m.req.Maintenance != nil && r.IntN(2) == 0 {
		mt := *m.req.Maintenance
		mt.OnSuccess = &api.OnSuccess{Labels: map[string]string{"example.com/model-done": "true"}}
		m.req.Maintenance = &mt
	}
}

// scriptReboot: half of the maintained scenarios reboot each node after its Job, and some
// nodes do not come back in time. Drawn after everything else, so the scenarios of the seeds
// stay as they were.
func (m *model) scriptReboot() {
	r := m.rng
	if m.req.Maintenance == nil || r.IntN(2) != 0 {
		return
	}
	mt := *m.req.Maintenance
	mt.Reboot = &api.Reboot{JobTemplate: strings.Replace(sampleTemplate, "name: c\n", "name: reboot\n", 1), Timeout: "20m"}
	m.req.Maintenance = &mt
	for _, name := range m.order {
		m.nodes[name].rebootFails = r.IntN(100) < 10
	}
}

// scriptPolicy: in a quarter of the scenarios the worker's policy refuses the rollout's Job on
// some nodes. The refusal is the Job's, not the cordon's or the drain's: the rollout must ask
// about the whole node run before it writes anything (the cordon carries the Job that
// follows), not cordon and drain a node and then learn that its Job may not run there. Drawn
// after everything else, so the scenarios of the seeds stay as they were.
func (m *model) scriptPolicy() {
	r := m.rng
	if r.IntN(4) != 0 {
		return
	}
	for _, name := range m.order {
		m.nodes[name].refused = r.IntN(100) < 15
	}
}

// errPolicyRefusesJob is what every writing activity returns for a refused node.
func errPolicyRefusesJob(node string) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("policy rule \"forbiddenNodeLabels\" denies the rollout's Job on node %s", node), api.ErrPolicyDenied, nil)
}

// scriptNewTemplates makes half of the replacements bring a new template as well, which every
// node then runs again: the replacing run's first pass is then a whole rollout of its own,
// with its canaries, approval and failure budget afresh. Drawn after everything else, so the
// scenarios of the seeds stay as they were.
func (m *model) scriptNewTemplates() {
	for i := range m.events {
		if m.events[i].kind == "replace" {
			m.events[i].template = m.rng.IntN(2) == 0
		}
	}
}

// modelTemplate2 is the template a replacement may bring: another container name.
var modelTemplate2 = strings.Replace(sampleTemplate, "name: c\n", "name: c2\n", 1)

// scriptStrayWords: in a fifth of the scenarios a worker sends the rollout up to three bare
// words for nodes of its fleet, at random times, as it does to every running rollout when
// some node workflow was terminated (activities.TerminatedNodeNotifier): a rollout waiting for
// the node looks at it again, one whose own child holds the node hands it over as if no word had
// come (versionWordOfAnotherRun), any other ignores the word. Drawn after everything else, so the
// scenarios of the seeds stay as they were.
func (m *model) scriptStrayWords() {
	r := m.rng
	if r.IntN(5) != 0 {
		return
	}
	for range 1 + r.IntN(3) {
		m.events = append(m.events, modelEvent{at: time.Duration(r.IntN(48*60)) * time.Minute, kind: "word", node: m.order[r.IntN(len(m.order))]})
	}
}

// modelConvergeEnd is when a converging scenario's rollout is aborted (its only end but a
// failure): late enough for every joined node's turn, windows, holders and pauses included.
const modelConvergeEnd = 10 * 24 * time.Hour

// makeConverge turns the scenario into a converging rollout over a selector: the nodes the
// request would have named missing join during the first two days instead, and some nodes
// have their marker wiped at some point, which the rollout must repair.
func (m *model) makeConverge() {
	r := m.rng
	m.converge = true
	m.req.Nodes = nil
	m.req.NodeSelector = "pool=model"
	m.req.Mode = api.ModeConverge
	for _, name := range m.order {
		n := m.nodes[name]
		if n.missing || r.IntN(100) < 15 {
			n.missing = false
			n.joinAt = time.Duration(1+r.IntN(48*60)) * time.Minute
			n.heldFor = 0
			if c := m.req.Canary; c != nil {
				c.Nodes = slices.DeleteFunc(c.Nodes, func(s string) bool { return s == name })
			}
		}
		// A canary's re-run after the canary stage is an ordinary node's, which the model's
		// canary rules (measured from a canary's last end) would not tell apart.
		if r.IntN(100) < 15 && (m.req.Canary == nil || !slices.Contains(m.req.Canary.Nodes, name)) {
			n.driftAt = n.joinAt + time.Duration(1+r.IntN(72*60))*time.Minute
		}
	}
	if c := m.req.Canary; c != nil && len(c.Nodes) == 0 {
		m.req.Canary = nil
	}
	if r.IntN(2) == 0 {
		m.req.RetryFailedAfter = fmt.Sprintf("%dm", 30+r.IntN(12*60))
	}
}

// script makes the events: pause/resume pairs, parallelism changes, approvals tried every two
// hours, cluster slots leaked to another rollout for a while, and maybe an abort.
func (m *model) script() {
	r := m.rng
	for range r.IntN(4) {
		at := time.Duration(r.IntN(48*60)) * time.Minute
		m.events = append(m.events, modelEvent{at: at, kind: "pause"},
			modelEvent{at: at + time.Duration(1+r.IntN(240))*time.Minute, kind: "resume"})
	}
	if r.IntN(4) == 0 {
		// A burst: three pauses or resumes while the worker is away, which reach the run with
		// whatever task comes next (only the first alone; the order of the rest may be lost),
		// then a resume an hour later and another after two (the first may come in that same
		// task, with the burst).
		at := time.Duration(r.IntN(48*60)) * time.Minute
		var words []string
		for range 3 {
			words = append(words, []string{api.SignalPause, api.SignalResume}[r.IntN(2)])
		}
		m.events = append(m.events, modelEvent{at: at, kind: "burst", words: words},
			modelEvent{at: at + time.Hour, kind: "resume"}, modelEvent{at: at + 2*time.Hour, kind: "resume"})
	}
	for range r.IntN(3) {
		m.events = append(m.events, modelEvent{at: time.Duration(r.IntN(48*60)) * time.Minute, kind: "parallelism", n: 1 + r.IntN(6)})
	}
	if m.cluster.Budget > 0 {
		for range r.IntN(3) {
			at := time.Duration(r.IntN(24*60)) * time.Minute
			m.events = append(m.events, modelEvent{at: at, kind: "leak"},
				modelEvent{at: at + time.Duration(10+r.IntN(300))*time.Minute, kind: "unleak"})
		}
	}
	if m.converge {
		for _, name := range m.order {
			n := m.nodes[name]
			if n.joinAt > 0 {
				m.events = append(m.events, modelEvent{at: n.joinAt, kind: "join", node: name})
			}
			if n.driftAt > 0 {
				m.events = append(m.events, modelEvent{at: n.driftAt, kind: "drift", node: name})
			}
		}
		m.events = append(m.events, modelEvent{at: modelConvergeEnd, kind: "abort"})
		if r.IntN(2) == 0 {
			// starter start of a changed request (its parallelism) replaces the rollout; the
			// operator may then set the pace again, maybe while the nodes in flight end.
			at := time.Duration(60+r.IntN(96*60)) * time.Minute
			m.events = append(m.events, modelEvent{at: at, kind: "replace", n: 1 + r.IntN(6)})
			if r.IntN(2) == 0 {
				m.events = append(m.events, modelEvent{at: at + time.Duration(1+r.IntN(30))*time.Minute, kind: "parallelism", n: 1 + r.IntN(6)})
			}
		}
	}
	switch x := r.IntN(10); {
	case x < 2:
		m.events = append(m.events, modelEvent{at: time.Duration(r.IntN(24*3600)) * time.Second, kind: "abort"})
	case x < 4 && m.req.Maintenance != nil:
		// An operator aborts while a node's cordon is being lifted after its success.
		m.abortInUncordon = true
	}
	sort.SliceStable(m.events, func(i, j int) bool { return m.events[i].at < m.events[j].at })
	if r.IntN(3) == 0 {
		for i, e := range m.events {
			if e.kind == "pause" || e.kind == "resume" {
				m.events[i].late = time.Duration(1+r.IntN(600)) * time.Second
			}
		}
	}
}

func (m *model) describe() string {
	var parts []string
	for _, name := range m.order {
		n := m.nodes[name]
		s := fmt.Sprintf("%s(%s %v", name, n.zone, n.jobTakes)
		switch {
		case n.missing:
			s += " missing"
		case n.done:
			s += " done"
		}
		if n.heldFor > 0 {
			s += fmt.Sprintf(" held %v", n.heldFor)
		}
		if n.jobFails {
			s += " fails"
		}
		if n.unhealthy {
			s += " unhealthy"
		}
		if n.refused {
			s += " refused"
		}
		if n.rebootFails {
			s += " stays down"
		}
		if n.checkFails {
			s += " check fails"
		}
		if n.blockedFor > 0 {
			s += fmt.Sprintf(" blocked %v", n.blockedFor)
		}
		if n.tainted {
			s += " tainted"
		}
		if n.joinAt > 0 {
			s += fmt.Sprintf(" joins %v", n.joinAt)
		}
		if n.driftAt > 0 {
			s += fmt.Sprintf(" drifts %v", n.driftAt)
		}
		parts = append(parts, s+")")
	}
	req := m.req
	req.Nodes, req.JobTemplate = nil, ""
	return fmt.Sprintf("start %s; converge %v; budget %d; crashes %v; abort in an uncordon %v\nnodes %s\nrequest %+v maintenance %+v canary %+v window %+v topology %+v batch %+v\nmetric gate %v\nevents %v\ntermination %+v",
		m.start.Format(time.RFC3339), m.converge, m.cluster.Budget, m.crashes, m.abortInUncordon, strings.Join(parts, " "), req, req.Maintenance, req.Canary,
		req.MaintenanceWindow, req.Topology, req.Batch, m.gate, m.events, m.termination)
}

func (m *model) fail(format string, args ...any) {
	m.problems = append(m.problems, fmt.Sprintf(format, args...))
}

// note records what happened (callers hold m.mu).
func (m *model) note(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf(format, args...))
}

// crash says whether this attempt of an activity step fails as if its worker had died: a
// pure function of the seed, the node, the step and the attempt, whatever order goroutines
// run in. Only the regular activities (the Job's wait, the drain, the health gate) crash here:
// the test environment now and then retries a local activity whose first attempt failed past
// the retry's success (seen: RunJob run 86 times until its deadline), which a server does not;
// the local activities' retries are tested one step at a time by
// TestMaintenanceResumesAfterACrashAtEachStep.
func (m *model) crash(node, step string) bool {
	if !m.crashes {
		return false
	}
	m.attempt[node+"/"+step]++
	if m.attempt[node+"/"+step] > 1 {
		return false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%s", m.seed, node, step)
	return h.Sum64()%4 == 0
}

var errWorkerDied = errors.New("the worker running this attempt went away")

// errRunEnded answers an activity of a run whose environment has ended. The test environment
// runs an activity in a goroutine of its own and does not wait for it when its workflow
// continues as new, so a create the run started can land in the fake cluster after the next
// run's stand-in has taken the node on, and even after that node's end. On a server that
// create is the handed-over child's own and the next run never repeats it; here it is an
// echo of the environment, and the model drops it.
var errRunEnded = errors.New("this run's test environment has ended")

// lockRun takes m.mu for a mock of run's environment. Once that run has ended it reports
// false, without the lock.
func (m *model) lockRun(run int) bool {
	m.mu.Lock()
	if m.runs != run {
		m.mu.Unlock()
		return false
	}
	return true
}

// run plays the scenario, one test environment per workflow run, and returns the problems.
func (m *model) run(t *testing.T) []string {
	m.parallelism = []timedInt{{at: m.start, n: m.req.Parallelism}}
	now := m.start
	var carried *api.Progress
	req := m.req
	var final error
	var result api.RolloutResult
	for run := 1; ; run++ {
		if run > 40 {
			m.fail("more than 40 runs: the rollout does not end")
			break
		}
		m.mu.Lock()
		m.runs = run // the runs before it have ended: what their activities still do is dropped
		m.mu.Unlock()
		env, meter := m.newEnv(t, now, run)
		env.ExecuteWorkflow(modelRoot, req, carried)
		m.peak = max(m.peak, meter.peak)
		if meter.peak >= serverHistoryWarning {
			m.fail("run %d: history reached %d events, over the server's warning of %d", run, meter.peak, serverHistoryWarning)
		}
		if !env.IsWorkflowCompleted() {
			m.fail("run %d did not complete", run)
			return m.problems
		}
		err := env.GetWorkflowError()
		var can *workflow.ContinueAsNewError
		if errors.As(err, &can) {
			req, carried = api.RolloutRequest{}, nil // decoded afresh, as the server hands them over
			if err := converterFromEnv().FromPayloads(can.Input, &req, &carried); err != nil {
				m.fail("decoding the continue-as-new input: %v", err)
				return m.problems
			}
			now = env.Now()
			// The hand-over: a continue-as-new after a replacement was accepted that carries it
			// no further (the model's own account, not the run's Progress.Replaced).
			if m.replacePending && (carried == nil || carried.Converge == nil || carried.Converge.Replacement == nil) {
				m.mu.Lock()
				m.note("run %d replaces the rollout with parallelism %d (new template: %v)", run+1, req.Parallelism, m.pendingTemplate)
				m.replacedAt, m.approvedAt, m.replacePending = now, time.Time{}, false
				if m.pendingTemplate {
					m.templateReplaced = true
					for _, n := range m.nodes {
						if n.runs > 0 || n.done {
							n.templateRuns++
						}
					}
				}
				m.mu.Unlock()
			}
			continue
		}
		final = err
		if err == nil {
			if err := env.GetWorkflowResult(&result); err != nil {
				m.fail("reading the result: %v", err)
			}
		} else {
			result = detailsIn[api.RolloutResult](err)
		}
		break
	}
	m.checkEnd(final, result)
	return m.problems
}

// detailsIn reads the result (a RolloutResult, a NodeResult) that a failed or cancelled
// workflow carries in its error: the zero T where it carries none.
func detailsIn[T any](err error) T {
	var r T
	var appErr *temporal.ApplicationError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &appErr) && appErr.HasDetails():
		_ = appErr.Details(&r)
	case errors.As(err, &canceled) && canceled.HasDetails():
		_ = canceled.Details(&r)
	}
	return r
}

// modelHarness is the root workflow of a run: it starts the holders of the nodes another
// rollout still holds, then runs the Rollout in this workflow, as the cluster's worker does.
func (m *model) harness(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
	now := workflow.Now(ctx)
	holders := 0
	for _, name := range m.order {
		if end := m.start.Add(m.nodes[name].heldFor); end.After(now) {
			workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: m.cluster.NodeWorkflowID(name)}),
				"hold", end.Sub(now))
			holders++
		}
	}
	handed := m.carryOnHandedNodes(ctx, carried)
	if holders > 0 || len(handed) > 0 {
		// The test environment cannot signal a child before it has run its first task.
		if err := workflow.Sleep(ctx, time.Second); err != nil {
			return api.RolloutResult{}, err
		}
	}
	if err := m.askHandedNodes(ctx, carried, handed); err != nil {
		return api.RolloutResult{}, err
	}
	return rolloutIn(ctx, m.cluster, req, carried)
}

// modelHandedNode is the workflow type of a stand-in: on a server the child a run hands over
// in flight goes on running after its run continues as new, but each run of the model has an
// environment of its own, which ends with the run. So the next run's environment starts the
// node's workflow again under the node's workflow ID, asked (as the previous run asked the
// child) to tell the rollout when it ends; it adopts the node's Job as a retried create does,
// and the model counts it as the same node workflow, not a second start.
const modelHandedNode = "model-handed-node"

// carryOnHandedNodes starts a stand-in for each node the previous run handed over in flight.
func (m *model) carryOnHandedNodes(ctx workflow.Context, carried *api.Progress) []workflow.ChildWorkflowFuture {
	if carried == nil {
		return nil
	}
	var handed []workflow.ChildWorkflowFuture
	for _, n := range carried.InFlightNodes {
		m.mu.Lock()
		child, ok := m.started[n.Name]
		node := m.nodes[n.Name]
		running, ended := node.running, api.NodeResult{Node: n.Name, Outcome: api.Outcome(node.outcome)}
		terminated := !running && m.terminatedAsHanded(n.Name)
		m.mu.Unlock()
		if !ok {
			m.fail("%s was handed over in flight but never started", n.Name)
			continue
		}
		// Not the rollout's child on a server: only the rollout's own abort may cancel it.
		detached, _ := workflow.NewDisconnectedContext(ctx)
		opts := workflow.WithChildOptions(detached, workflow.ChildWorkflowOptions{
			WorkflowID:        m.cluster.NodeWorkflowID(n.Name),
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_ABANDON,
			// Else the test environment ends it at once on a cancel, where a server lets the
			// node workflow clean up.
			WaitForCancellation: true,
		})
		if !running {
			// It ended at the instant its run continued as new, in the same environment task:
			// on a server, either the run hears the end first (and does not hand it over) or
			// the next run is told it. The model takes the second.
			m.mu.Lock()
			tells := terminated && m.workerTells(n.Name)
			m.mu.Unlock()
			handed = append(handed, workflow.ExecuteChildWorkflow(opts, modelEndedNode, ended, child.in.TellWhenFree, terminated, tells))
			continue
		}
		handed = append(handed, workflow.ExecuteChildWorkflow(opts, modelHandedNode, child.workflowType, child.in))
	}
	return handed
}

// modelEndedNode stands for a handed-over node workflow that ended as its run continued as new:
// it tells the rollout of the end at once if the child was told the rollout at its start, else
// once asked; one that was terminated tells nothing, but a worker may (workerTells).
const modelEndedNode = "model-ended-node"

func endedNode(ctx workflow.Context, result api.NodeResult, tellWhenFree string, terminated, workerTells bool) error {
	if terminated {
		if workerTells {
			tellTerminated(ctx, result.Node, new(bool))
		}
		return nil
	}
	if tellWhenFree == "" {
		var w NodeWaiter
		workflow.GetSignalChannel(ctx, SignalNotifyWhenFree).Receive(ctx, &w)
		tellWhenFree = w.WorkflowID
	}
	self := workflow.GetInfo(ctx).WorkflowExecution.RunID
	return workflow.SignalExternalWorkflow(ctx, tellWhenFree, "", api.SignalNodeFree, api.NodeFreed{Node: result.Node, RunID: self, Result: &result}).Get(ctx, nil)
}

// askHandedNodes asks each stand-in to tell the rollout when it ends, and gives the run the
// stand-in's run ID in place of the child's it stands for.
func (m *model) askHandedNodes(ctx workflow.Context, carried *api.Progress, handed []workflow.ChildWorkflowFuture) error {
	self := workflow.GetInfo(ctx).WorkflowExecution.ID
	for i, f := range handed {
		var started workflow.Execution
		if err := f.GetChildWorkflowExecution().Get(ctx, &started); err != nil {
			return err
		}
		carried.InFlightNodes[i].RunID = started.RunID
		m.mu.Lock()
		node := carried.InFlightNodes[i].Name
		child := m.started[node]
		m.mu.Unlock()
		if child.in.TellWhenFree != "" {
			continue // it tells the rollout unasked, as its input says
		}
		if !child.asked {
			m.fail("%s was handed over in flight, but its run neither told it the rollout at its start nor asked it: the next run would not hear it end", node)
		}
		if err := workflow.SignalExternalWorkflow(ctx, started.ID, started.RunID, SignalNotifyWhenFree, NodeWaiter{WorkflowID: self}).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// handedNode runs a node's workflow again, of the type its run started.
func handedNode(ctx workflow.Context, workflowType string, in NodeRolloutInput) (api.NodeResult, error) {
	nodeWorkflows := map[string]func(workflow.Context, NodeRolloutInput) (api.NodeResult, error){
		api.NodeRolloutWorkflow: NodeRollout, api.NodeRolloutV2Workflow: NodeRolloutV2,
		api.NodeRolloutV3Workflow: NodeRolloutV3, api.NodeRolloutV4Workflow: NodeRolloutV4,
		api.NodeRolloutV5Workflow: NodeRolloutV5,
	}
	return nodeWorkflows[workflowType](ctx, in)
}

// joinedNodes are the nodes a converging rollout's selector matches now (callers hold m.mu).
func (m *model) joinedNodes() []string {
	var out []string
	for _, name := range m.order {
		if n := m.nodes[name]; n.joined && !n.missing {
			out = append(out, name)
		}
	}
	return out
}

func (m *model) newEnv(t *testing.T, now time.Time, run int) (*testsuite.TestWorkflowEnvironment, *historyMeter) {
	env, _ := newTestEnv(nil, m.cluster)
	m.now = env.Now
	meter := newHistoryMeter(env, modelRoot)
	intercept(env, meter, &modelWatch{m: m})
	env.SetStartTime(now)
	env.SetTestTimeout(time.Minute)
	// A run's environment ends with the run: the children it handed over in flight go on as
	// stand-ins in the next run's (harness).
	env.SetDetachedChildWait(false)
	if run > 1 {
		env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", run-1))
	}
	env.RegisterWorkflowWithOptions(holdNode, workflow.RegisterOptions{Name: "hold"})
	env.RegisterWorkflowWithOptions(m.harness, workflow.RegisterOptions{Name: modelRoot})
	env.RegisterWorkflowWithOptions(handedNode, workflow.RegisterOptions{Name: modelHandedNode})
	env.RegisterWorkflowWithOptions(endedNode, workflow.RegisterOptions{Name: modelEndedNode})
	if modelBefore {
		for _, id := range []string{versionAbortDuringUncordon, versionRecordAbortInFinalize, versionCapBeforePrepare, versionPauseWinsTogether, versionPassedOverCanaryStops} {
			env.OnGetVersion(id, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion).Maybe()
		}
		env.OnGetVersion(versionAdmission, workflow.DefaultVersion, 3).Return(workflow.DefaultVersion).Maybe()
	}
	m.mockActivities(env, run)
	m.mockGate(env, run)
	m.mockBudget(env)
	m.schedule(env, now)
	return env, meter
}

// schedule registers the script's events still to come, and two that repeat until the
// horizon (each registers its next): the budget coordinator's looks, and an approval tried
// every two hours until one is accepted.
func (m *model) schedule(env *testsuite.TestWorkflowEnvironment, now time.Time) {
	for i, e := range m.events {
		at := m.start.Add(e.at)
		if at.Before(now) || m.happened(i) {
			continue
		}
		env.RegisterDelayedCallback(func() { m.happen(env, i, e) }, at.Sub(now))
	}
	horizon := m.start.Add(modelHorizon)
	var every func(step time.Duration, do func())
	every = func(step time.Duration, do func()) {
		env.RegisterDelayedCallback(func() {
			do()
			if env.Now().Add(step).Before(horizon) {
				every(step, do)
			}
		}, step)
	}
	if m.cluster.Budget > 0 {
		m.grant(env)
		every(modelTickStep, func() { m.grant(env) })
	}
	if m.req.Canary != nil && m.req.Canary.Approval {
		every(2*time.Hour, func() { m.happen(env, -1, modelEvent{kind: "approve"}) })
	}
}

// sinceReplaced says whether t falls in the current request's runs: after the hand-over to
// a replacement, if there was one (callers hold m.mu).
func (m *model) sinceReplaced(t time.Time) bool {
	return m.replacedAt.IsZero() || t.After(m.replacedAt)
}

// happened says whether event i was played: a run that begins at its instant (the one before
// ended then) does not play it again.
func (m *model) happened(i int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.played[i]
}

// happen plays one event.
func (m *model) happen(env *testsuite.TestWorkflowEnvironment, i int, e modelEvent) {
	at := env.Now()
	m.mu.Lock()
	if m.played == nil {
		m.played = map[int]bool{}
	}
	m.played[i] = true
	m.mu.Unlock()
	switch e.kind {
	case "pause":
		m.mu.Lock()
		m.pausedAt = append(m.pausedAt, at)
		m.mu.Unlock()
		m.steer(env, i, e, api.SignalPause)
	case "resume":
		m.mu.Lock()
		m.resumedAt = append(m.resumedAt, at)
		m.mu.Unlock()
		m.steer(env, i, e, api.SignalResume)
	case "burst":
		// The words land in the channels now, the run reads them with the next task. They
		// count a nanosecond apart, in the order sent.
		m.mu.Lock()
		m.lastSteer = i
		for k, w := range e.words {
			if w == api.SignalPause {
				m.pausedAt = append(m.pausedAt, at.Add(time.Duration(k)))
			} else {
				m.resumedAt = append(m.resumedAt, at.Add(time.Duration(k)))
			}
		}
		m.mu.Unlock()
		for _, w := range e.words {
			env.SignalWorkflowSkippingWorkflowTask(w, nil)
		}
	case "parallelism":
		env.UpdateWorkflow(api.UpdateSetParallelism, fmt.Sprintf("p%d-%d", m.runs, i), &testsuite.TestUpdateCallback{
			OnAccept: func() {
				m.mu.Lock()
				m.parallelism = append(m.parallelism, timedInt{at: at, n: e.n})
				m.mu.Unlock()
			},
			OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, api.SetParallelismRequest{Parallelism: e.n})
	case "replace":
		next := m.req
		next.Parallelism = e.n
		if e.template {
			next.JobTemplate = modelTemplate2
		}
		env.UpdateWorkflow(api.UpdateReplace, fmt.Sprintf("replace-%d-%d", m.runs, i), &testsuite.TestUpdateCallback{
			OnAccept: func() {
				m.mu.Lock()
				m.parallelism = append(m.parallelism, timedInt{at: at, n: e.n})
				m.replacePending, m.pendingTemplate = true, e.template
				m.note("replace with parallelism %d (new template: %v) accepted at %s", e.n, e.template, at)
				m.mu.Unlock()
			},
			OnReject: func(err error) {
				m.mu.Lock()
				m.note("replace refused at %s: %v", at, err)
				m.mu.Unlock()
			},
			OnComplete: func(any, error) {},
		}, next)
	case "approve":
		if !m.approvedAt.IsZero() {
			return
		}
		m.approvals++ // each try is an update of its own; one ID would be answered as the first was
		env.UpdateWorkflow(api.UpdateApprove, fmt.Sprintf("approve-%d", m.approvals), &testsuite.TestUpdateCallback{
			OnAccept: func() {
				m.mu.Lock()
				m.approvedAt = at
				m.mu.Unlock()
			},
			OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, api.ApproveRequest{})
	case "abort":
		m.mu.Lock()
		m.abortedAt = at
		m.mu.Unlock()
		env.CancelWorkflow()
	case "join", "drift":
		m.mu.Lock()
		n := m.nodes[e.node]
		if e.kind == "join" {
			n.joined = true
		} else {
			// A drift while the node runs is repaired by that run's own marker, unless the run
			// has recorded it already and records no other.
			n.marker = ""
			switch {
			case n.running && n.markedThisRun:
				n.driftedAfterMark = true
			case n.runs > 0 && !n.running:
				n.drifts++
				n.wiped = true
			}
		}
		m.note("%s: %s at %s", e.node, e.kind, at.Format(time.TimeOnly))
		m.mu.Unlock()
		// What the worker's Node watch sends.
		env.SignalWorkflow(api.SignalNodesChanged, api.NodesChanged{Nodes: []string{e.node}})
	case "word":
		m.mu.Lock()
		m.note("%s: a worker's word that a workflow of the node was terminated elsewhere, at %s", e.node, at.Format(time.TimeOnly))
		m.mu.Unlock()
		env.SignalWorkflow(api.SignalNodeFree, api.NodeFreed{Node: e.node, RunID: "terminated-elsewhere"})
	case "leak":
		m.mu.Lock()
		m.leaks++
		m.held[fmt.Sprintf("leak-%d", i)] = true
		m.mu.Unlock()
	case "unleak":
		m.mu.Lock()
		for k := range m.held {
			if strings.HasPrefix(k, "leak-") {
				delete(m.held, k)
				break
			}
		}
		m.mu.Unlock()
		m.grant(env)
	}
}

// mockBudget plays the cluster's budget coordinator: requests queue, releases free slots, and
// grant hands free slots out first come, first served, on the model's own schedule.
func (m *model) mockBudget(env *testsuite.TestWorkflowEnvironment) {
	// A signal to a workflow the environment does not know (a holder that ended) fails, as
	// on a server.
	// A cancel of one that has ended is accepted, as the dev server accepts it (cancelHandedIn
	// then asks the node for its word, which fails).
	defer func() {
		env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, mock.Anything, mock.Anything, mock.Anything).Return(
			errors.New("unknown external workflow execution")).Maybe()
		env.OnRequestCancelExternalWorkflow(mock.Anything, mock.Anything, mock.Anything).Return(nil).Maybe()
	}()
	if m.cluster.Budget == 0 {
		return
	}
	coordinator := m.cluster.BudgetWorkflowID()
	env.OnSignalExternalWorkflow(mock.Anything, coordinator, "", SignalSlotAcquire, mock.Anything).Return(func(_, _, _, _ string, arg any) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		id := arg.(SlotRequest).Holder.Node
		delete(m.held, id) // a repeated request: its grant was lost; grant it again
		if !slices.Contains(m.queue, id) {
			m.queue = append(m.queue, id)
		}
		return nil
	}).Maybe()
	env.OnSignalExternalWorkflow(mock.Anything, coordinator, "", SignalSlotRelease, mock.Anything).Return(func(_, _, _, _ string, arg any) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		id := arg.(SlotRelease).Holder.Node
		delete(m.held, id)
		m.queue = slices.DeleteFunc(m.queue, func(q string) bool { return q == id })
		return nil
	}).Maybe()
}

func (m *model) grant(env *testsuite.TestWorkflowEnvironment) {
	m.mu.Lock()
	var grants []string
	for len(m.queue) > 0 && len(m.held) < m.cluster.Budget {
		id := m.queue[0]
		m.queue = m.queue[1:]
		m.held[id] = true
		grants = append(grants, id)
	}
	m.mu.Unlock()
	for _, id := range grants {
		env.SignalWorkflow(SignalSlotGranted, SlotGrant{Node: id})
	}
}

// steer sends a pause or a resume: at once, or (e.late) as a worker that is away gets it.
func (m *model) steer(env *testsuite.TestWorkflowEnvironment, i int, e modelEvent, signal string) {
	m.mu.Lock()
	m.lastSteer = i
	m.mu.Unlock()
	if e.late == 0 {
		env.SignalWorkflow(signal, nil)
		return
	}
	env.SignalWorkflowSkippingWorkflowTask(signal, nil)
	env.RegisterDelayedCallback(func() {
		m.mu.Lock()
		again := m.lastSteer == i
		m.mu.Unlock()
		if again {
			env.SignalWorkflow(signal, nil)
		}
	}, e.late)
}

// mockActivities is the fake cluster.
func (m *model) mockActivities(env *testsuite.TestWorkflowEnvironment, run int) {
	a := &activities.Activities{}
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		prepared := activities.PreparedTemplate{Hash: modelHash, TolerationsRead: m.taintedScenario}
		if in.Template == modelTemplate2 {
			prepared.Hash = modelHash2
		}
		return prepared, nil
	}).Maybe()
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		if !m.lockRun(run) {
			return activities.ListNodesResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		names := slices.Clone(in.Names)
		if len(names) == 0 { // a converging rollout's selector: the nodes that have joined
			names = m.joinedNodes()
		}
		slices.Sort(names)
		names = slices.Compact(names)
		res := activities.ListNodesResult{Total: len(names), Labels: map[string]map[string]string{}}
		for _, name := range names {
			if name <= in.After {
				continue
			}
			if len(res.Nodes)+len(res.Done)+len(res.Missing) == in.Limit {
				res.More = true
				break
			}
			res.Next = name
			n := m.nodes[name]
			switch {
			case n.missing:
				res.Missing = append(res.Missing, name)
				continue
			case n.marker == string(api.OutcomeSucceeded) && n.markerHash == in.TemplateHash && !in.Rerun:
				res.Done = append(res.Done, name)
			case in.TaintCheck != nil && n.tainted:
				if res.Untolerated == nil {
					res.Untolerated = map[string]string{}
				}
				res.Untolerated[name] = modelTaint
			default:
				res.Nodes = append(res.Nodes, name)
			}
			res.Labels[name] = map[string]string{zoneKey: n.zone}
		}
		return res, nil
	}).Maybe()
	env.OnActivity(a.CheckNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.CheckNodesInput) (activities.CheckNodesResult, error) {
		if !m.lockRun(run) {
			return activities.CheckNodesResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		joined := m.joinedNodes()
		names := in.Names
		if in.Resync {
			names = joined
		}
		res := activities.CheckNodesResult{Selected: len(joined), Labels: map[string]map[string]string{}}
		for _, name := range joined {
			if o := m.nodes[name]; o.marker == string(api.OutcomeSucceeded) && o.markerHash == in.TemplateHash {
				res.AtTemplate++
			}
		}
		for _, name := range append(slices.Clone(names), in.Retry...) {
			n := m.nodes[name]
			retry := slices.Contains(in.Retry, name) && api.RetriedByConverge(api.Outcome(n.marker)) && n.markerHash == in.TemplateHash
			stale := n.marker == "" || n.markerHash != in.TemplateHash || n.marker == string(api.OutcomeAborted)
			if n.joined && (stale || retry) && in.TaintCheck != nil && n.tainted {
				if res.Untolerated == nil {
					res.Untolerated = map[string]string{}
				}
				res.Untolerated[name] = modelTaint
				continue
			}
			if n.joined && (stale || retry) && !slices.Contains(res.Run, name) {
				res.Run = append(res.Run, name)
				res.Labels[name] = map[string]string{zoneKey: n.zone}
			}
		}
		return res, nil
	}).Maybe()
	job := func(node string) activities.JobRef {
		return activities.JobRef{Namespace: "jobs", Name: modelRollout + "-" + node, UID: "uid-" + node, Node: node}
	}
	create := func(node string) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[node]
		m.standIns.Delete(node)
		m.touchWhileBlocked(node, "its Job created")
		if n.refused {
			m.note("%s: create refused by the policy", node)
			return errPolicyRefusesJob(node)
		}
		m.note("%s: create (%d live)", node, n.liveJobs)
		if n.liveJobs > 0 {
			return nil // the retried create adopts the Job it made
		}
		n.liveJobs++
		n.jobCreated = m.now()
		return nil
	}
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RunJobInput) (activities.RunJobResult, error) {
		if err := create(in.Job.Node); err != nil {
			return activities.RunJobResult{}, err
		}
		ref := job(in.Job.Node)
		if in.Trim {
			ref = ref.TrimmedOf(activities.PlannedJob(in.Job)) // as the activity does: the node restores it
		}
		return activities.RunJobResult{Job: ref, Running: true}, nil
	}).Maybe()
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		if err := create(in.Node); err != nil {
			return activities.JobRef{}, err
		}
		return job(in.Node), nil
	}).Maybe()
	m.mockCheckJob(env, run)
	m.mockBlockingPods(env, run)
	for _, name := range m.order {
		n := m.nodes[name]
		env.OnActivity(a.WaitJob, mock.Anything, mock.MatchedBy(func(in activities.WaitJobInput) bool { return in.Job.Node == name })).
			After(n.jobTakes).Return(func(_ context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
			if !m.lockRun(run) {
				return activities.JobEnd{}, errRunEnded
			}
			defer m.mu.Unlock()
			if m.crash(name, "wait") {
				m.note("%s: wait: the worker died", name)
				return activities.JobEnd{}, errWorkerDied
			}
			m.fireTermination(name, false)
			m.note("%s: the Job ended", name)
			return n.jobEnd(), nil
		}).Maybe()
		// The worker's Job informer completes AwaitJobEnd when the Job ends (a NodeRolloutV4's
		// or V5's wait), and the watch that follows reads the end.
		env.OnActivity(a.AwaitJobEnd, mock.Anything, mock.MatchedBy(func(in activities.AwaitJobEndInput) bool { return in.Job.Node == name })).
			After(n.jobTakes).Return(func(_ context.Context, in activities.AwaitJobEndInput) error {
			if !m.lockRun(run) {
				return errRunEnded
			}
			defer m.mu.Unlock()
			if m.crash(name, "await") {
				m.note("%s: await: the worker died", name)
				return errWorkerDied
			}
			m.fireTermination(name, false)
			return nil
		}).Maybe()
	}
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.WatchJobInput) (activities.JobWatch, error) {
		if !m.lockRun(run) {
			return activities.JobWatch{}, errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Job.Node]
		if n.liveJobs == 0 || m.now().Before(n.jobCreated.Add(n.jobTakes)) {
			return activities.JobWatch{Running: true}, nil
		}
		m.note("%s: the Job ended (watched)", in.Job.Node)
		return activities.JobWatch{End: n.jobEnd()}, nil
	}).Maybe()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		if !m.lockRun(run) {
			return activities.FinalizeResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		m.rolloutLearns(in)
		n.marker, n.markerHash = string(in.End.Outcome), in.TemplateHash
		if n.running {
			n.markedThisRun, n.driftedAfterMark = true, false
		}
		m.note("%s: finalize %s (job %v)", in.Node, in.End.Outcome, in.Job != nil)
		if in.Job != nil {
			n.liveJobs = 0
		}
		if in.StepsFollow && in.Job != nil {
			m.fireTermination(in.Node, true)
		}
		return activities.FinalizeResult{}, nil
	}).Maybe()
	env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, j activities.JobRef) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		if _, check := m.checkJobs.Load(j.Name); check {
			m.note("%s: delete the check Job", j.Node)
			m.nodes[j.Node].checkJobs = 0
			return nil
		}
		m.note("%s: delete Job", j.Node)
		m.nodes[j.Node].liveJobs = 0
		return nil
	}).Maybe()
	// Cordon and uncordon take a while (an API server under load), so an abort can land in them.
	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).After(modelNodeWrite).Return(func(_ context.Context, in activities.NodeInput) (activities.CordonResult, error) {
		if !m.lockRun(run) {
			return activities.CordonResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		m.touchWhileBlocked(in.Node, "cordoned")
		if n.refused && in.Job != nil { // the cordon knows the Job that follows
			m.note("%s: cordon refused by the policy (the Job that follows)", in.Node)
			return activities.CordonResult{}, errPolicyRefusesJob(in.Node)
		}
		if n.cordoned && !n.ourCordon {
			return activities.CordonResult{}, nil
		}
		n.cordoned, n.ourCordon, n.cordonedOnce = true, true, true
		return activities.CordonResult{WeCordoned: true}, nil
	}).Maybe()
	env.OnActivity(a.UncordonNode, mock.Anything, mock.Anything).AfterFn(func() time.Duration {
		// An uncordon begins: the operator of an abortInUncordon scenario aborts halfway.
		if !m.lockRun(run) {
			return modelNodeWrite
		}
		abort := m.abortInUncordon && !m.abortScheduled
		m.abortScheduled = m.abortScheduled || abort
		m.mu.Unlock()
		if abort {
			// The environment's clock runs in real time while a local activity runs: soon.
			env.RegisterDelayedCallback(func() { m.happen(env, -1, modelEvent{kind: "abort"}) }, 100*time.Millisecond)
		}
		return modelNodeWrite
	}).Return(func(_ context.Context, in activities.NodeInput) (activities.UncordonResult, error) {
		if !m.lockRun(run) {
			return activities.UncordonResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		if !n.ourCordon {
			return activities.UncordonResult{}, nil
		}
		n.cordoned, n.ourCordon = false, false
		// An abort that came while this uncordon ran (after the node's success) may still see
		// it done, whatever onFailure says; one that came before it must not.
		began := env.Now().Add(-modelNodeWrite)
		if !m.abortedAt.IsZero() && !m.abortedAt.Before(began) {
			n.liftedDuringAbort = true
		}
		return activities.UncordonResult{Uncordoned: true}, nil
	}).Maybe()
	// A stand-in's drain comes back at once: on a server the child it stands for goes on
	// where it was (its Job's wait, or later), and never drains again. Drained for 3 minutes,
	// a stand-in handed over in the last seconds of its Job met an abort before it adopted
	// the Job, and left it (seed 69373).
	env.OnActivity(a.DrainNode, mock.Anything, mock.MatchedBy(func(in activities.DrainInput) bool {
		_, ok := m.standIns.Load(in.Node)
		return ok
	})).Return(activities.DrainResult{}, nil).Maybe()
	env.OnActivity(a.DrainNode, mock.Anything, mock.Anything).After(3 * time.Minute).Return(func(_ context.Context, in activities.DrainInput) (activities.DrainResult, error) {
		if !m.lockRun(run) {
			return activities.DrainResult{}, errRunEnded
		}
		defer m.mu.Unlock()
		if m.nodes[in.Node].refused {
			m.fail("%s was drained, though the policy refuses its Job there", in.Node)
		}
		m.touchWhileBlocked(in.Node, "drained")
		if m.crash(in.Node, "drain") {
			m.note("%s: drain: the worker died", in.Node)
			return activities.DrainResult{}, errWorkerDied
		}
		return activities.DrainResult{}, nil
	}).Maybe()
	m.mockReboot(env, run)
	env.OnActivity(a.CheckNodeHealth, mock.Anything, mock.Anything).After(2 * time.Minute).Return(func(_ context.Context, in activities.HealthInput) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		if m.crash(in.Node, fmt.Sprintf("health/%d", in.HoldSeconds)) {
			m.note("%s: health: the worker died", in.Node)
			return errWorkerDied
		}
		if m.nodes[in.Node].unhealthy {
			return temporal.NewNonRetryableApplicationError("node "+in.Node+" was not healthy in time: Ready=False", api.ErrUnhealthy, nil)
		}
		return nil
	}).Maybe()
}

// modelWatch checks the model's rules where the workflows act: every node child the Rollout
// starts, and every node workflow that runs.
type modelWatch struct {
	interceptor.WorkerInterceptorBase
	m *model
}

func (w *modelWatch) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	switch workflow.GetInfo(ctx).WorkflowType.Name {
	case modelRoot:
		return outbound(func(next interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor {
			return &rootStarts{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: next}, m: w.m}
		}).InterceptWorkflow(ctx, next)
	case api.NodeRolloutWorkflow, api.NodeRolloutV2Workflow, api.NodeRolloutV3Workflow, api.NodeRolloutV4Workflow, api.NodeRolloutV5Workflow:
		return &nodeWatch{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, m: w.m}
	case modelHandedNode:
		return &nodeWatch{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, m: w.m, goesOn: true}
	}
	return next
}

type rootStarts struct {
	interceptor.WorkflowOutboundInterceptorBase
	m *model
}

func (o *rootStarts) ExecuteChildWorkflow(ctx workflow.Context, childType string, args ...any) workflow.ChildWorkflowFuture {
	if in, ok := args[0].(NodeRolloutInput); ok {
		node := in.Node
		if node == "" { // a NodeRolloutV5's input leaves it to the workflow ID
			node, _ = o.m.cluster.NodeOfWorkflowID(workflow.GetChildWorkflowOptions(ctx).WorkflowID)
		}
		// The model's check is test machinery outside the workflow's state: its map order
		// decides nothing the workflow does.
		//workflowcheck:ignore
		o.m.checkStart(node, workflow.Now(ctx))
		o.m.mu.Lock()
		o.m.started[node] = startedChild{workflowType: childType, in: in}
		o.m.mu.Unlock()
	}
	return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
}

// SignalExternalWorkflow notes each node child the run asks to tell it when it ends: only
// those, and those told at their start, tell the next run when they are handed over.
func (o *rootStarts) SignalExternalWorkflow(ctx workflow.Context, workflowID, runID, signalName string, arg any) workflow.Future {
	if signalName == SignalNotifyWhenFree {
		o.m.mu.Lock()
		for _, node := range o.m.order {
			if child, ok := o.m.started[node]; ok && o.m.cluster.NodeWorkflowID(node) == workflowID {
				child.asked = true
				o.m.started[node] = child
			}
		}
		o.m.mu.Unlock()
	}
	return o.Next.SignalExternalWorkflow(ctx, workflowID, runID, signalName, arg)
}

type nodeWatch struct {
	interceptor.WorkflowInboundInterceptorBase
	m *model
	// goesOn: a stand-in for a node workflow handed over in flight, which began in an
	// earlier run's environment.
	goesOn bool
	// dead: the model terminated this node workflow; its calls are held (deadCalls).
	dead bool
}

func (w *nodeWatch) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return w.Next.Init(&deadCalls{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, dead: &w.dead})
}

func (w *nodeWatch) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	node := in.Args[len(in.Args)-1].(NodeRolloutInput).Node
	if node == "" { // a NodeRolloutV5's input leaves it to the workflow ID
		node, _ = w.m.cluster.NodeOfWorkflowID(workflow.GetInfo(ctx).WorkflowExecution.ID)
	}
	if w.goesOn {
		w.m.nodeGoesOn(node, workflow.Now(ctx))
	} else {
		w.m.nodeBegins(node, workflow.Now(ctx))
	}
	run := func(ctx workflow.Context) (any, error) { return w.Next.ExecuteWorkflow(ctx, in) }
	res, err, terminated := w.m.runTerminable(ctx, node, w.goesOn, &w.dead, run)
	outcome := outcomeOf(res, err)
	if terminated {
		outcome = string(api.OutcomeFailed)
	}
	w.m.nodeEnds(node, workflow.Now(ctx), outcome)
	w.m.mu.Lock()
	tells := terminated && w.goesOn && w.m.workerTells(node)
	w.m.mu.Unlock()
	if tells {
		tellTerminated(ctx, node, &w.dead)
	}
	return res, err
}

// outcomeOf reads a node workflow's outcome from what it returned.
func outcomeOf(res any, err error) string {
	result, ok := res.(api.NodeResult)
	if !ok || err != nil {
		result = detailsIn[api.NodeResult](err)
	}
	return string(result.Outcome)
}

func (m *model) nodeBegins(node string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[node]
	if n.running {
		m.fail("%s: a second node workflow runs while one runs", node)
	}
	if m.untolerated(node) {
		m.fail("%s runs, though it carries %s, which the Job's Pod does not tolerate", node, modelTaint)
	}
	if m.converge && n.runs > 0 && api.RetriedByConverge(api.Outcome(n.outcome)) && !n.wiped && m.sinceReplaced(n.ended) {
		// A failed node runs again only through retryFailedAfter, and not before it; or in
		// the first pass of a replacing request, as in a re-run.
		retry := m.req.RetryFailedAfterDuration()
		switch {
		case retry == 0:
			m.fail("%s failed at %s and runs again at %s without retryFailedAfter", node, n.ended, at)
		case at.Before(n.ended.Add(retry)):
			m.fail("%s failed at %s and runs again at %s, before retryFailedAfter %s", node, n.ended, at, retry)
		}
	}
	n.running, n.runs, n.started, n.wiped, n.markerBefore = true, n.runs+1, at, false, n.marker
	n.markedThisRun, n.driftedAfterMark = false, false
	m.note("%s: node workflow begins at %s", node, at.Format(time.TimeOnly))
}

// nodeGoesOn is a handed-over node workflow carried on in the next run's environment: it
// must be the one still running.
func (m *model) nodeGoesOn(node string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.nodes[node].running {
		m.fail("%s was handed over in flight at %s, but its node workflow was not running", node, at)
	}
	m.note("%s: node workflow goes on in the next run at %s", node, at.Format(time.TimeOnly))
	m.standIns.Store(node, true)
}

func (m *model) nodeEnds(node string, at time.Time, outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[node]
	n.running, n.ended, n.outcome = false, at, outcome
	m.awaitTheRolloutsWord(node)
	if n.driftedAfterMark {
		n.drifts++
		n.wiped = true
	}
	if api.RetriedByConverge(api.Outcome(outcome)) {
		n.failedRuns++
	}
	m.note("%s: node workflow ends %s at %s", node, outcome, at.Format(time.TimeOnly))
	if n.rebootJobs > 0 && !m.lastRunTerminated(node) {
		m.fail("%s: its node workflow ended (%s) with a reboot Job of ours still there", node, outcome)
	}
	if n.liveJobs > 0 && !m.lastRunTerminated(node) {
		m.fail("%s: its node workflow ended (%s) with a Job of ours still there", node, outcome)
	}
}

// jobEnd is how the node's Job ends.
func (n *modelNode) jobEnd() activities.JobEnd {
	if n.jobFails {
		return activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
	}
	return activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}
}

// retries is how many runs of the node retryFailedAfter may have made: one per failed run.
func (n *modelNode) retries() int { return n.failedRuns }

// failedOutcome says whether an outcome spends the failure budget.
func failedOutcome(o string) bool {
	switch api.Outcome(o) {
	case api.OutcomeFailed, api.OutcomeTimedOut, api.OutcomeDrainTimedOut, api.OutcomeUnhealthy, api.OutcomeRebootTimedOut, api.OutcomeCheckFailed:
		return true
	}
	return false
}

// checkStart checks that node may start at t, by every rule of the request as the model
// knows it; each rule is checked leniently at the instant an event happens (the rollout may
// have acted on either side of it).
func (m *model) checkStart(node string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.nodes[node]
	n.attempts++
	m.note("%s: the rollout starts it at %s", node, t.Format(time.TimeOnly))
	if !m.abortedAt.IsZero() && t.After(m.abortedAt) {
		m.fail("%s started at %s, after the abort at %s", node, t, m.abortedAt)
	}
	if m.paused(t) {
		m.fail("%s started at %s while the rollout was paused", node, t)
	}
	m.checkGate(node, t)
	settings := m.req.Settings()
	if w := m.req.MaintenanceWindow; w != nil {
		if open, _ := api.WindowState(*settings.Pacing.Window, time.UTC, t); !open {
			m.fail("%s started at %s outside the window %+v", node, t, *w)
		}
	}
	failures := 0
	for _, o := range m.nodes {
		if o.runs > 0 && !o.running && o.ended.Before(t) && failedOutcome(o.outcome) && m.sinceReplaced(o.ended) {
			failures++
		}
	}
	selected := len(m.req.Nodes)
	if m.converge {
		selected = len(m.joinedNodes())
		if !n.joined {
			m.fail("%s started at %s before it joined", node, t)
		}
	}
	if !settings.FailureBudget.Allows(failures, selected) {
		m.fail("%s started at %s with %d failures known, over maxFailures %s", node, t, failures, m.req.MaxFailures)
	}
	if c := m.req.Canary; c != nil {
		canaryFailed, canaryBlocked, canariesDone, lastEnd := false, false, true, time.Time{}
		// After the hand-over to a new template, a canary is done once it has run that
		// template: what it did before counts for nothing.
		anew := m.templateReplaced && t.After(m.replacedAt)
		for _, name := range c.Nodes {
			o := m.nodes[name]
			ended := o.runs > 0 && !o.running && !o.ended.After(t) // the rollout may go on at the instant a canary ends
			if anew && !o.ended.After(m.replacedAt) {
				ended = false
			}
			if m.untolerated(name) { // passed over at its listing: it never runs
				canaryBlocked = true
			}
			if ended {
				// ... but may have started the node before it learnt of a failure at that instant.
				canaryFailed = canaryFailed || (failedOutcome(o.outcome) && o.ended.Before(t))
				canaryBlocked = canaryBlocked || (o.outcome == string(api.OutcomeBlocked) && o.ended.Before(t))
				lastEnd = maxTime(lastEnd, o.ended)
			} else if !o.done || anew {
				canariesDone = false
			}
		}
		switch {
		case canaryFailed:
			m.fail("%s started at %s after a canary failed", node, t)
		case canaryBlocked && !slices.Contains(c.Nodes, node):
			m.fail("%s started at %s after a canary was blocked: the canaries proved nothing", node, t)
		case !slices.Contains(c.Nodes, node) && !canariesDone:
			m.fail("%s started at %s before the canaries were done", node, t)
		case !slices.Contains(c.Nodes, node) && c.Soak != "" && t.Before(lastEnd.Add(mustDuration(c.Soak))):
			m.fail("%s started at %s before the canaries' soak ended (%s + %s)", node, t, lastEnd, c.Soak)
		case !slices.Contains(c.Nodes, node) && c.Approval && (m.approvedAt.IsZero() || t.Before(m.approvedAt)):
			m.fail("%s started at %s before the canaries were approved", node, t)
		}
	}
	running, inZone := 0, 0
	for _, o := range m.nodes {
		if o.running && o.name != node {
			running++
			if o.zone == n.zone {
				inZone++
			}
		}
	}
	if running+1 > m.parallelismAt(t) {
		m.fail("%s started at %s with %d nodes running, over parallelism %d", node, t, running, m.parallelismAt(t))
	}
	if tp := m.req.Topology; tp != nil && inZone+1 > tp.MaxPerDomain {
		m.fail("%s started at %s with %d nodes of %s running, over maxPerDomain %d", node, t, inZone, n.zone, tp.MaxPerDomain)
	}
	if m.cluster.Budget > 0 && !m.held[m.cluster.NodeWorkflowID(node)] {
		m.fail("%s started at %s without a slot of the cluster-wide budget", node, t)
	}
	if d := settings.DelayBetweenNodes; d > 0 && !m.lastStartAt.IsZero() && t.Before(m.lastStartAt.Add(d)) {
		m.fail("%s started at %s, %s after the last start, under delayBetweenNodes %s", node, t, t.Sub(m.lastStartAt), d)
	}
	m.lastStartAt = t
}

// paused says whether the last pause before t (or at it) has no resume after it, before t.
func (m *model) paused(t time.Time) bool {
	var last time.Time
	for _, p := range m.pausedAt {
		if p.Before(t) && p.After(last) {
			last = p
		}
	}
	if last.IsZero() {
		return false
	}
	for _, r := range m.resumedAt {
		if !r.Before(last) && !r.After(t) {
			return false
		}
	}
	return true
}

// parallelismAt is the largest parallelism in effect at t (the old one counts at the instant
// of a change).
func (m *model) parallelismAt(t time.Time) int {
	p := 0
	for _, c := range m.parallelism {
		if c.at.Before(t) {
			p = c.n
		}
	}
	for _, c := range m.parallelism {
		if c.at.Equal(t) {
			p = max(p, c.n)
		}
	}
	return p
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// convergedToTheEnd says a converging rollout went on until the scenario's last abort: no
// earlier abort, no failure that stopped it.
func (m *model) convergedToTheEnd(final error) bool {
	return temporal.IsCanceledError(final) && !m.abortedAt.Before(m.start.Add(modelConvergeEnd))
}

// checkEnd checks the invariants that hold once the rollout has ended.
func (m *model) checkEnd(final error, result api.RolloutResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	stoppedEarly := final != nil // budget spent, canary failed, aborted
	for _, id := range slices.Sorted(maps.Keys(m.held)) {
		if !strings.HasPrefix(id, "leak-") {
			m.fail("%s still holds a slot of the cluster-wide budget after the rollout ended", id)
		}
	}
	for _, id := range m.queue {
		m.fail("%s still asks for a slot of the cluster-wide budget after the rollout ended", id)
	}
	var counted api.Counts
	for _, name := range m.order {
		n := m.nodes[name]
		switch {
		case n.runs > 1+n.drifts+n.retries()+n.templateRuns:
			m.fail("%s ran %d times (%d drifts after a run, %d failed runs retried, %d new templates)", name, n.runs, n.drifts, n.retries(), n.templateRuns)
		case m.converge && n.joined && n.runs == 0 && !n.done && !m.untolerated(name) && m.convergedToTheEnd(final):
			m.fail("%s joined at %v and never ran, though the rollout converged until its end", name, n.joinAt)
		case m.templateReplaced && n.joined && !n.missing && !m.untolerated(name) && n.markerHash != modelHash2 && m.convergedToTheEnd(final):
			m.fail("%s never ran the replacement's template (its marker: %q of %q), though the rollout converged until its end", name, n.marker, n.markerHash)
		case m.converge && n.driftAt > 0 && n.marker == "" && !m.untolerated(name) && m.convergedToTheEnd(final):
			m.fail("%s's marker was wiped at %v and never restored, though the rollout converged until its end", name, n.driftAt)
		case n.running:
			m.fail("%s still runs after the rollout ended", name)
		case n.missing:
			counted.NodeGone++
		case n.done, m.untolerated(name):
			counted.Skipped++
		case n.runs >= 1: // more than one only where the case above allows it
			counted.Add(api.Outcome(n.outcome))
		case !stoppedEarly:
			m.fail("%s never ran, yet the rollout ended well", name)
		}
		terminated := m.lastRunTerminated(name) // checkTerminationEnd checks what holds for it
		if n.refused {
			switch {
			case n.cordonedOnce:
				m.fail("%s was cordoned by us, though the policy refuses its Job there", name)
			case n.runs >= 1 && !terminated && n.outcome != string(api.OutcomeFailed) && n.outcome != string(api.OutcomeAborted) &&
				n.outcome != string(api.OutcomeBlocked): // held by its blocking Pods before the policy was asked
				m.fail("%s ended %s, though the policy refuses its Job there (failed expected)", name, n.outcome)
			}
		}
		if n.checkJobs > 0 && !terminated {
			m.fail("%s: a check Job of ours is left after the rollout ended", name)
		}
		if n.markedDone && n.outcome != string(api.OutcomeSucceeded) && n.outcome != string(api.OutcomeAborted) && !terminated {
			m.fail("%s ended %s, though onSuccess marked it done", name, n.outcome)
		}
		if n.rebootJobs > 0 && !terminated {
			m.fail("%s: a reboot Job of ours is left after the rollout ended", name)
		}
		if n.liveJobs > 0 && !terminated {
			m.fail("%s: a Job of ours is left after the rollout ended", name)
		}
		// Our cordon: lifted after success; after anything else, kept or lifted as onFailure says.
		if mt := m.req.Maintenance; mt != nil && n.runs >= 1 && !terminated {
			keep := n.outcome != string(api.OutcomeSucceeded) && mt.OnFailure != api.OnFailureUncordon
			switch {
			case n.ourCordon && !keep:
				m.fail("%s ended %s and is still cordoned by us (onFailure %q)", name, n.outcome, mt.OnFailure)
			case !n.ourCordon && keep && n.cordonedOnce && !n.liftedDuringAbort:
				m.fail("%s ended %s and our cordon was lifted (onFailure %q keeps it)", name, n.outcome, mt.OnFailure)
			}
		}
		if n.runs >= 1 && n.outcome != "" && n.marker != n.outcome && !terminated &&
			!(n.outcome == string(api.OutcomeAborted) && (n.marker == "" || n.marker == n.markerBefore)) &&
			(n.driftAt == 0 || n.ended.After(m.start.Add(n.driftAt))) {
			m.fail("%s ended %s but its marker says %q", name, n.outcome, n.marker)
		}
		// (A success marked for another template is stale: a re-run of this one runs it.)
		if n.runs >= 1 && n.outcome == string(api.OutcomeAborted) && n.marker == string(api.OutcomeSucceeded) &&
			n.markerHash == m.started[name].in.TemplateHash {
			m.fail("%s was aborted but is marked succeeded: a re-run would skip it", name)
		}
	}
	m.checkTerminationEnd(result)
	got := result.Counts
	got.Pending, got.Running, got.Waiting = 0, 0, 0
	// An abort counts the nodes it found waiting (for another rollout, a slot, their turn) as
	// aborted too, though they never ran.
	unrun := 0
	for _, n := range m.nodes {
		if n.runs == 0 && !n.missing && !n.done {
			unrun++
		}
	}
	if temporal.IsCanceledError(final) && got.Aborted >= counted.Aborted && got.Aborted <= counted.Aborted+unrun {
		counted.Aborted = got.Aborted
	}
	// A rollout that stopped early may not have listed every node it would have skipped.
	if stoppedEarly {
		counted.Skipped = min(counted.Skipped, got.Skipped)
		counted.NodeGone = min(counted.NodeGone, got.NodeGone)
	}
	// A converging rollout counts every run of a node (joins and repairs); the nodes' own
	// checks above are what holds for it.
	if got != counted && !m.converge {
		m.fail("the result counts %+v, the nodes say %+v (final error: %v)", got, counted, final)
	}
	if !stoppedEarly && result.Selected != len(m.req.Nodes) {
		m.fail("selected %d of %d nodes", result.Selected, len(m.req.Nodes))
	}
	if final != nil {
		var appErr *temporal.ApplicationError
		switch {
		case temporal.IsCanceledError(final):
			if m.abortedAt.IsZero() {
				m.fail("cancelled without an abort: %v", final)
			}
		case errors.As(final, &appErr) && (appErr.Type() == api.ErrFailureBudgetExceeded || appErr.Type() == api.ErrCanaryFailed):
		default:
			var panicErr *temporal.PanicError
			if errors.As(final, &panicErr) {
				m.fail("the rollout panicked: %v\n%s", final, panicErr.StackTrace())
			} else {
				m.fail("the rollout failed: %v", final)
			}
		}
	}
}

// mockReboot is the fake cluster's side of maintenance.reboot: the boot ID, the reboot Job
// (which may only come on a node whose Job has just succeeded, under our cordon, and never on
// a node the policy refuses), and the node's coming back.
func (m *model) mockReboot(env *testsuite.TestWorkflowEnvironment, run int) {
	a := &activities.Activities{}
	env.OnActivity(a.ReadBootID, mock.Anything, mock.Anything).Return(func(_ context.Context, node string) (string, error) {
		if !m.lockRun(run) {
			return "", errRunEnded
		}
		defer m.mu.Unlock()
		return fmt.Sprintf("%s-boot-%d", node, m.nodes[node].boots), nil
	}).Maybe()
	env.OnActivity(a.CreateStepJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.StepJobRequest) (activities.JobRef, error) {
		if !m.lockRun(run) {
			return activities.JobRef{}, errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		switch {
		case in.Step != activities.StepReboot && in.Step != activities.StepCheck:
			m.fail("%s: a %s Job, which no model request asks for", in.Node, in.Step)
		case n.refused:
			m.fail("%s: a %s Job, though the policy refuses the rollout's Job there", in.Node, in.Step)
		case in.Step == activities.StepReboot && !n.cordoned:
			m.fail("%s: a reboot Job on a node that is not cordoned", in.Node)
		case in.Step == activities.StepCheck && (n.unhealthy || n.rebootFails):
			m.fail("%s: a check Job on a node that failed its health gate or its reboot", in.Node)
		case n.marker != string(api.OutcomeSucceeded) || n.markerHash != m.started[in.Node].in.TemplateHash:
			m.fail("%s: a %s Job, though its marker says %q of %q: the Job has not succeeded", in.Node, in.Step, n.marker, n.markerHash)
		}
		ref := activities.JobRef{Namespace: in.Namespace, Name: activities.StepJobName(in.Rollout, in.Node, in.RunID, in.Step), Node: in.Node, RunID: in.RunID}
		m.note("%s: %s Job (%d reboot, %d check live)", in.Node, in.Step, n.rebootJobs, n.checkJobs)
		if in.Step == activities.StepCheck {
			m.checkJobs.Store(ref.Name, true)
			n.checkJobs = 1 // a retried create adopts the one it made
		} else {
			n.rebootJobs = 1
		}
		return ref, nil
	}).Maybe()
	env.OnActivity(a.WaitReboot, mock.Anything, mock.Anything).After(4 * time.Minute).Return(func(_ context.Context, in activities.RebootWaitInput) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		if n.rebootFails {
			m.note("%s: did not come back from its reboot", in.Node)
			return temporal.NewNonRetryableApplicationError("node "+in.Node+" did not come back in time", api.ErrRebootTimedOut, nil)
		}
		n.boots++
		m.note("%s: back from its reboot", in.Node)
		return nil
	}).Maybe()
	env.OnActivity(a.DropRebootJob, mock.Anything, mock.Anything).Return(func(_ context.Context, j activities.JobRef) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		m.nodes[j.Node].rebootJobs = 0
		return nil
	}).Maybe()
	env.OnActivity(a.MarkNodeDone, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.MarkNodeInput) error {
		if !m.lockRun(run) {
			return errRunEnded
		}
		defer m.mu.Unlock()
		n := m.nodes[in.Node]
		if n.refused || n.unhealthy || n.rebootFails || n.checkFails || n.marker != string(api.OutcomeSucceeded) {
			m.fail("%s marked done by onSuccess, though it failed a step or its Job (marker %q)", in.Node, n.marker)
		}
		n.markedDone = true
		m.note("%s: marked done (onSuccess)", in.Node)
		return nil
	}).Maybe()
}

// mockBlockingPods waits, node by node, until the node's blocking Pods have gone or the
// gate's timeout, whichever comes first.
func (m *model) mockBlockingPods(env *testsuite.TestWorkflowEnvironment, run int) {
	a := &activities.Activities{}
	for _, name := range m.order {
		until := m.start.Add(m.nodes[name].blockedFor)
		env.OnActivity(a.WaitBlockingPods, mock.Anything, mock.MatchedBy(func(in activities.BlockingPodsInput) bool { return in.Node == name })).
			AfterFn(func() time.Duration { return min(max(until.Sub(env.Now()), 0), modelBlockingTimeout) }).
			Return(func(_ context.Context, in activities.BlockingPodsInput) error {
				if !m.lockRun(run) {
					return errRunEnded
				}
				defer m.mu.Unlock()
				if m.now().Before(until) {
					m.note("%s: blocked", name)
					return temporal.NewNonRetryableApplicationError("Pods matching app=critical still run on node "+name, api.ErrBlocked, nil)
				}
				return nil
			}).Maybe()
	}
}

// mockCheckJob is the check Job's wait: registered before the node Jobs' own, so that it
// answers for the check Jobs (by name) and they for the rest.
func (m *model) mockCheckJob(env *testsuite.TestWorkflowEnvironment, run int) {
	a := &activities.Activities{}
	env.OnActivity(a.WaitJob, mock.Anything, mock.MatchedBy(func(in activities.WaitJobInput) bool {
		_, ok := m.checkJobs.Load(in.Job.Name)
		return ok
	})).After(3 * time.Minute).Return(func(_ context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		if !m.lockRun(run) {
			return activities.JobEnd{}, errRunEnded
		}
		defer m.mu.Unlock()
		if m.nodes[in.Job.Node].checkFails {
			return activities.JobEnd{Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}, nil
		}
		return activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil
	}).Maybe()
}
