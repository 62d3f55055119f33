package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	k8svalidation "k8s.io/apimachinery/pkg/util/validation"
)

// idHelp is the help text of a command's ID argument, for workflow IDs prefix+<name>.
func idHelp(prefix string) string {
	return fmt.Sprintf(`ID is the name or the workflow ID (%[1]s<name>). An ID that reads both ways
("%[1]sx": the one named x, or the one named %[1]sx) is refused if both
exist; --id then says it is the workflow ID.`, prefix)
}

// idFlag adds --id: the ID argument is a workflow ID, taken as is.
func idFlag(cmd *cobra.Command) {
	cmd.Flags().Bool("id", false, "ID is a workflow ID, taken as is (for one that is also a name)")
}

// idCommand makes cmd one whose ID argument names a workflow prefix+<name>: its help ends
// with what ID means (after Long, or Short when there is no Long), and it takes --id, so every
// such command reads its ID the same way.
func idCommand(prefix string, cmd *cobra.Command) *cobra.Command {
	if cmd.Long == "" {
		cmd.Long = cmd.Short + "."
	}
	cmd.Long += "\n" + idHelp(prefix)
	idFlag(cmd)
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[annotationIDPrefix] = prefix
	return cmd
}

// describer is the Temporal client's call resolveID needs.
type describer interface {
	DescribeWorkflow(ctx context.Context, workflowID, runID string) (*client.WorkflowExecutionDescription, error)
}

// resolveID is the workflow ID a command's ID argument means: a name (nameToID gives its
// workflow ID), or a workflow ID if it starts with prefix. Such an argument reads both ways
// ("rollout-x" is the ID of the rollout named x, and the name of the one with ID
// rollout-rollout-x), so the server is asked which exist: steering the wrong rollout (abort)
// costs more than a lookup. If both exist, the operator says which; if neither, the argument
// is taken as the ID, and the command's own call says it is not found.
func resolveID(ctx context.Context, d describer, arg, prefix string, nameToID func(string) string) (string, error) {
	if !strings.HasPrefix(arg, prefix) {
		return nameToID(arg), nil
	}
	asName := nameToID(arg)
	idExists, err := workflowExists(ctx, d, arg)
	if err != nil {
		return "", err
	}
	nameExists, err := workflowExists(ctx, d, asName)
	if err != nil {
		return "", err
	}
	switch {
	case idExists && nameExists:
		return "", usageError{fmt.Sprintf("%s is both a workflow ID and a name: workflow %s exists, and so does workflow %s, named %s\n  say which with --id: --id %s, or --id %s",
			arg, arg, asName, arg, arg, asName)}
	case nameExists:
		return asName, nil
	}
	return arg, nil
}

func workflowExists(ctx context.Context, d describer, id string) (bool, error) {
	_, err := d.DescribeWorkflow(ctx, id, "")
	if errors.As(err, new(*serviceerror.NotFound)) {
		return false, nil
	}
	return err == nil, err
}

// checkName refuses, before anything dials, a name no rollout, fleet or schedule can have:
// names are DNS-1123 labels (they go into label values and workflow IDs).
func checkName(what, name string) error {
	if errs := k8svalidation.IsDNS1123Label(name); len(errs) > 0 {
		return usageError{fmt.Sprintf("%q is not a valid %s name: %s", name, what, strings.Join(errs, "; "))}
	}
	return nil
}

// checkIDArg refuses an ID argument that is neither a name nor a workflow ID of ours: a name,
// or prefix followed by a name or by cluster:name. --id takes any workflow ID as is.
func checkIDArg(arg, prefix, what string) error {
	if prefix == api.RolloutIDPrefix {
		arg, _ = cutScheduledRun(arg) // a run a schedule started
	}
	rest, isID := strings.CutPrefix(arg, prefix)
	if !isID {
		return checkName(what, arg)
	}
	for _, part := range strings.SplitN(rest, ":", 2) {
		if len(k8svalidation.IsDNS1123Label(part)) > 0 {
			return usageError{fmt.Sprintf("%q is not a valid %s name or workflow ID (%s<name>, %s<cluster>:<name>; names are DNS-1123 labels); pass --id to take it as a workflow ID as is", arg, what, prefix, prefix)}
		}
	}
	return nil
}

// target dials Temporal and resolves the command's ID argument with resolveID, or takes it
// as is with --id.
func (a *app) target(prefix string, nameToID func(string) string) (client.Client, string, error) {
	if !a.flagBool("id") {
		what := map[string]string{api.FleetIDPrefix: "fleet rollout"}[prefix]
		if what == "" {
			what = "rollout"
		}
		if err := checkIDArg(a.args[0], prefix, what); err != nil {
			return nil, "", err
		}
	}
	tc, err := a.client()
	if err != nil {
		return nil, "", err
	}
	if a.flagBool("id") {
		return tc, a.args[0], nil
	}
	id, err := resolveID(a.ctx, tc, a.args[0], prefix, nameToID)
	return tc, id, err
}
