package main

import (
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/internal/didyoumean"
	"github.com/noderollout/noderollout/workflows"
)

// fleetCommand steers FleetRollout: one rollout over many clusters, in waves.
func fleetCommand(a *app) *cobra.Command {
	fleet := &cobra.Command{
		Use:     "fleet",
		GroupID: "rollout",
		Short:   "Roll out over many clusters in waves (workflow FleetRollout, ID fleet-<name>)",
	}
	start := &cobra.Command{
		Use:     "start -f FILE",
		Short:   "Start a fleet rollout on the fleet task queue " + workflows.FleetTaskQueue,
		Example: "  starter fleet start -f deploy/examples/fleet.yaml",
		Args:    cobra.NoArgs,
		RunE:    run(a.startFleet),
	}
	fileFlag(start)
	status := &cobra.Command{
		Use:   "status ID",
		Short: "Show each cluster's state in a fleet rollout",
		Args:  exactArgs(1, "ID"),
		RunE:  run(a.fleetStatus),
	}
	outputFlag(status)
	steer := []*cobra.Command{status}
	for _, s := range []string{workflows.SignalPause, workflows.SignalResume} {
		steer = append(steer, &cobra.Command{
			Use:   s + " ID",
			Short: s + " the fleet: the next wave and every running cluster's rollout",
			Args:  exactArgs(1, "ID"),
			RunE:  run(func() error { return a.sendSignal(a.fleet, s) }),
		})
	}
	steer = append(steer, &cobra.Command{
		Use:   "abort ID",
		Short: "Cancel the fleet rollout: every cluster's rollout is cancelled, running Jobs deleted",
		Args:  exactArgs(1, "ID"),
		RunE: run(func() error {
			tc, id, err := a.fleet()
			if err != nil {
				return err
			}
			if err := tc.CancelWorkflow(a.ctx, id, ""); err != nil {
				return err
			}
			fmt.Fprintf(a.out, "aborting %s: every cluster's running Jobs are being deleted\n", id)
			return nil
		}),
	})
	for _, cmd := range steer {
		idCommand(workflows.FleetIDPrefix, cmd)
	}
	fleet.AddCommand(start)
	fleet.AddCommand(steer...)
	return fleet
}

// fleet is the Temporal client and the workflow ID of the fleet rollout the command names.
func (a *app) fleet() (client.Client, string, error) {
	return a.target(workflows.FleetIDPrefix, workflows.FleetID)
}

// loadFleetRequest reads a fleet request (YAML or JSON; "-" is stdin) and checks it offline.
func loadFleetRequest(path string, stdin io.Reader) (workflows.FleetRequest, error) {
	name, data, err := readInput(path, stdin)
	if err != nil {
		return workflows.FleetRequest{}, err
	}
	return parseFleetRequest(name, data)
}

// parseFleetRequest checks a fleet request as the FleetRollout workflow does, with its nested
// rollout checked as 'starter validate' checks a rollout.
func parseFleetRequest(name string, data []byte) (workflows.FleetRequest, error) {
	var req workflows.FleetRequest
	bad := func(problems ...string) (workflows.FleetRequest, error) {
		return req, &invalidRequest{path: name, what: "fleet rollout request", problems: problems}
	}
	asJSON, lang, err := toJSON(name, data)
	if err != nil {
		return bad(err.Error())
	}
	var fields, rollout map[string]json.RawMessage
	if err := json.Unmarshal(asJSON, &fields); err != nil {
		return bad(fmt.Sprintf("the file must hold one %s object with the fleet request's fields (name, waves, rollout, ...); correct the %s", lang, lang))
	}
	if _, isFleet := fields["waves"]; !isFleet && fields["rollout"] == nil && (fields["nodeSelector"] != nil || fields["nodes"] != nil || fields["jobTemplate"] != nil) {
		return bad(fmt.Sprintf("this is a rollout request, not a fleet's (it has no waves and no rollout): check it with 'starter validate -f %s'", name))
	}
	if err := json.Unmarshal(asJSON, &req); err != nil {
		return bad(err.Error())
	}
	// Unknown fields at any depth, with a suggestion: encoding/json would drop a misspelt
	// maxFailedClusters and leave the budget at 0.
	unknown := didyoumean.UnknownFields(fields, reflect.TypeOf(req), "")
	// The rollout decodes itself (RolloutRequest.UnmarshalJSON), so the walk leaves it to us.
	if json.Unmarshal(fields["rollout"], &rollout) == nil {
		unknown = append(unknown, didyoumean.UnknownFields(rollout, reflect.TypeOf(req.Rollout), "rollout.", "progress")...)
	}
	problems := unknownFields(unknown)
	if err := workflows.ValidateFleet(req); err != nil {
		for _, p := range validationProblems(err) {
			if strings.Contains(p, "unknown field") && len(problems) > 0 || followsFromTypo(p, unknown) {
				continue
			}
			problems = append(problems, strings.ReplaceAll(withTypeHint(p, fields), "correct the JSON", "correct the "+lang))
		}
	}
	if len(problems) > 0 {
		return bad(problems...)
	}
	return req, nil
}

func (a *app) startFleet() error {
	path, err := a.filePath("the fleet request (see deploy/examples/fleet.yaml)")
	if err != nil {
		return err
	}
	req, err := a.fleetRequest(path)
	if err != nil {
		return err
	}
	tc, err := a.client()
	if err != nil {
		return err
	}
	run, err := tc.ExecuteWorkflow(a.ctx, client.StartWorkflowOptions{
		ID:                    workflows.FleetID(req.Name),
		TaskQueue:             workflows.FleetTaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:         fmt.Sprintf("fleet rollout %s over %d waves", req.Name, len(req.Waves)),
	}, workflows.FleetRolloutWorkflow, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "started fleet rollout %s (run %s)\n", run.GetID(), run.GetRunID())
	return nil
}

func (a *app) fleetStatus() error {
	tc, id, err := a.fleet()
	if err != nil {
		return err
	}
	var st workflows.FleetStatus
	v, err := tc.QueryWorkflow(a.ctx, id, "", workflows.QueryStatus)
	if err != nil {
		return err
	}
	if err := v.Get(&st); err != nil {
		return err
	}
	return a.print(st, func(w io.Writer) error {
		phase := st.Phase
		if phase == "draining" {
			phase = "draining (starting no more clusters)"
		}
		fmt.Fprintf(w, "fleet %s: %s, wave %d of %d, %d clusters failed (budget %d)\n",
			st.Name, phase, st.Wave, st.Waves, st.FailedClusters, st.MaxFailedClusters)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WAVE\tCLUSTER\tSTATE\tSUCCEEDED\tFAILED\tROLLOUT\tMESSAGE")
		for _, c := range st.Clusters {
			ok, failed := "-", "-"
			if c.Counts != nil {
				ok, failed = fmt.Sprint(c.Counts.Succeeded), fmt.Sprint(c.Counts.Failures())
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Wave, c.Cluster, c.State, ok, failed, c.WorkflowID, c.Message)
		}
		return tw.Flush()
	})
}
