package workflows

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// Converge mode over a fake cluster: the real ListNodes and CheckNodes read a fake API server's
// Nodes, the Jobs are mocked (each lasts jobFor, or fails on the nodes in failing), FinalizeJob
// writes the marker there, and every Job's creation is checked against what a Rollout may
// start: one run per node at once, parallelism, the per-domain limit.

const (
	convergeRoot     = "converge-root"
	convergeSelector = "pool=gpu"
	deselectTemplate = "uninstall"
)

// convergeCluster is the fake cluster and what its Jobs did.
type convergeCluster struct {
	t    *testing.T
	kube *fake.Clientset
	acts *activities.Activities

	mu       sync.Mutex
	jobFor   time.Duration
	failing  map[string]bool
	running  map[string]int // Jobs running per node
	inFlight int
	byDomain map[string]int
	peak     int
	peakDom  int
	runs     map[string][]convergeRun // per node, in order of creation
	problems []string
	now      func() time.Time
	// checkTaints: the prepared template says its Pod tolerates nothing, so the rollout checks
	// taints (by default the preparation reads no tolerations and nothing is checked).
	checkTaints bool
	// versions, when set, are what each run's GetVersion of these change IDs returns.
	versions map[string]workflow.Version
	// mockMore, when set, mocks more of each run's activities.
	mockMore func(env *testsuite.TestWorkflowEnvironment)
}

// convergeRun is one Job: its template and when it was created and ended.
type convergeRun struct {
	hash         string
	created, end time.Time
}

func newConvergeCluster(t *testing.T) *convergeCluster {
	kube := fake.NewClientset()
	return &convergeCluster{t: t, kube: kube, acts: &activities.Activities{Kube: kube}, jobFor: 10 * time.Minute,
		failing: map[string]bool{}, running: map[string]int{}, byDomain: map[string]int{}, runs: map[string][]convergeRun{}}
}

// join adds a Ready node of the pool in a zone.
func (c *convergeCluster) join(name, zone string) {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-" + fmt.Sprint(time.Now().UnixNano())),
			Labels: map[string]string{"pool": "gpu", "zone": zone}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	_, err := c.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(c.t, err)
}

// setTaints replaces a node's taints.
func (c *convergeCluster) setTaints(name string, taints ...corev1.Taint) {
	n, err := c.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(c.t, err)
	n.Spec.Taints = taints
	_, err = c.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(c.t, err)
}

// unlabel takes a node out of the pool.
func (c *convergeCluster) unlabel(name string) {
	n, err := c.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(c.t, err)
	delete(n.Labels, "pool")
	_, err = c.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	require.NoError(c.t, err)
}

func (c *convergeCluster) zoneOf(node string) string {
	n, err := c.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return n.Labels["zone"]
}

// runsOf is the templates run on a node, in order.
func (c *convergeCluster) runsOf(node string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var hs []string
	for _, r := range c.runs[node] {
		hs = append(hs, r.hash)
	}
	return hs
}

// mock mocks the activities of one run's environment.
func (c *convergeCluster) mock(env *testsuite.TestWorkflowEnvironment, a *activities.Activities) {
	c.now = env.Now
	for id, v := range c.versions {
		env.OnGetVersion(id, workflow.DefaultVersion, 1).Return(v).Maybe()
	}
	if c.mockMore != nil {
		c.mockMore(env)
	}
	jobsOutlastTheWatch(env)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PrepareTemplateInput) (activities.PreparedTemplate, error) {
		if in.Template == deselectTemplate {
			return activities.PreparedTemplate{Hash: "d"}, nil
		}
		return activities.PreparedTemplate{Hash: "h-" + fmt.Sprint(len(in.Template)), TolerationsRead: c.checkTaints}, nil
	}).Maybe()
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(c.acts.ListNodes).Maybe()
	env.OnActivity(a.CheckNodes, mock.Anything, mock.Anything).Return(c.acts.CheckNodes).Maybe()
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		zone := c.zoneOf(in.Node)
		c.running[in.Node]++
		c.inFlight++
		c.byDomain[zone]++
		c.peak = max(c.peak, c.inFlight)
		c.peakDom = max(c.peakDom, c.byDomain[zone])
		if c.running[in.Node] > 1 {
			c.problems = append(c.problems, fmt.Sprintf("%s: two Jobs at once at %v", in.Node, c.now()))
		}
		c.runs[in.Node] = append(c.runs[in.Node], convergeRun{hash: in.TemplateHash, created: c.now()})
		return activities.JobRef{Namespace: in.Namespace, Name: in.Node + "-" + in.RunID, UID: "u-" + in.RunID, RunID: in.RunID, Node: in.Node}, nil
	}).Maybe()
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		outcome := api.OutcomeSucceeded
		if c.failing[in.Job.Node] {
			outcome = api.OutcomeFailed
		}
		return activities.JobEnd{Outcome: outcome}, nil
	}).After(c.jobFor).Maybe()
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if in.Job != nil {
			zone := c.zoneOf(in.Node)
			c.running[in.Node]--
			c.inFlight--
			c.byDomain[zone]--
			if rs := c.runs[in.Node]; len(rs) > 0 {
				rs[len(rs)-1].end = c.now()
			}
		}
		n, err := c.kube.CoreV1().Nodes().Get(context.Background(), in.Node, metav1.GetOptions{})
		if err == nil {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[jobspec.NodeMarkerKey(in.Rollout)] = jobspec.NodeMarker(in.TemplateHash, string(in.End.Outcome))
			_, err = c.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		}
		return activities.FinalizeResult{}, err
	}).Maybe()
}

// convergeStep is an event of a script: at is from the scenario's start.
type convergeStep struct {
	at time.Duration
	do func(env *testsuite.TestWorkflowEnvironment)
}

// told is a step that tells the rollout of nodes, as the worker's Node watch does.
func told(env *testsuite.TestWorkflowEnvironment, nodes ...string) {
	env.SignalWorkflow(api.SignalNodesChanged, api.NodesChanged{Nodes: nodes})
}

// runConverge runs the request run after run (continue-as-new starts the next in a fresh
// environment, at the time the last ended) with the steps at their times, and returns how many
// runs it took, the request the last one ran and its error.
func (c *convergeCluster) runConverge(t *testing.T, req api.RolloutRequest, start time.Time, steps []convergeStep) (runs int, last api.RolloutRequest, final error) {
	t.Helper()
	var carried *api.Progress
	now := start
	fired := make([]bool, len(steps)) // a step is taken once, even at the instant a run ends
	for runs = 1; runs <= 30; runs++ {
		env, a := newTestEnv(nil)
		env.RegisterWorkflowWithOptions(func(ctx workflow.Context, req api.RolloutRequest, carried *api.Progress) (api.RolloutResult, error) {
			return Rollout(ctx, req, carried)
		}, workflow.RegisterOptions{Name: convergeRoot})
		env.SetStartTime(now)
		env.SetTestTimeout(time.Minute)
		if runs > 1 {
			env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", runs-1))
		}
		c.mock(env, a)
		for i, s := range steps {
			if at := start.Add(s.at); !at.Before(now) && !fired[i] {
				do := s.do
				env.RegisterDelayedCallback(func() { fired[i] = true; do(env) }, at.Sub(now))
			}
		}
		env.ExecuteWorkflow(convergeRoot, req, carried)
		require.True(t, env.IsWorkflowCompleted(), "run %d completed", runs)
		err := env.GetWorkflowError()
		next, handed, ok := continuation(t, err)
		if !ok {
			return runs, req, err
		}
		req, carried = next, handed
		now = env.Now()
	}
	t.Fatal("more than 30 runs")
	return
}

func convergeRequest() api.RolloutRequest {
	return api.RolloutRequest{Name: "conv", NodeSelector: convergeSelector, JobTemplate: sampleTemplate, Mode: api.ModeConverge, Parallelism: 3}
}

// abortAt ends a scenario: converging rollouts end only when aborted (or replaced).
func abortAt(at time.Duration) convergeStep {
	return convergeStep{at: at, do: func(env *testsuite.TestWorkflowEnvironment) { env.CancelWorkflow() }}
}

// Nodes join at every step, across several continue-as-new: each runs once, after it joined.
func TestConvergeRunsNodesJoiningAtEveryStepAcrossContinueAsNew(t *testing.T) {
	c := newConvergeCluster(t)
	for _, n := range []string{"a0", "a1", "a2"} {
		c.join(n, "z1")
	}
	req := convergeRequest()
	req.ContinueAsNewAfter = 2
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	joined := map[string]time.Duration{}
	var steps []convergeStep
	for i := range 8 {
		name, at := fmt.Sprintf("j%d", i), time.Duration(i+1)*17*time.Minute
		joined[name] = at
		steps = append(steps, convergeStep{at: at, do: func(env *testsuite.TestWorkflowEnvironment) { c.join(name, "z1"); told(env, name) }})
	}
	// One joins during the first pass, and four at once: more than a run launches before it
	// continues as new, so some are carried queued.
	early := []string{"early"}
	burst := []string{"b0", "b1", "b2", "b3"}
	steps = append(steps,
		convergeStep{at: time.Minute, do: func(env *testsuite.TestWorkflowEnvironment) { c.join("early", "z1"); told(env, early...) }},
		convergeStep{at: 3 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
			for _, n := range burst {
				c.join(n, "z1")
			}
			told(env, burst...)
		}},
		abortAt(5*time.Hour))
	joined["early"] = time.Minute
	for _, n := range burst {
		joined[n] = 3 * time.Hour
	}
	runs, _, err := c.runConverge(t, req, start, steps)
	require.Error(t, err, "aborted")
	require.Greater(t, runs, 3, "the rollout continued as new several times")
	require.Empty(t, c.problems)
	for _, n := range []string{"a0", "a1", "a2"} {
		require.Equal(t, []string{"h-" + fmt.Sprint(len(sampleTemplate))}, c.runsOf(n), n)
	}
	for name, at := range joined {
		require.Len(t, c.runsOf(name), 1, "%s runs once", name)
		created := c.runs[name][0].created
		require.False(t, created.Before(start.Add(at)), "%s's Job after it joined", name)
		require.Less(t, created.Sub(start.Add(at)), time.Hour, "%s's Job soon: no timer stood between", name)
	}
}

// A node that joins while the maintenance window is closed waits for it.
func TestConvergeJoinedNodeWaitsForTheWindow(t *testing.T) {
	c := newConvergeCluster(t)
	c.join("a0", "z1")
	req := convergeRequest()
	req.MaintenanceWindow = &api.MaintenanceWindow{Start: "02:00", Duration: "1h", TimeZone: "UTC"}
	start := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	steps := []convergeStep{
		{at: 3 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) { c.join("late", "z1"); told(env, "late") }},
		abortAt(30 * time.Hour),
	}
	_, _, err := c.runConverge(t, req, start, steps)
	require.Error(t, err)
	require.Len(t, c.runs["late"], 1)
	created := c.runs["late"][0].created
	require.Equal(t, time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC), created.UTC().Truncate(time.Minute), "the joined node waited for the next window")
	require.Empty(t, c.problems)
}

// Joined nodes keep parallelism and the per-domain limit.
func TestConvergeJoinedNodesKeepParallelismAndDomains(t *testing.T) {
	c := newConvergeCluster(t)
	c.jobFor = time.Hour
	c.join("a0", "z1")
	req := convergeRequest()
	req.Parallelism = 2
	req.Topology = &api.Topology{Key: "zone", MaxPerDomain: 1}
	var names []string
	for i := range 6 {
		names = append(names, fmt.Sprintf("j%d", i))
	}
	steps := []convergeStep{
		{at: 2 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
			for i, n := range names {
				c.join(n, fmt.Sprintf("z%d", i%3))
			}
			told(env, names...)
		}},
		abortAt(20 * time.Hour),
	}
	_, _, err := c.runConverge(t, req, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), steps)
	require.Error(t, err)
	require.Empty(t, c.problems)
	for _, n := range names {
		require.Len(t, c.runsOf(n), 1, n)
	}
	require.Equal(t, 2, c.peak, "parallelism 2 held for joined nodes")
	require.Equal(t, 1, c.peakDom, "maxPerDomain 1 held for joined nodes")
}

// The failure budget holds for joined nodes: once it is spent no joined node starts, and the
// rollout fails.
func TestConvergeFailureBudgetHoldsForJoinedNodes(t *testing.T) {
	c := newConvergeCluster(t)
	c.join("a0", "z1")
	req := convergeRequest()
	req.Parallelism = 1
	req.MaxFailures = "1"
	for _, n := range []string{"f1", "f2", "f3"} {
		c.failing[n] = true
	}
	steps := []convergeStep{
		{at: time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
			for _, n := range []string{"f1", "f2", "f3"} {
				c.join(n, "z1")
			}
			told(env, "f1", "f2", "f3")
		}},
		abortAt(20 * time.Hour),
	}
	_, _, err := c.runConverge(t, req, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), steps)
	require.ErrorContains(t, err, "over the budget")
	started := len(c.runs["f1"]) + len(c.runs["f2"]) + len(c.runs["f3"])
	require.Equal(t, 2, started, "the second failure spends the budget of 1: the third joined node never starts")
}

// A node that leaves the selector gets onDeselect's Job once; told again, nothing more runs.
func TestConvergeDeselectedNodeGetsOnDeselectOnce(t *testing.T) {
	c := newConvergeCluster(t)
	c.join("a0", "z1")
	c.join("a1", "z1")
	req := convergeRequest()
	req.OnDeselect = &api.DeselectJob{JobTemplate: deselectTemplate}
	var st api.RolloutStatus
	steps := []convergeStep{
		{at: time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) { c.unlabel("a1"); told(env, "a1") }},
		{at: 2 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) { told(env, "a1", "a0") }},
		{at: 150 * time.Minute, do: func(env *testsuite.TestWorkflowEnvironment) { queryStatus(t, env, &st) }},
		abortAt(3 * time.Hour),
	}
	_, _, err := c.runConverge(t, req, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), steps)
	require.Error(t, err)
	main := "h-" + fmt.Sprint(len(sampleTemplate))
	require.Equal(t, []string{main, "d"}, c.runsOf("a1"), "the template, then the uninstall once")
	require.Equal(t, []string{main}, c.runsOf("a0"))
	// The status tells the uninstall's turn from the template's.
	var turns []string
	for _, r := range st.Recent {
		turns = append(turns, fmt.Sprintf("%s %s onDeselect=%v", r.Node, r.Outcome, r.OnDeselect))
	}
	require.ElementsMatch(t, []string{"a0 succeeded onDeselect=false", "a1 succeeded onDeselect=false", "a1 succeeded onDeselect=true"}, turns)
}

// A request of the same name replaces a converging rollout: no node starts after the update,
// the nodes in flight end first, and the next run moves every node to the new template, one
// run per node at a time.
func TestConvergeReplacementHandsOverWithoutRunningANodeTwiceAtOnce(t *testing.T) {
	c := newConvergeCluster(t)
	c.jobFor = time.Hour
	for _, n := range []string{"a0", "a1", "a2", "a3"} {
		c.join(n, "z1")
	}
	req := convergeRequest()
	req.Parallelism = 2
	next := req
	next.JobTemplate = sampleTemplate + "\n# v2\n"
	var updated time.Time
	steps := []convergeStep{
		// a0 and a1 are in flight at 30 minutes.
		{at: 30 * time.Minute, do: func(env *testsuite.TestWorkflowEnvironment) {
			updated = env.Now()
			env.UpdateWorkflow(api.UpdateReplace, "replace-1", &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("replace rejected: %v", err) },
				OnAccept: func() {}, OnComplete: func(any, error) {},
			}, next)
		}},
		abortAt(10 * time.Hour),
	}
	runs, last, err := c.runConverge(t, req, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), steps)
	require.Error(t, err)
	require.Equal(t, 2, runs, "one hand-over")
	require.Equal(t, next.JobTemplate, last.JobTemplate)
	require.Empty(t, c.problems, "no node ran twice at once")
	oldHash, newHash := "h-"+fmt.Sprint(len(req.JobTemplate)), "h-"+fmt.Sprint(len(next.JobTemplate))
	var handOver time.Time
	for _, n := range []string{"a0", "a1"} {
		require.Equal(t, []string{oldHash, newHash}, c.runsOf(n), n)
		handOver = maxTime(handOver, c.runs[n][0].end)
	}
	for _, n := range []string{"a2", "a3"} {
		require.Equal(t, []string{newHash}, c.runsOf(n), "%s never started on the old template after the update", n)
	}
	for n, rs := range c.runs {
		for _, r := range rs {
			if r.hash == newHash {
				require.False(t, r.created.Before(handOver), "%s's new Job starts after the old run's nodes ended", n)
			} else {
				require.True(t, r.created.Before(updated), "%s's old Job started before the update", n)
			}
		}
	}
}

// The idle wait is no timer: a converging rollout that hears nothing schedules none.
func TestConvergeIdleRolloutSchedulesNoTimer(t *testing.T) {
	c := newConvergeCluster(t)
	c.join("a0", "z1")
	env, a := newTestEnv(nil)
	c.mock(env, a)
	timers := 0
	env.SetOnTimerScheduledListener(func(string, time.Duration) { timers++ })
	env.RegisterDelayedCallback(env.CancelWorkflow, 30*24*time.Hour)
	env.SetTestTimeout(time.Minute)
	env.ExecuteWorkflow(api.RolloutWorkflow, convergeRequest(), (*api.Progress)(nil))
	require.True(t, env.IsWorkflowCompleted())
	require.Zero(t, timers, "a month idle, no timer")
	require.True(t, slices.Equal([]string{"h-" + fmt.Sprint(len(sampleTemplate))}, c.runsOf("a0")))
}

// retryFailedAfter runs a failed node again that long after it failed, and not before; without
// it a failed node stands. The retry is the one timer converge mode sets.
func TestConvergeRetriesAFailedNodeAfterRetryFailedAfter(t *testing.T) {
	for _, retry := range []string{"", "2h"} {
		c := newConvergeCluster(t)
		c.join("a0", "z1")
		c.failing["f"] = true
		req := convergeRequest()
		req.MaxFailures = "1"
		req.RetryFailedAfter = retry
		steps := []convergeStep{
			{at: time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) { c.join("f", "z1"); told(env, "f") }},
			// Fixed after its failure; told of nothing, the rollout only has its retry to go by.
			{at: 90 * time.Minute, do: func(*testsuite.TestWorkflowEnvironment) {
				c.mu.Lock()
				c.failing["f"] = false
				c.mu.Unlock()
			}},
			abortAt(10 * time.Hour),
		}
		start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		_, _, err := c.runConverge(t, req, start, steps)
		require.Error(t, err)
		require.Empty(t, c.problems)
		if retry == "" {
			require.Len(t, c.runs["f"], 1, "without retryFailedAfter the failure stands")
			continue
		}
		require.Len(t, c.runs["f"], 2, "failed, then retried once and succeeded")
		failedAt := c.runs["f"][0].end
		require.Equal(t, failedAt.Add(2*time.Hour), c.runs["f"][1].created, "retried 2h after it failed")
		require.Equal(t, []string{"h-" + fmt.Sprint(len(sampleTemplate))}, c.runsOf("a0"))
	}
}

// A node that joins carrying a taint the Job's Pod does not tolerate is skipped, as the first
// pass skips one (a Job pinned by nodeName would bypass the scheduler's taint check); once the
// taint is lifted and the watch tells, it runs.
func TestConvergeSkipsAJoinedNodeWithAnUntoleratedTaint(t *testing.T) {
	c := newConvergeCluster(t)
	c.checkTaints = true
	c.join("a0", "z1")
	steps := []convergeStep{
		{at: time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
			c.join("t", "z1")
			c.setTaints("t", corev1.Taint{Key: "dedicated", Value: "training", Effect: corev1.TaintEffectNoSchedule})
			told(env, "t")
		}},
		{at: 3 * time.Hour, do: func(env *testsuite.TestWorkflowEnvironment) {
			require.Empty(t, c.runsOf("t"), "no Job on a node whose taint the Pod does not tolerate")
			c.setTaints("t")
			told(env, "t")
		}},
		abortAt(10 * time.Hour),
	}
	_, _, err := c.runConverge(t, convergeRequest(), time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), steps)
	require.Error(t, err)
	require.Empty(t, c.problems)
	require.Len(t, c.runs["t"], 1, "run once its taint was lifted")
	require.Equal(t, time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), c.runs["t"][0].created.UTC().Truncate(time.Minute))
}
