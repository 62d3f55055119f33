//go:build e2e

package e2e

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

func TestRolloutCreatesOneJobPerNodeAndMarksNodes(t *testing.T) {
	f := NewFleet(t, 20)
	req := f.Request("one-per-node", time.Second)
	req.Parallelism = 5
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 20, res.Selected)
	require.Equal(t, 20, res.Counts.Succeeded)

	jobs := f.Jobs(t, req.Name)
	require.Len(t, jobs, 20)
	for _, node := range f.Nodes {
		require.Len(t, jobs[node], 1, "node %s", node)
		j := jobs[node][0]
		require.Equal(t, node, j.Spec.Template.Spec.NodeName, "the Job is pinned to its node")
		require.Equal(t, jobspec.NodeLabelValue(node), j.Labels[jobspec.LabelNode])
		require.Equal(t, res.TemplateHash, j.Annotations[jobspec.AnnotationTemplateHash])
		phase, _, _ := jobspec.Interpret(j.Status)
		require.Equal(t, jobspec.PhaseSucceeded, phase)
	}
	for node, marker := range f.Markers(t, req.Name) {
		require.Equal(t, jobspec.NodeMarker(res.TemplateHash, string(api.OutcomeSucceeded)), marker, "node %s", node)
	}
}

// TestParallelismNeverExceeded checks, from the Jobs' own timestamps, that no more than
// parallelism Jobs ever ran at once, and that the window was used.
func TestParallelismNeverExceeded(t *testing.T) {
	f := NewFleet(t, 24)
	req := f.Request("parallelism", 2*time.Second)
	req.Parallelism = 4
	Succeeded(t, Start(t, req))
	jobs := f.Jobs(t, req.Name)
	require.Len(t, jobs, 24)
	var all []batchv1.Job
	for _, js := range jobs {
		all = append(all, js...)
	}
	peak := peakConcurrency(t, all)
	require.LessOrEqual(t, peak, 4)
	require.GreaterOrEqual(t, peak, 3, "the rollout should keep its window busy")
}

// peakConcurrency counts, at the end of each second in which a Job was created, the Jobs
// created by then and not yet finished (timestamps have one-second resolution, so Jobs that
// finish and start within the same second are not counted as overlapping).
func peakConcurrency(t *testing.T, jobs []batchv1.Job) int {
	peak := 0
	for _, j := range jobs {
		at := j.CreationTimestamp.Time
		running := 0
		for _, o := range jobs {
			end := finishedAt(t, o)
			if !o.CreationTimestamp.Time.After(at) && end.After(at) {
				running++
			}
		}
		peak = max(peak, running)
	}
	return peak
}

func finishedAt(t *testing.T, j batchv1.Job) time.Time {
	if j.Status.CompletionTime != nil {
		return j.Status.CompletionTime.Time
	}
	for _, c := range j.Status.Conditions {
		if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobComplete) && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	t.Fatalf("Job %s has not finished", j.Name)
	return time.Time{}
}

func TestFailingNodesFailWhileOthersSucceed(t *testing.T) {
	f := NewFleet(t, 12)
	failing := []string{f.Nodes[2], f.Nodes[5], f.Nodes[9]}
	req := f.Request("some-fail", time.Second)
	req.JobTemplate = JobTemplate(time.Second, map[string]string{
		"noderollout.dev/fail-nodes":     strings.Join(failing, ","),
		"noderollout.dev/fail-exit-code": "7",
	})
	req.MaxFailures = "3"
	req.KeepJobs = "failed"
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 9, res.Counts.Succeeded)
	require.Equal(t, 3, res.Counts.Failed)
	var failed []string
	for _, r := range res.Failures {
		failed = append(failed, r.Node)
		require.Equal(t, api.OutcomeFailed, r.Outcome)
		require.Equal(t, "BackoffLimitExceeded", r.Reason)
		require.NotNil(t, r.ExitCode, "the failed container's exit code is reported")
		require.Equal(t, int32(7), *r.ExitCode)
	}
	sort.Strings(failed)
	require.Equal(t, failing, failed)
	jobs := f.Jobs(t, req.Name)
	require.Len(t, jobs, 3, "keepJobs=failed keeps only the failed nodes' Jobs")
	for _, n := range failing {
		require.Len(t, jobs[n], 1)
	}
	markers := f.Markers(t, req.Name)
	require.Equal(t, jobspec.NodeMarker(res.TemplateHash, "failed"), markers[failing[0]])
	require.Equal(t, jobspec.NodeMarker(res.TemplateHash, "succeeded"), markers[f.Nodes[0]])
}

func TestFailureBudgetStopsTheRollout(t *testing.T) {
	f := NewFleet(t, 10)
	req := f.Request("over-budget", time.Second)
	req.Parallelism = 1
	req.JobTemplate = JobTemplate(time.Second, map[string]string{
		"noderollout.dev/fail-nodes": strings.Join([]string{f.Nodes[1], f.Nodes[2]}, ","),
	})
	req.MaxFailures = "1"
	res, err := Result(t, Start(t, req))
	require.Error(t, err)
	require.Contains(t, err.Error(), api.ErrFailureBudgetExceeded)
	require.Contains(t, err.Error(), f.Nodes[2])
	require.Equal(t, 2, res.Counts.Failed)
	require.Equal(t, 1, res.Counts.Succeeded)
	require.Len(t, f.Jobs(t, req.Name), 3, "no node starts after the budget is spent")
}

// TestFailureTargetViaBackoffLimit: every Pod fails; the Job controller marks FailureTarget,
// then Failed, once backoffLimit is used up, and the node counts as failed.
func TestFailureTargetViaBackoffLimit(t *testing.T) {
	f := NewFleet(t, 2)
	req := f.Request("backoff", 0)
	req.JobTemplate = strings.Replace(JobTemplate(0, map[string]string{"noderollout.dev/exit-code": "2"}), "backoffLimit: 0", "backoffLimit: 1", 1)
	req.MaxFailures = "100%"
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 2, res.Counts.Failed)
	for _, r := range res.Failures {
		require.Equal(t, "BackoffLimitExceeded", r.Reason)
	}
	for node, js := range f.Jobs(t, req.Name) {
		require.Len(t, js, 1)
		j := js[0]
		require.Equal(t, int32(2), j.Status.Failed, "node %s: one try and one retry", node)
		var types []batchv1.JobConditionType
		for _, c := range j.Status.Conditions {
			if c.Status == corev1.ConditionTrue {
				types = append(types, c.Type)
			}
		}
		require.Contains(t, types, batchv1.JobFailureTarget)
	}
}

func TestRerunSkipsDoneNodesAndCoversNewOnes(t *testing.T) {
	f := NewFleet(t, 6)
	req := f.Request("rerun", time.Second)
	first := Succeeded(t, Start(t, req))
	require.Equal(t, 6, first.Counts.Succeeded)
	added := f.AddNodes(t, 2, nil)
	second := Succeeded(t, Start(t, req))
	require.Equal(t, 6, second.Counts.Skipped)
	require.Equal(t, 2, second.Counts.Succeeded)
	jobs := f.Jobs(t, req.Name)
	for _, n := range f.Nodes {
		require.Len(t, jobs[n], 1, "node %s ran once over both runs", n)
	}
	require.Len(t, jobs[added[0]], 1)

	// rerun: true runs every node again.
	req.Rerun = true
	third := Succeeded(t, Start(t, req))
	require.Equal(t, 8, third.Counts.Succeeded)
	require.Equal(t, 0, third.Counts.Skipped)
}

// TestSelectorPagesThroughTheWholeFleet selects 1,200 nodes by label: ListNodes reads them in
// pages of 500 and every node gets exactly one Job.
func TestSelectorPagesThroughTheWholeFleet(t *testing.T) {
	f := NewFleet(t, 1200)
	req := f.Request("paged", 500*time.Millisecond)
	req.Parallelism = 200
	req.KeepJobs = "never"
	res := Succeeded(t, Start(t, req))
	require.Equal(t, 1200, res.Selected)
	require.Equal(t, 1200, res.Counts.Succeeded)
	markers := f.Markers(t, req.Name)
	require.Len(t, markers, 1200)
	want := jobspec.NodeMarker(res.TemplateHash, "succeeded")
	for node, m := range markers {
		if m != want {
			t.Fatalf("node %s marker %q, want %q", node, m, want)
		}
	}
	waitFor(t, 60*time.Second, "keepJobs=never deletes every Job", func() bool {
		list, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(context.Background(), metav1.ListOptions{})
		return err == nil && len(list.Items) == 0
	})

	// A later slice stops reading once it is full. That is only right if the real API server
	// pages Nodes in name order; check the slice it returns against the names sorted here.
	names := make([]string, 0, len(markers))
	for node := range markers {
		names = append(names, node)
	}
	sort.Strings(names)
	a := &activities.Activities{Kube: stack.Kube}
	slice, err := a.ListNodes(context.Background(), activities.ListNodesInput{
		Rollout: "paged-again", Selector: f.Selector(), TemplateHash: res.TemplateHash, After: names[299], Limit: 300,
	})
	require.NoError(t, err)
	require.Zero(t, slice.Total, "the slice stopped before the last page")
	require.True(t, slice.More)
	require.Equal(t, names[599], slice.Next)
	require.Equal(t, names[300:600], slice.Nodes, "exactly the next 300 names, none skipped")
}
