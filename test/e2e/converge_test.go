//go:build e2e

package e2e

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// A converging rollout over 5 nodes, then 3 nodes added one by one: each gets its Job within
// 30 s of becoming Ready and none runs twice; a node deleted and created again under its name
// runs again; a node whose label is removed gets the onDeselect Job.
func TestConvergeRunsJoiningReplacedAndDeselectedNodes(t *testing.T) {
	f := NewFleet(t, 5)
	req := f.Request("converge", time.Second)
	req.Mode = api.ModeConverge
	req.OnDeselect = &api.DeselectJob{JobTemplate: JobTemplate(2*time.Second, nil)}
	run := Start(t, req)
	defer func() { _ = stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), "") }()
	ctx := context.Background()

	succeeded := func(node string) bool {
		n, err := f.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		return err == nil && strings.HasSuffix(n.Annotations[jobspec.NodeMarkerKey(req.Name)], ":"+string(api.OutcomeSucceeded))
	}
	waitFor(t, 90*time.Second, "the first pass over 5 nodes", func() bool {
		return !slices.ContainsFunc(f.Nodes, func(n string) bool { return !succeeded(n) })
	})

	var latencies []time.Duration
	for range 3 {
		node := f.AddNodes(t, 1, nil)[0]
		var job time.Time
		waitFor(t, 60*time.Second, "a Job on "+node, func() bool {
			jobs := f.Jobs(t, req.Name)[node]
			if len(jobs) > 0 {
				job = jobs[0].CreationTimestamp.Time
			}
			return len(jobs) > 0
		})
		ready := readySince(t, node)
		latency := job.Sub(ready)
		t.Logf("%s: Ready at %s, Job created at %s: %s", node, ready.Format(time.RFC3339), job.Format(time.RFC3339), latency)
		require.LessOrEqual(t, latency, 30*time.Second, "%s's Job within 30 s of Ready", node)
		latencies = append(latencies, latency)
		waitFor(t, 60*time.Second, node+" succeeded", func() bool { return succeeded(node) })
	}
	slices.Sort(latencies)
	t.Logf("Ready -> Job creation over %d joins: p50 %s, p95 %s (whole seconds: both timestamps are)",
		len(latencies), latencies[len(latencies)/2], latencies[len(latencies)-1])

	// A new machine under a reused name: deleted, then created again.
	reused := f.Nodes[0]
	require.NoError(t, f.kube.CoreV1().Nodes().Delete(ctx, reused, metav1.DeleteOptions{}))
	waitFor(t, 30*time.Second, reused+" gone", func() bool {
		_, err := f.kube.CoreV1().Nodes().Get(ctx, reused, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	recreate(t, f, reused)
	waitFor(t, 60*time.Second, "a second Job on the re-created "+reused, func() bool { return len(f.Jobs(t, req.Name)[reused]) == 2 })
	waitFor(t, 60*time.Second, reused+" succeeded again", func() bool { return succeeded(reused) })

	// A label removed: the onDeselect Job, once.
	left := f.Nodes[1]
	t.Cleanup(func() { _ = f.kube.CoreV1().Nodes().Delete(context.Background(), left, metav1.DeleteOptions{}) })
	n, err := f.kube.CoreV1().Nodes().Get(ctx, left, metav1.GetOptions{})
	require.NoError(t, err)
	before := n.Annotations[jobspec.NodeMarkerKey(req.Name)]
	patch := []byte(`{"metadata":{"labels":{"` + TestLabel + `":null}}}`)
	_, err = f.kube.CoreV1().Nodes().Patch(ctx, left, "application/merge-patch+json", patch, metav1.PatchOptions{})
	require.NoError(t, err)
	var after string
	waitFor(t, 60*time.Second, "the onDeselect Job's outcome on "+left, func() bool {
		n, err := f.kube.CoreV1().Nodes().Get(ctx, left, metav1.GetOptions{})
		after = n.Annotations[jobspec.NodeMarkerKey(req.Name)]
		return err == nil && after != before && strings.HasSuffix(after, ":succeeded")
	})
	require.Len(t, f.Jobs(t, req.Name)[left], 2, "the template's Job, then the uninstall")

	// None ran twice (the re-created node aside), and the rollout still converges.
	for node, jobs := range f.Jobs(t, req.Name) {
		if node != reused && node != left {
			require.Len(t, jobs, 1, "%s ran once", node)
		}
	}
	var st api.RolloutStatus
	v, err := stack.Temporal.QueryWorkflow(ctx, run.GetID(), "", api.QueryStatus)
	require.NoError(t, err)
	require.NoError(t, v.Get(&st))
	require.Equal(t, "converging", st.Phase)
	require.NotNil(t, st.Converge)
	// The status names the uninstall's turn (the parent records it a moment after the marker).
	var out string
	waitFor(t, 30*time.Second, "status naming the onDeselect turn of "+left, func() bool {
		var code int
		out, code = runStarter(t, "status", strings.TrimPrefix(run.GetID(), api.RolloutIDPrefix))
		require.Zero(t, code, out)
		return strings.Contains(out, "onDeselect Job (the node left the selector)")
	})
	require.Contains(t, out, "CONVERGING")
	t.Log(out)
}

// readySince is when the node's Ready condition last became True.
func readySince(t *testing.T, node string) time.Time {
	t.Helper()
	n, err := stack.Kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	require.NoError(t, err)
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	t.Fatalf("%s is not Ready", node)
	return time.Time{}
}

// recreate creates the fleet's node again under its name, as a new machine.
func recreate(t *testing.T, f *Fleet, name string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        name,
		Labels:      map[string]string{"type": "kwok", TestLabel: f.ID, "kubernetes.io/hostname": name},
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
	}}
	_, err := f.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	require.NoError(t, err)
}

// An idle converging rollout adds nothing to its history: no timer, no activity, no signal
// while no node changes. E2E_CONVERGE_IDLE sets how long it idles (default 30 s; the
// measurement in the report ran 10m).
func TestConvergeIdleRolloutAddsNoEvents(t *testing.T) {
	idle := 30 * time.Second
	if v := os.Getenv("E2E_CONVERGE_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err)
		idle = d
	}
	f := NewFleet(t, 3)
	req := f.Request("converge-idle", time.Second)
	req.Mode = api.ModeConverge
	run := Start(t, req)
	defer func() { _ = stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), "") }()
	ctx := context.Background()
	var st api.RolloutStatus
	waitFor(t, 90*time.Second, "the first pass to end and the converge check to run", func() bool {
		v, err := stack.Temporal.QueryWorkflow(ctx, run.GetID(), "", api.QueryStatus)
		if err != nil || v.Get(&st) != nil {
			return false
		}
		return st.Phase == "converging" && st.Converge != nil && st.Converge.AtTemplate == 3 && st.Converge.Pending == 0
	})
	events := func() int64 {
		d, err := stack.Temporal.DescribeWorkflow(ctx, run.GetID(), "")
		require.NoError(t, err)
		return d.RawResponse.GetWorkflowExecutionInfo().GetHistoryLength()
	}
	// The queries above and the first pass's last tasks are counted before the idle time starts.
	startActions := settledActions(t)
	startEvents := events()
	time.Sleep(idle) // the measurement itself: nothing is awaited, time passes
	endEvents := events()
	endActions := temporalActions(t)
	t.Logf("idle %s: history %d -> %d events; the dev server's action counter (every workflow on the stack) %v -> %v",
		idle, startEvents, endEvents, startActions, endActions)
	require.Equal(t, startEvents, endEvents, "an idle converging rollout adds no event (no timer, activity or signal)")
}

// starter start of a running converging rollout's name with a new template hands over: each
// node runs the new template once its old Job has ended, never both at once. A pause taken
// before holds the replacing run until resumed.
func TestConvergeStarterStartReplacesTheTemplate(t *testing.T) {
	f := NewFleet(t, 3)
	req := f.Request("converge-replace", time.Second)
	req.Mode = api.ModeConverge
	req = withJobTimeout(req)
	out, code := runStarter(t, "start", "-f", writeRequest(t, req))
	require.Zero(t, code, out)
	id := api.RolloutID(req.Name)
	defer func() { _ = stack.Temporal.CancelWorkflow(context.Background(), id, "") }()
	ctx := context.Background()
	markers := func() map[string]string { return f.Markers(t, req.Name) }
	waitFor(t, 90*time.Second, "the first template on every node", func() bool {
		for _, m := range markers() {
			if !strings.HasSuffix(m, ":succeeded") {
				return false
			}
		}
		return len(markers()) == 3
	})
	old := markers()[f.Nodes[0]]
	status := func() api.RolloutStatus {
		v, err := stack.Temporal.QueryWorkflow(ctx, id, "", api.QueryStatus)
		require.NoError(t, err)
		var st api.RolloutStatus
		require.NoError(t, v.Get(&st))
		return st
	}

	// Paused before the replace, the replacing run stays paused until resumed.
	out, code = runStarter(t, "pause", req.Name)
	require.Zero(t, code, out)
	oldHash := status().TemplateHash
	next := req
	next.JobTemplate = JobTemplate(2*time.Second, nil)
	out, code = runStarter(t, "start", "-f", writeRequest(t, next))
	require.Zero(t, code, out)
	require.Contains(t, out, "replacing template")
	require.Contains(t, out, "the new run starts paused: starter resume "+req.Name)
	waitFor(t, 30*time.Second, "the replacing run, paused", func() bool {
		st := status()
		return st.TemplateHash != oldHash && st.Paused
	})
	for node, jobs := range f.Jobs(t, req.Name) {
		require.Len(t, jobs, 1, "%s: no Job of the new template while paused", node)
	}
	out, code = runStarter(t, "resume", req.Name)
	require.Zero(t, code, out)
	waitFor(t, 90*time.Second, "the new template on every node", func() bool {
		for _, m := range markers() {
			if m == old || !strings.HasSuffix(m, ":succeeded") {
				return false
			}
		}
		return true
	})
	for node, jobs := range f.Jobs(t, req.Name) {
		require.Len(t, jobs, 2, "%s: the old template's Job, then the new one's", node)
		slices.SortFunc(jobs, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
		ended := jobs[0].Status.CompletionTime
		require.NotNil(t, ended, "%s: the old Job completed", node)
		require.False(t, jobs[1].CreationTimestamp.Before(ended), "%s: the new Job was created after the old one ended", node)
	}
	require.Equal(t, "converging", status().Phase)
}
