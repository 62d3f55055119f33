//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// transcript appends a command and its output to $E2E_TRANSCRIPT, when set: real output of
// the lifecycle commands for notes and reviews.
func transcript(t *testing.T, cmd, out string) {
	t.Helper()
	t.Logf("$ %s\n%s", cmd, out)
	path := os.Getenv("E2E_TRANSCRIPT")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = fmt.Fprintf(f, "$ %s\n%s\n", cmd, out)
	require.NoError(t, err)
}

// make demo leaves its worker polling the stack's default task queue. Run as the demo runs
// it, such a worker must take none of the suite's nodes (before, it took 4 of
// TestWorkerMetricsCountNodes' 6 after make demo).
func TestAWorkerOnTheDefaultQueueTakesNoNodeOfTheSuite(t *testing.T) {
	demo, err := StartWorker("demo-like-" + rand.String(4)) // dev/worker.sh's flags: the default queue
	require.NoError(t, err)
	t.Cleanup(func() { _ = demo.Stop() })
	before := nodesSucceeded(t, defaultWorker.Metrics(t))
	f := NewFleet(t, 6)
	Succeeded(t, Start(t, f.Request("beside-demo", time.Second)))
	require.Zero(t, nodesSucceeded(t, demo.Metrics(t)), "the worker on the default queue took nodes of the suite")
	require.Equal(t, before+6, nodesSucceeded(t, defaultWorker.Metrics(t)))
}

// A dry run writes nothing to the cluster (before, it stored the template's ConfigMap), and
// never meets a rollout: one named <name>-dry-run runs on while <name> is dry-run (before,
// both had the workflow ID rollout-<name>-dry-run, and the dry run terminated the rollout).
func TestDryRunWritesNothingAndLeavesRolloutsAlone(t *testing.T) {
	f := NewFleet(t, 3)
	req, _ := dryRunAllNodes(t, f, "dryx")
	cms, err := stack.Kube.CoreV1().ConfigMaps(f.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: activities.LabelTemplateHash})
	require.NoError(t, err)
	require.Empty(t, cms.Items, "a dry run stores no template")
	require.Empty(t, f.Jobs(t, req.Name))
	for node, marker := range f.Markers(t, req.Name) {
		require.Empty(t, marker, node)
	}

	other := f.Request("dryx", time.Minute)
	other.Name = req.Name + "-dry-run"
	run := Start(t, other)
	t.Cleanup(func() { _ = stack.Temporal.CancelWorkflow(context.Background(), run.GetID(), "") })
	waitFor(t, 60*time.Second, "the rollout "+other.Name+" running nodes", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Running > 0
	})
	out, code := runStarter(t, "dry-run", "-f", writeRequest(t, req))
	require.Equal(t, 0, code, out)
	d, err := stack.Temporal.DescribeWorkflow(context.Background(), run.GetID(), "")
	require.NoError(t, err)
	require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.Status, "the dry run of %s touched rollout %s", req.Name, other.Name)
}

// With no worker on the task queue a dry run says it waits for one, and gives up after its
// timeout (before, it waited silently for ever).
func TestDryRunWithNoWorkerSaysSoAndTimesOut(t *testing.T) {
	f := NewFleet(t, 1)
	queue := "nobody-polls-" + rand.String(6)
	started := time.Now()
	out, code := runStarter(t, "dry-run", "-f", writeRequest(t, f.Request("lonely", time.Second)), "--task-queue", queue, "--timeout", "8s")
	transcript(t, "starter dry-run -f lonely.json --task-queue "+queue+" --timeout 8s", out)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "waiting for a worker on task queue "+queue)
	require.Contains(t, out, "timed out after 8s: no worker took it from task queue "+queue)
	require.Less(t, time.Since(started), 30*time.Second)
}

// The lifecycle commands kubectl users reach for: list (running and recent, by state),
// status -w to the end, and abort --wait until the rollout's Jobs and Pods are gone.
func TestStarterListStatusWatchAndAbortWait(t *testing.T) {
	f := NewFleet(t, 9)
	watched := f.Request("watched", 2*time.Second)
	watched.Nodes, watched.NodeSelector, watched.Parallelism = f.Nodes[:4], "", 2
	Start(t, watched)
	out, code := runStarter(t, "status", watched.Name, "-w")
	transcript(t, "starter status "+watched.Name+" -w", out)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "watching rollout-"+watched.Name+" until it ends")
	require.Regexp(t, `\[\d+s\] \d/4 done, 0 failed, \d in flight \(\w+\)\n`, out, "one line per change")
	require.NotContains(t, out, "\r", "not a terminal: no carriage returns")
	require.Contains(t, out, "rollout "+watched.Name+": 4/4 nodes succeeded, 0 failed")

	aborted := f.Request("aborted", 5*time.Minute)
	aborted.Nodes, aborted.NodeSelector, aborted.Parallelism, aborted.KeepJobs = f.Nodes[4:], "", 3, "never"
	run := Start(t, aborted)
	waitFor(t, 60*time.Second, "3 nodes of "+aborted.Name+" running", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Running == 3
	})
	waitFor(t, 60*time.Second, "its Pods running", func() bool { return len(runningPods(t, f.Namespace, aborted.Name)) == 3 })

	out, code = runStarter(t, "list")
	transcript(t, "starter list", out)
	require.Equal(t, 0, code, out)
	require.Regexp(t, aborted.Name+`\s+Running\s+0/5 done, 0 failed, 3 in flight`, out)
	require.Regexp(t, watched.Name+`\s+Completed`, out)
	out, code = runStarter(t, "list", "--state", "running", "-o", "name")
	transcript(t, "starter list --state running -o name", out)
	require.Equal(t, 0, code, out)
	require.Contains(t, strings.Fields(out), aborted.Name)
	require.NotContains(t, strings.Fields(out), watched.Name)

	// Each node names its step once its first workflow task, which watches a short Job for
	// up to 20 s, has ended; until then it reads "job".
	waitFor(t, 60*time.Second, "status naming each node's step", func() bool {
		out, code = runStarter(t, "status", aborted.Name)
		return code == 0 && strings.Count(out, "job running") == 3
	})
	transcript(t, "starter status "+aborted.Name, out)
	require.Regexp(t, `IN FLIGHT \(3\)`, out)
	require.Regexp(t, `job running\s+\d+s\s+Job `+f.Namespace+`/`, out)

	out, code = runStarter(t, "abort", aborted.Name, "--wait", "--reason", "e2e: abort --wait")
	transcript(t, "starter abort "+aborted.Name+" --wait --reason 'e2e: abort --wait'", out)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "aborted rollout-"+aborted.Name+" after")
	// Returned: nothing of the rollout is left on the cluster to run.
	require.Empty(t, runningPods(t, f.Namespace, aborted.Name), "abort --wait returned with Pods still there")
	require.Empty(t, f.Jobs(t, aborted.Name), "abort --wait returned with Jobs still there (keepJobs: never)")

	// The status of the aborted rollout is its result: what ran and what the abort stopped.
	out, code = runStarter(t, "status", aborted.Name, "-o", "json")
	transcript(t, "starter status "+aborted.Name+" -o json", out)
	require.Equal(t, 0, code, out)
	var ended struct {
		Status, Name string
		Selected     int
		Counts       api.Counts
		StartedAt    time.Time
	}
	require.NoError(t, json.Unmarshal([]byte(out), &ended), out)
	require.Equal(t, "Canceled", ended.Status)
	require.Equal(t, aborted.Name, ended.Name)
	require.Equal(t, 5, ended.Selected)
	require.Equal(t, 3, ended.Counts.Aborted, "the three nodes in flight")
	require.False(t, ended.StartedAt.IsZero())

	out, code = runStarter(t, "list", "--state", "canceled,completed", "-o", "wide")
	transcript(t, "starter list --state canceled,completed -o wide", out)
	require.Equal(t, 0, code, out)
	require.Regexp(t, aborted.Name+`\s+Canceled`, out)
}

// runningPods are the rollout's Pods that still exist, by name.
func runningPods(t *testing.T, namespace, rollout string) []string {
	t.Helper()
	pods, err := stack.Kube.CoreV1().Pods(namespace).List(context.Background(), metav1.ListOptions{LabelSelector: jobspec.LabelRollout + "=" + rollout})
	require.NoError(t, err)
	var names []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed || p.DeletionTimestamp != nil {
			names = append(names, p.Name)
		}
	}
	return names
}

// starter status names a soaking node's step with how far the soak is ("soak 12s/40s"); before,
// a health gate and a soak both read "health or soak".
func TestStatusShowsTheSoakAndItsProgress(t *testing.T) {
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	waitFor(t, 30*time.Second, "kwok to ready the node", func() bool {
		for _, c := range nodeNow(t, node).Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true
			}
		}
		return false
	})
	req := maintenanceRequest(f, "soaked", node)
	req.Maintenance.Drain = nil
	req.Maintenance.Soak = "40s"
	run := Start(t, req)
	var out string
	waitFor(t, 90*time.Second, "starter status to show the soak with its progress", func() bool {
		o, code := runStarter(t, "status", req.Name)
		out = o
		return code == 0 && regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(node)+`\s+soak \d+s/40s\s`).MatchString(o)
	})
	transcript(t, "starter status "+req.Name+" (soaking)", out)
	Succeeded(t, run)
}
