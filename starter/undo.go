package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/noderollout/noderollout/api"
)

func undoCommand(a *app) *cobra.Command {
	cmd := idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     "undo ID [--to HASH] [--dry-run] [--wait] [--allow-rerun]",
		GroupID: "rollout",
		Short:   "Run the rollout's undo Job on every node it changed, newest first",
		Long: `Start a rollout (ID rollout-undo-<name>) that runs the named rollout's undo
template (its request's undo field) on every node the named rollout changed,
as the Nodes' markers record it: nodes whose rollout did not succeed first,
then the others, each in reverse order of completion. It keeps the named
rollout's pacing and maintenance (parallelism, maxFailures, window, topology,
delay, timeouts, cordon, drain, health, soak). A node whose undo Job succeeds
has the named rollout's marker set to undone, so a re-run covers it again.
The named rollout must have ended. --to HASH keeps only the nodes whose
template before the named rollout's was HASH (at least 8 characters).
--dry-run lists the nodes, in order, and what each goes back to.`,
		Example: `  starter undo gpu-driver-550 --dry-run
  starter undo gpu-driver-550 --wait`,
		Args: exactArgs(1, "ID"),
		RunE: run(a.undo),
	})
	cmd.Flags().String("to", "", "only the nodes whose previous template has this hash (or hash prefix)")
	cmd.Flags().Bool("dry-run", false, "list the nodes and what each goes back to; start nothing")
	cmd.Flags().Duration("timeout", defaultDryRunTimeout, "with --dry-run, give up when it has not finished by then")
	cmd.Flags().Bool("allow-rerun", false, "start even if an undo of this rollout already completed")
	startFlags(cmd, "follow the undo until it ends", "the undo's")
	return cmd
}

func (a *app) undo() error {
	tc, id, err := a.rollout()
	if err != nil {
		return err
	}
	desc, err := tc.DescribeWorkflow(a.ctx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return fmt.Errorf("no rollout %s (workflow %s): name a rollout that ran; 'starter list' shows them", a.args[0], id)
	}
	if err != nil {
		return err
	}
	if desc.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return fmt.Errorf("rollout %s is still running: an undo would race it for its nodes; abort it first (starter abort %s --wait)", id, a.args[0])
	}
	done, err := a.requestOf(id)
	if err != nil {
		return err
	}
	req, err := undoRequest(done, a.flagString("to"))
	if err != nil {
		return usageError{err.Error()}
	}
	if a.flagBool("dry-run") {
		timeout, err := a.dryRunTimeout()
		if err != nil {
			return err
		}
		return a.showDryRun(tc, req, timeout, printUndoDryRun)
	}
	undoID := a.rolloutID(req.Name)
	run, err := tc.ExecuteWorkflow(a.ctx, a.startOptions(undoID, req), api.RolloutWorkflow, req)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return fmt.Errorf("undo %s is already running or already completed (workflow %s); use 'starter status %s', or --allow-rerun to run it again", req.Name, undoID, req.Name)
	}
	if err != nil {
		return err
	}
	return a.started("undo", req.Name, run, a.follow)
}

// requestOf reads the request of the rollout's latest run from its first event: a run that
// continued as new carries the request on, so the latest run's holds it after any number.
func (a *app) requestOf(id string) (api.RolloutRequest, error) {
	var req api.RolloutRequest
	iter := a.tc.GetWorkflowHistory(a.ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !iter.HasNext() {
		return req, fmt.Errorf("rollout %s has no history to read its request from (past the namespace's retention?)", id)
	}
	first, err := iter.Next()
	if err != nil {
		return req, err
	}
	input := first.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(input) == 0 {
		return req, fmt.Errorf("rollout %s started without a request", id)
	}
	if err := converter.GetDefaultDataConverter().FromPayload(input[0], &req); err != nil {
		return req, fmt.Errorf("rollout %s: its request does not decode: %w", id, err)
	}
	return req, nil
}

// undoRequest is the request that undoes done: done's undo template as its Job, done's pacing
// and maintenance, its nodes read by the worker from done's markers (undoOf).
func undoRequest(done api.RolloutRequest, to string) (api.RolloutRequest, error) {
	if done.UndoOf != nil {
		return api.RolloutRequest{}, fmt.Errorf("%s is itself an undo (of %s): undo what it undid by starting %s again", done.Name, done.UndoOf.Rollout, done.UndoOf.Rollout)
	}
	if done.Undo == nil {
		return api.RolloutRequest{}, fmt.Errorf("rollout %s has no undo template: its request sets no undo; add undo: {jobTemplate: ...} (the Job that takes a node back) to the request and start it again", done.Name)
	}
	req := api.RolloutRequest{
		Name:               api.UndoName(done.Name),
		Namespace:          done.Namespace,
		JobTemplate:        done.Undo.JobTemplate,
		JobTemplateRef:     done.Undo.JobTemplateRef,
		Parallelism:        done.Parallelism,
		MaxFailures:        done.MaxFailures,
		Batch:              done.Batch,
		MaintenanceWindow:  done.MaintenanceWindow,
		Topology:           done.Topology,
		DelayBetweenNodes:  done.DelayBetweenNodes,
		JobTimeout:         done.JobTimeout,
		JobTTL:             done.JobTTL,
		KeepJobs:           done.KeepJobs,
		Owner:              done.Owner,
		Maintenance:        done.Maintenance,
		ContinueAsNewAfter: done.ContinueAsNewAfter,
		// The undo reaches the tainted nodes the rollout reached.
		Taints: done.Taints,
		// Every node the rollout changed goes back, an earlier undo's marker notwithstanding.
		Rerun:  true,
		UndoOf: &api.UndoOf{Rollout: done.Name, To: to},
	}
	if m := req.Maintenance; m != nil && (m.OnFailure == api.OnFailureUndo || m.OnSuccess != nil) {
		c := *m
		if c.OnFailure == api.OnFailureUndo {
			c.OnFailure = api.OnFailureKeepCordoned // an undo that fails is looked at, not undone
		}
		c.OnSuccess = nil // the labels and taints that marked the rollout's success would lie
		req.Maintenance = &c
	}
	// The Pods the rollout waited for before it disturbed a node are as precious to its undo.
	// Its check Job judged the rollout's result and its metric gate may be why it is undone:
	// neither is the undo's.
	if g := done.Gates; g != nil && g.BlockingPods != nil {
		req.Gates = &api.Gates{BlockingPods: g.BlockingPods}
	}
	if ps := req.Problems(); len(ps) > 0 {
		return req, fmt.Errorf("the undo of %s would be invalid: %v", done.Name, ps[0])
	}
	return req, nil
}

// printUndoDryRun lists the nodes an undo would run on, in its order.
func printUndoDryRun(w io.Writer, req api.RolloutRequest, res api.RolloutResult) error {
	fmt.Fprintf(w, "dry run of %s (undo of %s, undo template %s): %d nodes would go back, %d missing\n",
		req.Name, req.UndoOf.Rollout, short(res.TemplateHash), res.Counts.Pending, res.Counts.NodeGone)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNODE\tOUTCOME\tFROM TEMPLATE\tGOES BACK TO")
	for i, p := range res.Planned {
		u := p.Undo
		if u == nil {
			fmt.Fprintf(tw, "%d\t%s\t\t\t%s\n", i+1, p.Node, p.Skip)
			continue
		}
		back := short(u.Previous)
		switch {
		case back != "":
		case u.FinishedAt.IsZero():
			back = "(unknown: marker written before previous templates were recorded)"
		default:
			back = "(none: the node's first template of this rollout)"
		}
		if p.Skip != "" {
			back += " (skip: " + p.Skip + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", i+1, p.Node, u.Outcome, short(u.Template), back)
	}
	return tw.Flush()
}

// short is a template hash cut to 12 characters, as people read them.
func short(hash string) string {
	if len(hash) == 64 {
		return hash[:12]
	}
	return hash
}
