//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	batchv1 "k8s.io/api/batch/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

func writeRequest(t *testing.T, req api.RolloutRequest) string {
	t.Helper()
	b, err := json.Marshal(withJobTimeout(req))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "rollout.json")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

func TestStarterStartWaitAndStatus(t *testing.T) {
	f := NewFleet(t, 20)
	req := f.Request("starter-wait", time.Second)
	out, code := runStarter(t, "start", "-f", writeRequest(t, req), "--wait")
	t.Logf("starter start --wait:\n%s", out)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "workflow ID: rollout-"+req.Name)
	require.Contains(t, out, "rollout "+req.Name+": 20/20 nodes succeeded, 0 failed")
	require.Regexp(t, req.Name+`\s+20\s+20\s+0\s+0\s+0\s+0`, out, "the final table")

	out, code = runStarter(t, "status", req.Name)
	t.Logf("starter status:\n%s", out)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "Completed")

	out, code = runStarter(t, "start", "-f", writeRequest(t, req))
	require.Equal(t, 1, code, "a completed rollout is not started again without --allow-rerun")
	require.Contains(t, out, "already")
}

// TestStarterWaitSaysWhenNoNodeWasSelected: a selector that matches nothing is a mistake
// people make (the README's example needs labelled nodes); --wait must not call it success.
func TestStarterWaitSaysWhenNoNodeWasSelected(t *testing.T) {
	f := NewFleet(t, 1)
	req := f.Request("starter-empty", time.Second)
	req.NodeSelector = f.Selector() + ",noderollout.dev/no-such-label=true"
	out, code := runStarter(t, "start", "-f", writeRequest(t, req), "--wait")
	t.Logf("starter start --wait:\n%s", out)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "selected 0 nodes: check the selector")

	out, code = runStarter(t, "start", "-f", writeRequest(t, req), "--wait", "--allow-rerun", "--allow-empty")
	require.Equal(t, 0, code, out)

	out, code = runStarter(t, "status", req.Name, "-o", "json")
	require.Equal(t, 0, code, out)
	var view map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &view), out)
	require.Equal(t, "Completed", view["status"])
	require.Equal(t, 0.0, view["selected"])
}

func TestStarterRejectsBadRequestNamingTheField(t *testing.T) {
	req := api.RolloutRequest{Name: "Bad_Name", Nodes: []string{"a"}, JobTemplate: JobTemplate(0, nil), Parallelism: -1}
	out, code := runStarter(t, "start", "-f", writeRequest(t, req))
	require.Equal(t, 2, code, out)
	require.Contains(t, out, "name:")
	require.Contains(t, out, "parallelism:")
	require.NotContains(t, out, "temporal at", "a bad file is rejected before dialling")
}

// TestTemporalCLIStartsARollout starts a rollout the way an operator does from a shell, with
// the Temporal CLI and JSON input (tctl takes the same JSON).
func TestTemporalCLIStartsARollout(t *testing.T) {
	cli := os.Getenv("TEMPORAL_CLI")
	require.NotEmpty(t, cli, "TEMPORAL_CLI names the temporal binary (dev/e2e.sh sets it)")
	f := NewFleet(t, 5)
	input := fmt.Sprintf(`{"name":%q,"namespace":%q,"nodeSelector":%q,"parallelism":5,"keepJobs":"always","jobTemplate":%q}`,
		"from-cli-"+f.suffix, f.Namespace, f.Selector(), JobTemplate(time.Second, nil))
	cmd := exec.Command(cli, "workflow", "start", "--address", stack.TemporalAddress,
		"--type", api.RolloutWorkflow, "--task-queue", suiteQueue, "--workflow-id", "rollout-from-cli-"+f.suffix, "--input", input)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	res := Succeeded(t, stack.Temporal.GetWorkflow(context.Background(), "rollout-from-cli-"+f.suffix, ""))
	require.Equal(t, 5, res.Counts.Succeeded)
	require.Len(t, f.Jobs(t, "from-cli-"+f.suffix), 5)
}

// TestScheduleRunsAgainSkippingDoneNodes: a Schedule every 10 s; its second run skips the
// nodes the first finished and covers a node added in between.
func TestScheduleRunsAgainSkippingDoneNodes(t *testing.T) {
	f := NewFleet(t, 4)
	req := f.Request("scheduled", time.Second)
	name := "sched-" + f.ID
	out, code := runStarter(t, "schedule", "create", name, "-f", writeRequest(t, req), "--every", "10s")
	require.Equal(t, 0, code, out)
	t.Cleanup(func() { runStarter(t, "schedule", "delete", name) })
	h := stack.Temporal.ScheduleClient().GetHandle(context.Background(), "noderollout-"+name)

	first := scheduledRun(t, h, 0)
	res := Succeeded(t, first)
	require.Equal(t, 4, res.Counts.Succeeded)
	added := f.AddNodes(t, 1, nil)

	second := scheduledRun(t, h, 1)
	res = Succeeded(t, second)
	require.Equal(t, 4, res.Counts.Skipped, "nodes done for this template are skipped")
	require.Equal(t, 1, res.Counts.Succeeded, "the node added in between is covered")
	require.Len(t, f.Jobs(t, req.Name)[added[0]], 1)

	out, code = runStarter(t, "schedule", "list")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "noderollout-"+name)

	// The rollout's name means the schedule's newest run (its ID is rollout-<name>-<time>),
	// and list names it by the rollout's name.
	out, code = runStarter(t, "schedule", "pause", name)
	require.Equal(t, 0, code, out)
	d, err := h.Describe(context.Background())
	require.NoError(t, err)
	newest := d.Info.RecentActions[len(d.Info.RecentActions)-1].StartWorkflowResult.WorkflowID
	require.True(t, strings.HasPrefix(newest, api.RolloutIDPrefix+req.Name+"-"), newest)
	out, code = runStarter(t, "status", req.Name, "-o", "json")
	require.Equal(t, 0, code, out)
	var st struct {
		WorkflowID string `json:"workflowId"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	require.Equal(t, newest, st.WorkflowID)
	out, code = runStarter(t, "list", "-o", "json")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, `"name": "`+req.Name+`"`)
}

// scheduledRun waits for the schedule's n-th action (0-based) and returns its workflow.
func scheduledRun(t *testing.T, h client.ScheduleHandle, n int) client.WorkflowRun {
	t.Helper()
	var run client.WorkflowRun
	waitFor(t, 90*time.Second, fmt.Sprintf("schedule action %d", n), func() bool {
		d, err := h.Describe(context.Background())
		if err != nil || len(d.Info.RecentActions) <= n {
			return false
		}
		a := d.Info.RecentActions[n].StartWorkflowResult
		run = stack.Temporal.GetWorkflow(context.Background(), a.WorkflowID, a.FirstExecutionRunID)
		return true
	})
	return run
}

// TestPauseResumeAndSetParallelismThroughStarter steers a running rollout with the starter.
func TestPauseResumeAndSetParallelismThroughStarter(t *testing.T) {
	f := NewFleet(t, 16)
	req := f.Request("steered", 3*time.Second)
	req.Parallelism = 2
	run := Start(t, req)
	waitFor(t, 60*time.Second, "first nodes running", func() bool {
		st, err := status(run.GetID())
		return err == nil && st.Counts.Running > 0
	})
	out, code := runStarter(t, "pause", req.Name)
	require.Equal(t, 0, code, out)

	// Once the nodes in flight at the pause have finished, nothing new may have started.
	var st api.RolloutStatus
	waitFor(t, 60*time.Second, "in-flight nodes to finish after pause", func() bool {
		var err error
		st, err = status(run.GetID())
		return err == nil && st.Paused && st.Counts.Running == 0
	})
	require.Equal(t, "paused", st.Phase)
	require.Greater(t, st.Counts.Pending, 0)
	jobsAtPause := len(f.Jobs(t, req.Name))
	require.Equal(t, st.Counts.Succeeded, jobsAtPause, "no Job beyond those finished")

	out, code = runStarter(t, "set-parallelism", req.Name, "6")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "2 -> 6")
	out, code = runStarter(t, "set-parallelism", req.Name, "0")
	require.NotEqual(t, 0, code, "parallelism 0 is rejected by the update's validator")
	require.Contains(t, out, "parallelism")

	resumedAt := time.Now()
	out, code = runStarter(t, "resume", req.Name)
	require.Equal(t, 0, code, out)
	res := Succeeded(t, run)
	require.Equal(t, 16, res.Counts.Succeeded)

	var after []batchv1.Job
	for _, js := range f.Jobs(t, req.Name) {
		for _, j := range js {
			if !j.CreationTimestamp.Time.Before(resumedAt.Truncate(time.Second)) {
				after = append(after, j)
			}
		}
	}
	peak := peakConcurrency(t, after)
	require.LessOrEqual(t, peak, 6)
	require.Greater(t, peak, 2, "the larger window is used after resume")
}

func status(id string) (api.RolloutStatus, error) {
	var st api.RolloutStatus
	v, err := stack.Temporal.QueryWorkflow(context.Background(), id, "", api.QueryStatus)
	if err != nil {
		return st, err
	}
	return st, v.Get(&st)
}

// TestWorkerMetricsCountNodes reads the worker's /metrics after a rollout.
func TestWorkerMetricsCountNodes(t *testing.T) {
	before := nodesSucceeded(t, defaultWorker.Metrics(t))
	f := NewFleet(t, 6)
	Succeeded(t, Start(t, f.Request("metrics", time.Second)))
	text := defaultWorker.Metrics(t)
	require.Equal(t, before+6, nodesSucceeded(t, text))
	require.Contains(t, text, "noderollout_job_duration_seconds_bucket")
	require.Contains(t, text, "temporal_workflow_completed", "the SDK's own metrics are exported too")
}

var succeededSeries = regexp.MustCompile(`(?m)^noderollout_nodes_total\{[^}]*outcome="succeeded"[^}]*\} (\d+)`)

func nodesSucceeded(t *testing.T, text string) int {
	total := 0
	for _, m := range succeededSeries.FindAllStringSubmatch(text, -1) {
		n, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		total += n
	}
	return total
}

// dryRunAllNodes dry-runs with the starter a request named name over f's 3 nodes and
// requires that it succeeded and would run all 3; it returns the request and the output.
func dryRunAllNodes(t *testing.T, f *Fleet, name string) (api.RolloutRequest, string) {
	t.Helper()
	require.Len(t, f.Nodes, 3)
	req := f.Request(name, time.Second)
	out, code := runStarter(t, "dry-run", "-f", writeRequest(t, req))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "3 nodes selected, 3 would run")
	return req, out
}

func TestStarterDryRunListsNodesAndCreatesNothing(t *testing.T) {
	f := NewFleet(t, 3)
	req, out := dryRunAllNodes(t, f, "dry")
	for _, n := range f.Nodes {
		require.Contains(t, out, n)
	}
	require.Contains(t, out, jobspec.JobNamePrefix(req.Name, f.Nodes[0]), "each node's Job name prefix is shown")
	require.Empty(t, f.Jobs(t, req.Name), "a dry run creates no Job")
}
