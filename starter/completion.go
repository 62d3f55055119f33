package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/config"
)

// annotationIDPrefix marks a command whose first argument names a workflow prefix+<name>.
const annotationIDPrefix = "noderollout.io/id-prefix"

// completionTimeout bounds the Temporal calls one completion makes: a shell waits for it.
const completionTimeout = 3 * time.Second

// completeIDs makes every ID command complete its first argument with the names of the
// rollouts (or fleets) there are: running ones for the steering commands, and recent ended
// ones too for status.
func (a *app) completeIDs(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if prefix, ok := c.Annotations[annotationIDPrefix]; ok {
			withEnded := c.Name() == "status"
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return a.namesFor(cmd, prefix, toComplete, withEnded), cobra.ShellCompDirectiveNoFileComp
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// namesFor lists the names of workflows prefix+<name> starting with toComplete; any failure
// (no server, say) completes nothing rather than printing an error into the shell.
func (a *app) namesFor(cmd *cobra.Command, prefix, toComplete string, withEnded bool) []string {
	cfg, err := config.FromFlags(cmd.Flags(), a.environ)
	if err != nil {
		return nil
	}
	a.cfg, a.cmd = cfg, cmd
	ctx, cancel := context.WithTimeout(a.ctx, completionTimeout)
	defer cancel()
	a.ctx = ctx
	if _, err := a.client(); err != nil {
		return nil
	}
	workflowType, idPrefix := api.RolloutWorkflow, a.rolloutID("")
	if prefix == api.FleetIDPrefix {
		workflowType, idPrefix = api.FleetRolloutWorkflow, api.FleetIDPrefix
	}
	query := fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s'", workflowType, idPrefix+toComplete)
	if !withEnded {
		query += " AND ExecutionStatus = 'Running'"
	}
	execs, err := a.listWorkflows(query, 100)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var names []string
	for _, e := range execs {
		name := strings.TrimPrefix(e.GetExecution().GetWorkflowId(), idPrefix)
		if !seen[name] && strings.HasPrefix(name, toComplete) {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}
