package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/workflows"
)

func init() {
	register("start", command{
		usage: "start -f rollout.yaml [--wait] [--allow-rerun]",
		help:  "Start a rollout (workflow ID rollout-<name>); with --wait follow it to the end and exit non-zero if it fails.",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("file", "f", "", "rollout request, YAML or JSON (see README for the fields)")
			fs.Bool("wait", false, "follow progress until the rollout ends")
			fs.Bool("allow-rerun", false, "start even if a rollout of this name already completed (nodes already done for this template are still skipped unless the request sets rerun)")
		},
		run: startRollout,
	})
	register("dry-run", command{
		usage: "dry-run -f rollout.yaml",
		help:  "List the nodes a rollout would reach and the Jobs it would create, creating nothing.",
		flags: func(fs *pflag.FlagSet) { fs.StringP("file", "f", "", "rollout request, YAML or JSON") },
		run:   dryRun,
	})
	register("status", command{
		usage: "status ID [-o table|json]",
		help:  "Show a rollout's progress (ID: workflow ID or rollout name).",
		flags: func(fs *pflag.FlagSet) { fs.StringP("output", "o", "table", "table or json") },
		run:   showStatus,
	})
	register("pause", command{usage: "pause ID", help: "Stop starting new nodes; nodes in flight finish.", run: sendSignal(workflows.SignalPause)})
	register("resume", command{usage: "resume ID", help: "Start new nodes again after a pause.", run: sendSignal(workflows.SignalResume)})
	register("set-parallelism", command{
		usage: "set-parallelism ID N",
		help:  "Change how many nodes may run at once, while the rollout runs.",
		run:   setParallelism,
	})
	register("abort", command{
		usage: "abort ID [--reason TEXT]",
		help:  "Cancel a rollout: running Jobs are deleted, no new node starts.",
		flags: func(fs *pflag.FlagSet) {
			fs.String("reason", "aborted with starter", "why, recorded in the workflow history")
		},
		run: abort,
	})
}

// workflowID accepts a workflow ID or a rollout name.
func workflowID(arg string) string {
	if strings.HasPrefix(arg, workflows.RolloutIDPrefix) {
		return arg
	}
	return workflows.RolloutID(arg)
}

func requestFlag(e *env) (workflows.RolloutRequest, error) {
	path, _ := e.fs.GetString("file")
	if path == "" {
		return workflows.RolloutRequest{}, usageError{"-f/--file is required"}
	}
	req, err := loadRequest(path)
	if err != nil {
		return req, usageError{err.Error()}
	}
	return req, nil
}

func startOptions(ctx context.Context, e *env, id string, req workflows.RolloutRequest) client.StartWorkflowOptions {
	opts := client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                e.cfg.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		// Without this the SDK hands back the earlier run as if it had just started.
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            summary(req),
	}
	if rerun, _ := e.fs.GetBool("allow-rerun"); rerun {
		opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	}
	if hasRolloutNameAttribute(ctx, e) {
		opts.TypedSearchAttributes = searchAttributes(req.Name)
	}
	return opts
}

func searchAttributes(name string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(workflows.SearchAttributeRolloutName).ValueSet(name))
}

// hasRolloutNameAttribute tells whether the namespace registered RolloutName; without it the
// rollout still runs, it just cannot be searched by name.
func hasRolloutNameAttribute(ctx context.Context, e *env) bool {
	resp, err := e.client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: e.cfg.TemporalNamespace})
	if err != nil {
		return false
	}
	_, ok := resp.GetCustomAttributes()[workflows.SearchAttributeRolloutName]
	return ok
}

func summary(req workflows.RolloutRequest) string {
	target := fmt.Sprintf("%d nodes", len(req.Nodes))
	if len(req.Nodes) == 0 {
		target = "nodes " + strings.TrimSpace(req.NodeSelector+" "+req.FieldSelector)
	}
	return fmt.Sprintf("rollout %s: Jobs in %s on %s", req.Name, nsOrDefault(req.Namespace), target)
}

func nsOrDefault(ns string) string {
	if ns == "" {
		return workflows.DefaultNamespace
	}
	return ns
}

func startRollout(ctx context.Context, e *env) error {
	req, err := requestFlag(e)
	if err != nil {
		return err
	}
	id := workflows.RolloutID(req.Name)
	run, err := e.client.ExecuteWorkflow(ctx, startOptions(ctx, e, id, req), workflows.RolloutWorkflow, req)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return fmt.Errorf("rollout %s is already running or already completed (workflow %s); use 'starter status %s', or --allow-rerun to run it again", req.Name, id, req.Name)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "started rollout %s\n  workflow ID: %s\n  run ID:      %s\n  UI:          %s\n", req.Name, run.GetID(), run.GetRunID(), uiLink(e, run.GetID()))
	if wait, _ := e.fs.GetBool("wait"); wait {
		return follow(ctx, e, run.GetID())
	}
	return nil
}

func uiLink(e *env, id string) string {
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", e.cfg.UIAddress, e.cfg.TemporalNamespace, id)
}

func dryRun(ctx context.Context, e *env) error {
	req, err := requestFlag(e)
	if err != nil {
		return err
	}
	req.DryRun = true
	id := workflows.RolloutID(req.Name) + "-dry-run"
	opts := startOptions(ctx, e, id, req)
	opts.WorkflowIDReusePolicy = enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING
	run, err := e.client.ExecuteWorkflow(ctx, opts, workflows.RolloutWorkflow, req)
	if err != nil {
		return err
	}
	var res workflows.RolloutResult
	if err := run.Get(ctx, &res); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "dry run of %s (template %s): %d nodes selected, %d would run, %d already done, %d missing\n",
		req.Name, res.TemplateHash, res.Selected, res.Counts.Pending, res.Counts.Skipped, res.Counts.NodeGone)
	fmt.Fprintf(e.out, "%-40s %s\n", "NODE", "JOB (name prefix) / SKIP")
	for _, p := range res.Planned {
		what := p.JobPrefix + "…"
		if p.Skip != "" {
			what = "skip: " + p.Skip
		}
		fmt.Fprintf(e.out, "%-40s %s\n", p.Node, what)
	}
	return nil
}

func queryStatus(ctx context.Context, e *env, id string) (workflows.RolloutStatus, error) {
	var st workflows.RolloutStatus
	v, err := e.client.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return st, err
	}
	return st, v.Get(&st)
}

func showStatus(ctx context.Context, e *env) error {
	arg, err := e.oneArg("rollout ID")
	if err != nil {
		return err
	}
	id := workflowID(arg)
	desc, err := e.client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return err
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return finishedStatus(ctx, e, id, desc.GetWorkflowExecutionInfo().GetStatus())
	}
	st, err := queryStatus(ctx, e, id)
	if err != nil {
		return err
	}
	if out, _ := e.fs.GetString("output"); out == "json" {
		return printJSON(e, st)
	}
	printStatus(e.out, st)
	return nil
}

// finishedStatus describes a rollout that has ended, from its result.
func finishedStatus(ctx context.Context, e *env, id string, status enumspb.WorkflowExecutionStatus) error {
	res, runErr := result(ctx, e, id)
	if out, _ := e.fs.GetString("output"); out == "json" {
		return printJSON(e, res)
	}
	fmt.Fprintf(e.out, "rollout %s ended: %s\n", id, strings.TrimPrefix(status.String(), "WorkflowExecutionStatus"))
	printResult(e.out, res)
	if runErr != nil {
		fmt.Fprintf(e.out, "error: %v\n", runErr)
	}
	return nil
}

func printJSON(e *env, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.out, string(b))
	return err
}

func sendSignal(name string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		arg, err := e.oneArg("rollout ID")
		if err != nil {
			return err
		}
		if err := e.client.SignalWorkflow(ctx, workflowID(arg), "", name, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.out, "sent %s to %s\n", name, workflowID(arg))
		return nil
	}
}

func setParallelism(ctx context.Context, e *env) error {
	if len(e.args) != 2 {
		return usageError{"expected: set-parallelism ID N"}
	}
	n, err := strconv.Atoi(e.args[1])
	if err != nil {
		return usageError{fmt.Sprintf("N: %q is not a whole number", e.args[1])}
	}
	handle, err := e.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID(e.args[0]),
		UpdateName:   workflows.UpdateSetParallelism,
		Args:         []any{workflows.SetParallelismRequest{Parallelism: n}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return err
	}
	var res workflows.SetParallelismResult
	if err := handle.Get(ctx, &res); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "parallelism of %s: %d -> %d\n", workflowID(e.args[0]), res.Previous, res.Parallelism)
	return nil
}

func abort(ctx context.Context, e *env) error {
	arg, err := e.oneArg("rollout ID")
	if err != nil {
		return err
	}
	reason, _ := e.fs.GetString("reason")
	_, err = e.client.WorkflowService().RequestCancelWorkflowExecution(ctx, &workflowservice.RequestCancelWorkflowExecutionRequest{
		Namespace:         e.cfg.TemporalNamespace,
		WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflowID(arg)},
		Reason:            reason,
		Identity:          "starter",
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "aborting %s (%s): running Jobs are being deleted\n", workflowID(arg), reason)
	return nil
}
