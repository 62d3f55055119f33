package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
)

// DryRunIDPrefix starts the workflow ID of every dry run. A rollout's ID starts with
// workflows.RolloutIDPrefix and a fleet's with workflows.FleetIDPrefix, and a name cannot hold
// a colon, so no dry run's ID is ever another workflow's.
const DryRunIDPrefix = "dry-run:"

// defaultDryRunTimeout bounds a dry run that no worker takes: it lists nodes and plans
// drains, which takes seconds even for thousands of nodes.
const defaultDryRunTimeout = 2 * time.Minute

// workerNoticeAfter is how long a dry run's first workflow task may wait for a worker before
// the starter says it is waiting.
const workerNoticeAfter = 3 * time.Second

func dryRunCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "dry-run -f FILE [--timeout DURATION]",
		GroupID: "rollout",
		Short:   "Show the nodes and Jobs a rollout would create; create nothing",
		Long: `Show the nodes a rollout would select and the Job each would get, from the
worker (which reads the cluster), changing nothing there: no Job, no stored
template, no Node annotation. The dry run is a workflow of its own, ID
dry-run:rollout-<name>:<random>, so it never meets a rollout's workflow.
With no worker polling the task queue it says so and gives up after --timeout.`,
		Args: cobra.NoArgs,
		RunE: run(a.dryRun),
	}
	fileFlag(cmd)
	outputFlag(cmd)
	cmd.Flags().Duration("timeout", defaultDryRunTimeout, "give up when the dry run has not finished by then (no worker, say)")
	return cmd
}

// dryRunID is a new workflow ID for a dry run of the rollout with workflow ID rolloutID.
func dryRunID(rolloutID string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return DryRunIDPrefix + rolloutID + ":" + hex.EncodeToString(b)
}

// dryRunOptions start a dry run: its own ID, never in conflict with another workflow (FAIL,
// the server's default, is explicit so no later edit turns it into TERMINATE_EXISTING), and
// an execution timeout so a dry run no worker took ends by itself.
func (a *app) dryRunOptions(rolloutID, taskQueue string, req api.RolloutRequest, timeout time.Duration) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       dryRunID(rolloutID),
		TaskQueue:                taskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionTimeout: timeout,
		StaticSummary:            "dry run of " + summary(req),
		Memo:                     a.requesterMemo(),
	}
}

// dryRunTimeout is --timeout: how long a dry run waits for a worker to take it.
func (a *app) dryRunTimeout() (time.Duration, error) {
	timeout, _ := a.cmd.Flags().GetDuration("timeout")
	if timeout < time.Second {
		return 0, usageError{fmt.Sprintf("--timeout %s is too short; give 1s or more, e.g. --timeout 2m", timeout)}
	}
	return timeout, nil
}

func (a *app) dryRun() error {
	req, err := a.request()
	if err != nil {
		return err
	}
	tc, timeout, err := a.dryRunClient()
	if err != nil {
		return err
	}
	return a.showDryRun(tc, req, timeout, printDryRun)
}

// dryRunClient is the client and --timeout of a dry run of a rollout or a fleet: the flag is
// checked before dialing, so that a bad --timeout is a usage error even without a server.
func (a *app) dryRunClient() (client.Client, time.Duration, error) {
	timeout, err := a.dryRunTimeout()
	if err != nil {
		return nil, 0, err
	}
	tc, err := a.client()
	return tc, timeout, err
}

// showDryRun dry-runs req on the worker's task queue and prints its plan as show lays it out.
func (a *app) showDryRun(tc client.Client, req api.RolloutRequest, timeout time.Duration, show func(io.Writer, api.RolloutRequest, api.RolloutResult) error) error {
	res, err := a.runDryRun(tc, a.rolloutID(req.Name), a.cfg.TaskQueue, req, timeout)
	if err != nil {
		return err
	}
	return a.print(res, func(w io.Writer) error { return show(w, req, res) })
}

// runDryRun runs a dry run of req on taskQueue and returns its plan. While no worker takes it,
// it says so on stderr; it gives up after timeout.
func (a *app) runDryRun(tc client.Client, rolloutID, taskQueue string, req api.RolloutRequest, timeout time.Duration) (api.RolloutResult, error) {
	req.DryRun = true
	var res api.RolloutResult
	run, err := tc.ExecuteWorkflow(a.ctx, a.dryRunOptions(rolloutID, taskQueue, req, timeout), api.RolloutWorkflow, req)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithTimeout(a.ctx, timeout+5*time.Second)
	defer cancel()
	taken := make(chan bool, 1)
	go func() { taken <- a.noticeNoWorker(ctx, tc, run.GetID(), run.GetRunID(), taskQueue) }()
	err = run.Get(ctx, &res)
	cancel()
	wasTaken := <-taken
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) || errors.Is(err, context.DeadlineExceeded) && a.ctx.Err() == nil {
		if !wasTaken {
			return res, fmt.Errorf("dry run %s timed out after %s: no worker took it from task queue %s; start a worker polling it (worker --task-queue %s), or check --task-queue and --cluster", run.GetID(), timeout, taskQueue, taskQueue)
		}
		return res, fmt.Errorf("dry run %s did not finish within %s (--timeout)", run.GetID(), timeout)
	}
	return res, err
}

// noticeNoWorker says, once, that the dry run's first workflow task waits for a worker; it
// reports whether a worker took it before ctx ended.
func (a *app) noticeNoWorker(ctx context.Context, tc client.Client, id, runID, taskQueue string) bool {
	started := time.Now()
	said := false
	for {
		desc, err := tc.DescribeWorkflow(ctx, id, runID)
		if err == nil {
			d := desc.RawResponse
			wft := d.GetPendingWorkflowTask()
			if wft == nil || wft.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED || d.GetWorkflowExecutionInfo().GetHistoryLength() > 2 {
				return true
			}
		}
		if !said && time.Since(started) >= workerNoticeAfter {
			fmt.Fprintf(a.errOut, "waiting for a worker on task queue %s (none has taken the dry run yet; giving up after --timeout)\n", taskQueue)
			said = true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func printDryRun(w io.Writer, req api.RolloutRequest, res api.RolloutResult) error {
	fmt.Fprintf(w, "dry run of %s (template %s): %d nodes selected, %d would run, %d skipped (done or tainted), %d missing\n",
		req.Name, res.TemplateHash, res.Selected, res.Counts.Pending, res.Counts.Skipped, res.Counts.NodeGone)
	if res.Selected == 0 {
		fmt.Fprintf(w, "no node selected: check the selector (kubectl get nodes -l '%s')\n", req.NodeSelector)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tJOB (name prefix) / SKIP")
	for _, p := range res.Planned {
		what := p.JobPrefix + "…"
		if p.Skip != "" {
			what = "skip: " + p.Skip
			if p.Reason != "" {
				what += " (" + p.Reason + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\n", p.Node, what)
		if d := p.Drain; d != nil {
			if len(d.Evict) == 0 {
				fmt.Fprintln(tw, "\t  drain would evict no Pod")
			} else {
				fmt.Fprintf(tw, "\t  drain would evict %d Pod(s): %s\n", len(d.Evict), strings.Join(d.Evict, ", "))
			}
			if len(d.Blocking) > 0 {
				fmt.Fprintf(tw, "\t  blocked now by PodDisruptionBudget(s): %s\n", strings.Join(d.Blocking, ", "))
			}
			if len(d.Refused) > 0 {
				fmt.Fprintf(tw, "\t  refused: %s\n", strings.Join(d.Refused, "; "))
			}
		}
	}
	return tw.Flush()
}
