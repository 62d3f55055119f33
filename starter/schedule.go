package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
)

// ScheduleIDPrefix + name is the Temporal Schedule ID of a rollout schedule.
const ScheduleIDPrefix = "noderollout-"

func scheduleCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "schedule",
		GroupID: "rollout",
		Short:   "Manage Temporal Schedules that start a rollout periodically",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	create := &cobra.Command{
		Use:   "create NAME -f FILE (--cron EXPR | --every DURATION) [--paused] [--allow-overlap]",
		Short: "Create a Schedule that starts the rollout periodically",
		Long: `Create a Temporal Schedule noderollout-NAME that starts the rollout. Each run covers the nodes
added since and skips nodes done for the template; a run is skipped while the previous one
still runs, unless --allow-overlap.`,
		Example: `  starter schedule create nightly -f rollout.yaml --cron "0 3 * * *"
  starter schedule create daily -f rollout.yaml --every 24h --paused`,
		Args: exactArgs(1, "a schedule NAME"),
		RunE: run(a.createSchedule),
	}
	fileFlag(create)
	create.Flags().String("cron", "", `cron expression as Temporal reads it: minute hour day-of-month month day-of-week (6 fields: + year; 7: second first), e.g. "0 3 * * mon-fri"; or @daily, @weekly, "@every 12h"; "CRON_TZ=Europe/Berlin 0 3 * * *" for a time zone (default UTC)`)
	create.Flags().Duration("every", 0, "interval, 1s or more, e.g. 24h")
	create.Flags().Bool("paused", false, "create the schedule paused")
	create.Flags().Bool("allow-overlap", false, "start a run even while the previous one runs (default: skip it)")
	reasonFlag(create, "each run's")
	create.MarkFlagsMutuallyExclusive("cron", "every")
	list := &cobra.Command{
		Use:   "list",
		Short: "List rollout schedules",
		Args:  cobra.NoArgs,
		RunE:  run(a.listSchedules),
	}
	outputFlag(list)
	cmd.AddCommand(create, list)
	for _, c := range []struct{ name, short string }{
		{"pause", "Pause a schedule"},
		{"unpause", "Unpause a schedule"},
		{"trigger", "Start a run now"},
		{"delete", "Delete a schedule (running rollouts go on)"},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   c.name + " NAME",
			Short: c.short,
			Args:  exactArgs(1, "a schedule NAME"),
			RunE:  run(func() error { return a.scheduleAction(c.name) }),
		})
	}
	return cmd
}

func (a *app) createSchedule() error {
	name, err := a.scheduleName()
	if err != nil {
		return err
	}
	req, err := a.request()
	if err != nil {
		return err
	}
	if req.Mode == api.ModeConverge {
		return usageError{"mode: converge: a converging rollout runs until it is aborted and starts each node that joins itself, so a schedule would skip every run after its first; start it once with starter start -f FILE"}
	}
	cron := a.flagString("cron")
	every, _ := a.cmd.Flags().GetDuration("every")
	if cron == "" && !a.cmd.Flags().Changed("every") {
		return usageError{"give one of --cron or --every, e.g. --cron \"0 3 * * *\" or --every 24h"}
	}
	if err := checkSpec(cron, every); err != nil {
		return err
	}
	tc, err := a.client()
	if err != nil {
		return err
	}
	spec := client.ScheduleSpec{}
	if cron != "" {
		spec.CronExpressions = []string{cron}
	} else {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: every}}
	}
	overlap := enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
	if a.flagBool("allow-overlap") {
		overlap = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL
	}
	paused := a.flagBool("paused")
	action := &client.ScheduleWorkflowAction{
		ID:            a.rolloutID(req.Name),
		Workflow:      api.RolloutWorkflow,
		Args:          []any{req},
		TaskQueue:     a.cfg.TaskQueue,
		StaticSummary: summary(req),
	}
	action.Memo = a.requesterMemo()
	action.TypedSearchAttributes = a.searchAttributes(req.Name)
	_, err = tc.ScheduleClient().Create(a.ctx, client.ScheduleOptions{
		ID:      ScheduleIDPrefix + name,
		Spec:    spec,
		Action:  action,
		Overlap: overlap,
		Paused:  paused,
		Note:    "created by starter",
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "created schedule %s%s starting rollout %s (%s)\n", ScheduleIDPrefix, name, req.Name, describeSpec(cron, every))
	return nil
}

// checkSpec refuses, before dialling, the --cron or --every the server would refuse.
func checkSpec(cron string, every time.Duration) error {
	if cron != "" {
		return checkCron(cron)
	}
	return checkEvery(every)
}

func describeSpec(cron string, every time.Duration) string {
	if cron != "" {
		return "cron " + cron
	}
	return "every " + every.String()
}

// scheduleView is one schedule as list prints it.
type scheduleView struct {
	ID         string     `json:"id"`
	Paused     bool       `json:"paused"`
	NextRun    *time.Time `json:"nextRun,omitempty"`
	RecentRuns int        `json:"recentRuns"`
	Note       string     `json:"note,omitempty"`
	WorkflowID string     `json:"workflowId,omitempty"`
}

func (a *app) listSchedules() error {
	tc, err := a.client()
	if err != nil {
		return err
	}
	it, err := tc.ScheduleClient().List(a.ctx, client.ScheduleListOptions{})
	if err != nil {
		return err
	}
	views := []scheduleView{}
	for it.HasNext() {
		s, err := it.Next()
		if err != nil {
			return err
		}
		if !strings.HasPrefix(s.ID, ScheduleIDPrefix) {
			continue // not one of ours
		}
		v := scheduleView{ID: s.ID, Paused: s.Paused, RecentRuns: len(s.RecentActions), Note: s.Note}
		if len(s.NextActionTimes) > 0 {
			next := s.NextActionTimes[0]
			v.NextRun = &next
		}
		views = append(views, v)
	}
	return a.print(views, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SCHEDULE\tPAUSED\tNEXT RUN\tRECENT RUNS")
		for _, v := range views {
			next := "-"
			if v.NextRun != nil {
				next = v.NextRun.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%v\t%s\t%d\n", v.ID, v.Paused, next, v.RecentRuns)
		}
		return tw.Flush()
	})
}

func (a *app) scheduleAction(what string) error {
	name, err := a.scheduleName()
	if err != nil {
		return err
	}
	tc, err := a.client()
	if err != nil {
		return err
	}
	h := tc.ScheduleClient().GetHandle(a.ctx, ScheduleIDPrefix+name)
	switch what {
	case "pause":
		err = h.Pause(a.ctx, client.SchedulePauseOptions{Note: "paused by starter"})
	case "unpause":
		err = h.Unpause(a.ctx, client.ScheduleUnpauseOptions{Note: "unpaused by starter"})
	case "trigger":
		err = h.Trigger(a.ctx, client.ScheduleTriggerOptions{})
	case "delete":
		err = h.Delete(a.ctx)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.out, "schedule %s%s: %s done\n", ScheduleIDPrefix, name, what)
	return nil
}

// scheduleName is the schedule NAME argument, checked as create checks it: every schedule
// command refuses a name no schedule can have before it asks the server.
func (a *app) scheduleName() (string, error) {
	name := a.args[0]
	if err := checkName("schedule", name); err != nil {
		return "", err
	}
	return name, nil
}
