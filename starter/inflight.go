package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/noderollout/noderollout/workflows"
)

// maxInFlightShown bounds the node workflows status describes: one call each.
const maxInFlightShown = 50

// nodeStep is what one node of a running rollout is doing now, read from its node workflow.
type nodeStep struct {
	Node string `json:"node"`
	// Step: draining, health or soak, job running, deleting job, or job (created, watched or
	// finalized inside a workflow task, where no activity shows).
	Step  string    `json:"step"`
	Since time.Time `json:"since"`
	// Attempt of the step's activity, when past the first.
	Attempt     int32  `json:"attempt,omitempty"`
	Progress    string `json:"progress,omitempty"`
	LastFailure string `json:"lastFailure,omitempty"`
}

// stepWords names the node workflow's regular activities as steps; the cordon, the Job's
// create and watch of a short Job and the finalize run as local activities and show as "job".
var stepWords = map[string]string{
	"DrainNode":       "draining",
	"CheckNodeHealth": "health or soak",
	"WaitJob":         "job running",
	"DeleteJob":       "deleting job",
}

// inFlight lists the rollout's running node workflows (from visibility, so it may trail by a
// moment) and the step each is at.
func (a *app) inFlight(id string) ([]nodeStep, error) {
	list, err := a.tc.ListWorkflow(a.ctx, &workflowservice.ListWorkflowExecutionsRequest{
		PageSize: maxInFlightShown,
		Query:    fmt.Sprintf("ParentWorkflowId = '%s' AND ExecutionStatus = 'Running'", id),
	})
	if err != nil {
		return nil, fmt.Errorf("listing the rollout's node workflows: %w", err)
	}
	var steps []nodeStep
	for _, e := range list.GetExecutions() {
		d, err := a.tc.DescribeWorkflow(a.ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId())
		if err != nil {
			if a.ctx.Err() != nil {
				return nil, err
			}
			continue // closed meanwhile
		}
		steps = append(steps, stepOf(d.RawResponse))
	}
	// The longest at their step first: those are the ones to look at.
	slices.SortStableFunc(steps, func(x, y nodeStep) int { return x.Since.Compare(y.Since) })
	return steps, nil
}

// stepOf reads a node workflow's description: its pending regular activity, if any, is the step.
func stepOf(d *workflowservice.DescribeWorkflowExecutionResponse) nodeStep {
	info := d.GetWorkflowExecutionInfo()
	id := strings.TrimPrefix(info.GetExecution().GetWorkflowId(), workflows.NodeIDPrefix)
	s := nodeStep{Node: id[strings.LastIndex(id, ":")+1:], Step: "job", Since: info.GetStartTime().AsTime()}
	for _, p := range d.GetPendingActivities() {
		word, ok := stepWords[p.GetActivityType().GetName()]
		if !ok {
			continue
		}
		s.Step, s.LastFailure = word, p.GetLastFailure().GetMessage()
		if p.GetAttempt() > 1 {
			s.Attempt = p.GetAttempt()
		}
		if t := p.GetLastStartedTime(); t != nil {
			s.Since = t.AsTime()
		}
		s.Progress = progressOf(p.GetActivityType().GetName(), p.GetHeartbeatDetails().GetPayloads())
		break
	}
	return s
}

// progressOf reads a step's last heartbeat: the drain's count of evictions, or the name of the
// Job that WaitJob and DeleteJob heartbeat (WaitJob only once its Job ran past 10 s).
func progressOf(activityType string, details []*commonpb.Payload) string {
	if len(details) == 0 {
		return ""
	}
	dc := converter.GetDefaultDataConverter()
	switch activityType {
	case "DrainNode":
		var evicted int
		if dc.FromPayload(details[0], &evicted) == nil {
			return fmt.Sprintf("%d Pod(s) evicted", evicted)
		}
	case "WaitJob", "DeleteJob":
		var job string
		if dc.FromPayload(details[0], &job) == nil && job != "" {
			return "Job " + job
		}
	}
	return ""
}

// printInFlight draws the nodes in flight under the status, with how long each has been at
// its step.
func printInFlight(w io.Writer, steps []nodeStep, err error, now time.Time) {
	if err != nil {
		fmt.Fprintf(w, "\nIN FLIGHT: not shown (%v)\n", err)
		return
	}
	if len(steps) == 0 {
		return
	}
	title := fmt.Sprintf("IN FLIGHT (%d)", len(steps))
	if len(steps) == maxInFlightShown {
		// A page of the running node workflows, not the longest at their step: say so.
		title = fmt.Sprintf("IN FLIGHT (%d shown; more may be running)", maxInFlightShown)
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tSTEP\tFOR\tDETAIL\n")
	for _, s := range steps {
		var detail []string
		if s.Progress != "" {
			detail = append(detail, s.Progress)
		}
		if s.Attempt > 0 {
			detail = append(detail, fmt.Sprintf("attempt %d", s.Attempt))
		}
		if s.LastFailure != "" {
			detail = append(detail, "last failure: "+clipMessage(s.LastFailure))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Node, s.Step, now.Sub(s.Since).Round(time.Second), strings.Join(detail, "; "))
	}
	tw.Flush()
}
