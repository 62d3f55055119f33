package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // maintenance windows name IANA zones; validate must know them all

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
)

func approveCommand(a *app) *cobra.Command {
	cmd := idCommand(api.RolloutIDPrefix, &cobra.Command{
		Use:     "approve ID [--note TEXT]",
		GroupID: "steer",
		Short:   "Let a rollout go on after its canaries (canary.approval)",
		Long: `Let a rollout waiting for approval after its canaries go on to the rest
of its nodes. Refused while the canaries still run or soak, and for a
rollout without canary.approval.`,
		Args: exactArgs(1, "ID"),
		RunE: run(a.approve),
	})
	cmd.Flags().String("note", "", "why, recorded in the workflow history")
	return cmd
}

func (a *app) approve() error {
	var res api.ApproveResult
	id, err := a.updateRollout(api.UpdateApprove, api.ApproveRequest{Note: a.flagString("note")}, &res)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "approved %s after %d canary node(s): the rest of its nodes start now\n", id, res.Canaries)
	return nil
}

// printPacing adds the pacing lines to the status table.
func printPacing(w io.Writer, p *api.PacingStatus) {
	if p == nil {
		return
	}
	at := func(t *time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case p.WaitingFor == "window" && p.WindowOpensAt != nil:
		fmt.Fprintf(w, "WINDOW\twaiting for window (opens %s)\n", at(p.WindowOpensAt))
	case p.WindowClosesAt != nil:
		fmt.Fprintf(w, "WINDOW\topen (closes %s)\n", at(p.WindowClosesAt))
	case p.WindowOpensAt != nil:
		fmt.Fprintf(w, "WINDOW\tclosed (opens %s)\n", at(p.WindowOpensAt))
	}
	if p.CanaryStage != "" {
		stage := p.CanaryStage
		switch p.WaitingFor {
		case "soak":
			stage = "soaking until " + at(p.SoakUntil)
		case "approval":
			stage = "waiting for approval: starter approve ID"
		}
		fmt.Fprintf(w, "CANARIES\t%s (%s)\n", stage, strings.Join(p.Canaries, ", "))
	}
	if p.MaxPerDomain > 0 {
		var parts []string
		for _, d := range sortedKeys(p.InFlightByDom) {
			name := d
			if name == "" {
				name = `""`
			}
			parts = append(parts, fmt.Sprintf("%s=%d", name, p.InFlightByDom[d]))
		}
		if len(parts) == 0 {
			parts = []string{"none in flight"}
		}
		fmt.Fprintf(w, "IN FLIGHT BY DOMAIN\t%s: %s (max %d each)\n", p.DomainKey, strings.Join(parts, " "), p.MaxPerDomain)
	}
	if p.Order != "" && p.Order != api.OrderByName {
		fmt.Fprintf(w, "ORDER\t%s\n", p.Order)
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
