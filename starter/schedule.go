package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/noderollout/noderollout/workflows"
)

// ScheduleIDPrefix + name is the Temporal Schedule ID of a rollout schedule.
const ScheduleIDPrefix = "noderollout-"

func init() {
	register("schedule create", command{
		usage: "schedule create NAME -f rollout.yaml (--cron EXPR | --every DURATION) [--paused] [--allow-overlap]",
		help:  "Create a Temporal Schedule that starts the rollout periodically; each run covers nodes added since and skips nodes done for this template.",
		flags: func(fs *pflag.FlagSet) {
			fs.StringP("file", "f", "", "rollout request, YAML or JSON")
			fs.String("cron", "", "cron expression, e.g. \"0 3 * * *\"")
			fs.Duration("every", 0, "interval, e.g. 24h")
			fs.Bool("paused", false, "create the schedule paused")
			fs.Bool("allow-overlap", false, "start a run even while the previous one runs (default: skip it)")
		},
		run: createSchedule,
	})
	register("schedule list", command{usage: "schedule list", help: "List rollout schedules.", run: listSchedules})
	register("schedule pause", command{usage: "schedule pause NAME", help: "Pause a schedule.", run: scheduleAction("pause")})
	register("schedule unpause", command{usage: "schedule unpause NAME", help: "Unpause a schedule.", run: scheduleAction("unpause")})
	register("schedule trigger", command{usage: "schedule trigger NAME", help: "Start a run now.", run: scheduleAction("trigger")})
	register("schedule delete", command{usage: "schedule delete NAME", help: "Delete a schedule (running rollouts go on).", run: scheduleAction("delete")})
}

func createSchedule(ctx context.Context, e *env) error {
	name, err := e.oneArg("schedule name")
	if err != nil {
		return err
	}
	req, err := requestFlag(e)
	if err != nil {
		return err
	}
	cron, _ := e.fs.GetString("cron")
	every, _ := e.fs.GetDuration("every")
	if (cron == "") == (every == 0) {
		return usageError{"give exactly one of --cron or --every"}
	}
	spec := client.ScheduleSpec{}
	if cron != "" {
		spec.CronExpressions = []string{cron}
	} else {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: every}}
	}
	overlap := enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
	if allow, _ := e.fs.GetBool("allow-overlap"); allow {
		overlap = enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL
	}
	paused, _ := e.fs.GetBool("paused")
	action := &client.ScheduleWorkflowAction{
		ID:            workflows.RolloutID(req.Name),
		Workflow:      workflows.RolloutWorkflow,
		Args:          []any{req},
		TaskQueue:     e.cfg.TaskQueue,
		StaticSummary: summary(req),
	}
	if hasRolloutNameAttribute(ctx, e) {
		action.TypedSearchAttributes = searchAttributes(req.Name)
	}
	_, err = e.client.ScheduleClient().Create(ctx, client.ScheduleOptions{
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
	fmt.Fprintf(e.out, "created schedule %s%s starting rollout %s (%s)\n", ScheduleIDPrefix, name, req.Name, describeSpec(cron, every))
	return nil
}

func describeSpec(cron string, every time.Duration) string {
	if cron != "" {
		return "cron " + cron
	}
	return "every " + every.String()
}

func listSchedules(ctx context.Context, e *env) error {
	it, err := e.client.ScheduleClient().List(ctx, client.ScheduleListOptions{})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCHEDULE\tPAUSED\tNEXT RUN\tRECENT RUNS")
	for it.HasNext() {
		s, err := it.Next()
		if err != nil {
			return err
		}
		next := "-"
		if len(s.NextActionTimes) > 0 {
			next = s.NextActionTimes[0].Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%d\n", s.ID, s.Paused, next, len(s.RecentActions))
	}
	return tw.Flush()
}

func scheduleAction(what string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		name, err := e.oneArg("schedule name")
		if err != nil {
			return err
		}
		h := e.client.ScheduleClient().GetHandle(ctx, ScheduleIDPrefix+name)
		switch what {
		case "pause":
			err = h.Pause(ctx, client.SchedulePauseOptions{Note: "paused by starter"})
		case "unpause":
			err = h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: "unpaused by starter"})
		case "trigger":
			err = h.Trigger(ctx, client.ScheduleTriggerOptions{})
		case "delete":
			err = h.Delete(ctx)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.out, "schedule %s%s: %s done\n", ScheduleIDPrefix, name, what)
		return nil
	}
}
