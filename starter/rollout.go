package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

func startCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "start -f FILE [--wait] [--allow-rerun] [--allow-empty]",
		GroupID: "rollout",
		Short:   "Start a rollout (workflow ID rollout-<name>)",
		Long: `Start a rollout: workflow Rollout, ID rollout-<name>, on the task queue.
The file is checked first, without a server, as 'starter validate' does.
With --wait, follow it to the end; exit 1 if it fails or selected no node.`,
		Example: `  starter start -f deploy/examples/rollout.yaml --wait`,
		Args:    cobra.NoArgs,
		RunE:    run(a.startRollout),
	}
	fileFlag(cmd)
	cmd.Flags().Bool("allow-rerun", false, "start even if a rollout of this name already completed (nodes done for this template are still skipped unless the request sets rerun)")
	cmd.Flags().Bool("allow-empty", false, "with --wait, succeed even if the rollout selected no node")
	startFlags(cmd, "follow progress until the rollout ends", "the rollout's")
	return cmd
}

func validateCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "validate -f FILE",
		GroupID: "rollout",
		Short:   "Check a rollout request offline; exit 2 if it is bad",
		Long: `Check a rollout request without any server: its fields, as the Rollout
workflow validates them, and an inline Job template, decoded as the worker
decodes it before the first Job (a jobTemplateRef's ConfigMap is read and
checked by the worker). One line per problem; exit code 2 if there is any.`,
		Args: cobra.NoArgs,
		RunE: run(a.validate),
	}
	fileFlag(cmd)
	outputFlag(cmd)
	cmd.Flags().String("policy-file", "", "also judge the request by this worker policy (the worker's --policy-file), offline")
	_ = cmd.MarkFlagFilename("policy-file", "yaml", "yml", "json")
	return cmd
}

func statusCommand(a *app) *cobra.Command {
	cmd := idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     "status ID [-w]",
		GroupID: "rollout",
		Short:   "Show a rollout's progress, or its result once ended",
		Long: `Show a rollout's progress, or its result once ended. With -w, show it, then
follow it to its end as start --wait does (one line per change when the output
is not a terminal); exit 1 if it fails. Ctrl-C stops watching, not the rollout.`,
		Args: exactArgs(1, "ID"),
		RunE: run(a.showStatus),
	})
	outputFlag(cmd)
	cmd.Flags().BoolP("watch", "w", false, "follow the rollout until it ends")
	return cmd
}

func signalCommand(a *app, name string) *cobra.Command {
	short := map[string]string{
		api.SignalPause:  "Stop starting new nodes; nodes in flight finish",
		api.SignalResume: "Start new nodes again after a pause",
	}
	return idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     name + " ID",
		GroupID: "steer",
		Short:   short[name],
		Args:    exactArgs(1, "ID"),
		RunE:    run(func() error { return a.sendSignal(a.rollout, name) }),
	})
}

func setParallelismCommand(a *app) *cobra.Command {
	return idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     "set-parallelism ID N",
		GroupID: "steer",
		Short:   fmt.Sprintf("Change how many nodes run at once (1-%d)", api.MaxParallelism),
		Args:    exactArgs(2, "ID and N"),
		RunE:    run(a.setParallelism),
	})
}

func abortCommand(a *app) *cobra.Command {
	cmd := idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     "abort ID [--reason TEXT] [--wait]",
		GroupID: "steer",
		Short:   "Cancel a rollout: running Jobs are deleted",
		Long: `Cancel a rollout: it starts no more nodes, and each node in flight deletes its
running Job and waits until the Job's Pods are gone. With --wait, return only
once that is done: the rollout and every node workflow of it have ended, and
a node workflow ends only when no Pod of a Job it made can run any more (Jobs
that had ended before the abort stay as keepJobs says).`,
		Args: exactArgs(1, "ID"),
		RunE: run(a.abort),
	})
	cmd.Flags().String("reason", "aborted with starter", "why, recorded in the workflow history")
	cmd.Flags().Bool("wait", false, "wait until the rollout and all its nodes have stopped (their Jobs and Pods gone)")
	return cmd
}

// exactArgs is cobra.ExactArgs with a message that names what is missing.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Sprintf("expected %s, got %d argument(s); usage: %s", what, len(args), cmd.UseLine())}
		}
		return nil
	}
}

// rollout is the Temporal client and the workflow ID of the rollout the command names (of the
// configured cluster, if any).
func (a *app) rollout() (client.Client, string, error) {
	tc, id, err := a.target(api.RolloutIDPrefix, a.rolloutID)
	if err != nil || a.flagBool("id") {
		return tc, id, err
	}
	if _, scheduled := cutScheduledRun(id); scheduled || id == a.args[0] {
		return tc, id, nil // a workflow ID is taken as given: steering another run costs more
	}
	id, err = newestRun(a.ctx, tc, a.cfg.TemporalNamespace, id)
	return tc, id, err
}

// rolloutID is the workflow ID of a rollout: qualified by the configured cluster, so two
// clusters sharing a Temporal namespace can run rollouts of the same name.
func (a *app) rolloutID(name string) string {
	return api.Cluster{Name: a.cfg.Cluster}.RolloutID(name)
}

// request reads and checks -f before anything dials Temporal.
func (a *app) request() (api.RolloutRequest, error) {
	path, err := a.filePath("the rollout request (see deploy/examples/rollout.yaml)")
	if err != nil {
		return api.RolloutRequest{}, err
	}
	name, data, err := readInput(path, a.in)
	if err != nil {
		return api.RolloutRequest{}, err
	}
	req, err := parseRequest(name, data)
	return req, asUsageError(err)
}

// fleetRequest reads and checks a fleet request before anything dials Temporal.
func (a *app) fleetRequest(path string) (api.FleetRequest, error) {
	req, err := loadFleetRequest(path, a.in)
	return req, asUsageError(err)
}

func (a *app) validate() error {
	path, err := a.filePath("the rollout request to check")
	if err != nil {
		return err
	}
	name, data, err := readInput(path, a.in)
	if err != nil {
		return err
	}
	req, err := parseRequest(name, data)
	path = name
	policyFile := a.flagString("policy-file")
	if err == nil && policyFile != "" {
		err = judgeByPolicy(name, policyFile, req)
	}
	err = a.refuseInvalid(path, err, func(problems []string) any {
		return validation{File: path, Valid: false, Problems: problems}
	})
	if err != nil {
		return err
	}
	return a.print(validation{File: path, Valid: true, Request: &req}, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: valid (%s)\n", path, summary(req))
		if err == nil && policyFile != "" {
			_, err = fmt.Fprintf(w, "%s: allowed by the policy in %s%s\n", path, policyFile, policyCaveat(req))
		}
		return err
	})
}

// judgeByPolicy judges a valid request by a worker policy, as the worker does before its first
// node: the request (namespace, selector, parallelism), then an inline template as its Jobs
// would have it. A policy file that does not load is a bad command line.
func judgeByPolicy(name, policyFile string, req api.RolloutRequest) error {
	pol, err := policy.Load(policyFile)
	if err != nil {
		return usageError{fmt.Sprintf("--policy-file: %v", err)}
	}
	parallelism := req.Parallelism
	if parallelism == 0 {
		parallelism = api.DefaultParallelism
	}
	r := policy.Request{Namespace: nsOrDefault(req.Namespace), NodeSelector: req.NodeSelector, Parallelism: parallelism}
	if ref := req.JobTemplateRef; ref != nil {
		r.TemplateNamespace = ref.Namespace
	}
	var problems []string
	if err := pol.CheckRequest(r); err != nil {
		problems = append(problems, err.Error())
	}
	if req.JobTemplate != "" {
		job, err := jobspec.ParseTemplate(req.JobTemplate)
		if err == nil {
			job.Namespace = nsOrDefault(req.Namespace)
			if err := pol.CheckJob(job); err != nil {
				problems = append(problems, err.Error())
			}
		}
	}
	if len(problems) > 0 {
		return &invalidRequest{path: name, what: "rollout request under the policy in " + policyFile, problems: problems}
	}
	return nil
}

// policyCaveat says what the worker judges that validate cannot: a template kept in a
// ConfigMap, and the labels of nodes named one by one.
func policyCaveat(req api.RolloutRequest) string {
	var later []string
	if req.JobTemplateRef != nil {
		later = append(later, "the template in its ConfigMap")
	}
	if len(req.Nodes) > 0 {
		later = append(later, "each named node's labels")
	}
	if len(later) == 0 {
		return ""
	}
	return " (the worker judges " + strings.Join(later, " and ") + " when the rollout starts)"
}

// validation is what validate prints with -o json|yaml.
type validation struct {
	File     string              `json:"file"`
	Valid    bool                `json:"valid"`
	Problems []string            `json:"problems,omitempty"`
	Request  *api.RolloutRequest `json:"request,omitempty"`
}

func (a *app) startOptions(id string, req api.RolloutRequest) client.StartWorkflowOptions {
	opts := client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                a.cfg.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// Without this the SDK hands back the earlier run as if it had just started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            summary(req),
	}
	if a.cmd.Flags().Lookup("allow-rerun") != nil && a.flagBool("allow-rerun") {
		opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	}
	opts.Memo = a.requesterMemo()
	opts.TypedSearchAttributes = a.searchAttributes(req.Name)
	return opts
}

func summary(req api.RolloutRequest) string {
	target := fmt.Sprintf("%d nodes", len(req.Nodes))
	if len(req.Nodes) == 0 {
		target = "nodes " + strings.TrimSpace(req.NodeSelector+" "+req.FieldSelector)
	}
	return fmt.Sprintf("rollout %s: Jobs in %s on %s, requested by %s", req.Name, nsOrDefault(req.Namespace), target, requester())
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return api.DefaultNamespace
	}
	return ns
}

// started is what start prints.
type started struct {
	Name       string `json:"name"`
	WorkflowID string `json:"workflowId"`
	RunID      string `json:"runId"`
	UI         string `json:"ui"`
}

func (a *app) startRollout() error {
	req, err := a.request()
	if err != nil {
		return err
	}
	tc, err := a.client()
	if err != nil {
		return err
	}
	id := a.rolloutID(req.Name)
	run, err := tc.ExecuteWorkflow(a.ctx, a.startOptions(id, req), api.RolloutWorkflow, req)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) && req.Converging() {
		if d, derr := tc.DescribeWorkflow(a.ctx, id, ""); derr == nil &&
			d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return a.replaceConverging(tc, id, req)
		}
	}
	if errors.As(err, &already) {
		return fmt.Errorf("rollout %s is already running or already completed (workflow %s); use 'starter status %s', or --allow-rerun to run it again", req.Name, id, req.Name)
	}
	if err != nil {
		return err
	}
	return a.started("rollout", req.Name, run, a.follow)
}

// started says what start started (a rollout or a fleet rollout) and, with --wait, follows
// it with follow. With -o json|yaml and --wait it prints only follow's one document: the
// rollout's view once it ended.
func (a *app) started(what, name string, run client.WorkflowRun, follow func(id string) error) error {
	s := started{Name: name, WorkflowID: run.GetID(), RunID: run.GetRunID(), UI: a.uiLink(run.GetID())}
	wait := a.flagBool("wait")
	if wait && a.forMachines() {
		return follow(run.GetID())
	}
	err := a.print(s, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "started %s %s\n  workflow ID: %s\n  run ID:      %s\n  UI:          %s\n", what, s.Name, s.WorkflowID, s.RunID, s.UI)
		return err
	})
	if err != nil || !wait {
		return err
	}
	return follow(run.GetID())
}

func (a *app) uiLink(id string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", a.cfg.UIAddress, a.cfg.TemporalNamespace, id)
}

// queryStatus asks the workflow id for its status: an api.RolloutStatus or api.FleetStatus.
func queryStatus[S any](a *app, id string) (S, error) {
	var st S
	v, err := a.tc.QueryWorkflow(a.ctx, id, "", api.QueryStatus)
	if err != nil {
		return st, err
	}
	return st, v.Get(&st)
}

func (a *app) showStatus() error {
	tc, id, err := a.rollout()
	if err != nil {
		return err
	}
	desc, err := tc.DescribeWorkflow(a.ctx, id, "")
	if err != nil {
		return err
	}
	status := desc.Status
	watch := a.flagBool("watch")
	if watch && status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && a.forMachines() {
		return a.follow(id) // one document, once it ended
	}
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		res, runErr := a.result(id)
		view := withRequester(endedView(id, status, res, runErr), desc.Memo)
		return a.print(view, func(w io.Writer) error {
			fmt.Fprintf(w, "rollout %s ended: %s\n", id, view.Status)
			printRequester(w, view)
			printResult(w, res)
			if runErr != nil {
				fmt.Fprintf(w, "error: %s\n", humanError(runErr))
			}
			return nil
		})
	}
	st, err := queryStatus[api.RolloutStatus](a, id)
	if err != nil {
		return err
	}
	view := withRequester(runningView(id, st), desc.Memo)
	// Status still answers when the node workflows cannot be listed (a server whose visibility
	// lacks ParentWorkflowId); it says why that part is missing.
	steps, stepsErr := a.inFlight(id)
	view.InFlight = steps
	if stepsErr != nil {
		view.InFlightError = stepsErr.Error()
	}
	err = a.print(view, func(w io.Writer) error {
		printRequester(w, view)
		printStatus(w, st)
		printInFlight(w, steps, stepsErr, time.Now())
		return nil
	})
	if err != nil || !watch {
		return err
	}
	fmt.Fprintf(a.out, "\nwatching %s until it ends (Ctrl-C stops watching; the rollout goes on)\n", id)
	return a.follow(id)
}

// sendSignal sends the signal name to the workflow target resolves (a.rollout or a.fleet).
func (a *app) sendSignal(target func() (client.Client, string, error), name string) error {
	tc, id, err := target()
	if err != nil {
		return err
	}
	if err := tc.SignalWorkflow(a.ctx, id, "", name, nil); err != nil {
		return err
	}
	fmt.Fprintf(a.out, "sent %s to %s\n", name, id)
	return nil
}

func (a *app) setParallelism() error {
	n, err := strconv.Atoi(a.args[1])
	if err != nil {
		return usageError{fmt.Sprintf("parallelism N: %q is not a whole number", a.args[1])}
	}
	if n < 1 || n > api.MaxParallelism {
		return usageError{fmt.Sprintf("parallelism N: %d is not between 1 and %d", n, api.MaxParallelism)}
	}
	// Within it, a lower cap (the worker's policy) is the update validator's to check: it
	// answers with the rollout's own limit.
	var res api.SetParallelismResult
	id, err := a.updateRollout(api.UpdateSetParallelism, api.SetParallelismRequest{Parallelism: n}, &res)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "parallelism of %s: %d -> %d\n", id, res.Previous, res.Parallelism)
	return nil
}

// updateRollout sends the update name, with arg, to the rollout the command names and waits
// until it completes, reading its result into res; it returns the rollout's workflow ID.
func (a *app) updateRollout(name string, arg, res any) (string, error) {
	tc, id, err := a.rollout()
	if err != nil {
		return "", err
	}
	handle, err := tc.UpdateWorkflow(a.ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return id, err
	}
	return id, handle.Get(a.ctx, res)
}

func (a *app) abort() error {
	tc, id, err := a.rollout()
	if err != nil {
		return err
	}
	reason := a.flagString("reason")
	_, err = tc.WorkflowService().RequestCancelWorkflowExecution(a.ctx, &workflowservice.RequestCancelWorkflowExecutionRequest{
		Namespace:         a.cfg.TemporalNamespace,
		WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: id},
		Reason:            reason,
		Identity:          "starter",
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "aborting %s (%s): running Jobs are being deleted\n", id, reason)
	if !a.flagBool("wait") {
		return nil
	}
	return a.awaitAbort(tc, id)
}

// abortPoll is how often abort --wait looks at the rollout's node workflows.
var abortPoll = 2 * time.Second

// awaitAbort waits until the rollout has closed and none of its node workflows runs, saying
// how many are still stopping whenever that changes. A node workflow closes only once no Pod
// of a Job it created can run (design: the node's lock), so then none can.
func (a *app) awaitAbort(tc client.Client, id string) error {
	closed := make(chan error, 1)
	go func() {
		var res api.RolloutResult
		closed <- tc.GetWorkflow(a.ctx, id, "").Get(a.ctx, &res)
	}()
	rolloutClosed := false
	last := -1
	started := time.Now()
	for {
		n, err := a.runningNodes(tc, id)
		if err != nil {
			return err
		}
		if rolloutClosed && n == 0 {
			fmt.Fprintf(a.out, "aborted %s after %s: the rollout and all its node workflows have ended; no Pod of its Jobs runs any more\n", id, time.Since(started).Round(time.Second))
			return nil
		}
		if n != last {
			fmt.Fprintf(a.out, "waiting: %d node(s) still deleting their Jobs and waiting for their Pods to go\n", n)
			last = n
		}
		select {
		case err := <-closed:
			if err != nil && !temporal.IsCanceledError(err) && a.ctx.Err() != nil {
				return a.ctx.Err()
			}
			rolloutClosed = true
			continue
		case <-a.ctx.Done():
			return a.ctx.Err()
		case <-time.After(abortPoll):
		}
	}
}

// runningNodes counts the rollout's node workflows still running, from visibility.
func (a *app) runningNodes(tc client.Client, id string) (int, error) {
	resp, err := tc.CountWorkflow(a.ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Namespace: a.cfg.TemporalNamespace,
		Query:     fmt.Sprintf("ParentWorkflowId = '%s' AND ExecutionStatus = 'Running'", id),
	})
	if err != nil {
		return 0, fmt.Errorf("counting the rollout's running node workflows: %w", err)
	}
	return int(resp.GetCount()), nil
}
