package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// maxInFlightShown bounds the node workflows status describes: one call each.
const maxInFlightShown = 50

// nodeStep is what one node of a running rollout is doing now, read from its node workflow.
type nodeStep struct {
	Node string `json:"node"`
	// Step is the node workflow's step with its progress, as it answers the step query
	// ("drain (3 Pods left)", "soak 12s/40s"); for node workflows from before that query,
	// its pending activity: draining, health or soak, job running, deleting job, or job.
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
	// One description and one step query per node, several at once: a node whose worker is
	// busy with its workflow task answers its query only when the task ends (a short Job is
	// watched inside its first task, up to 20 s), and status must not wait for each in turn.
	execs := list.GetExecutions()
	found := make([]*nodeStep, len(execs))
	var wg sync.WaitGroup
	limit := make(chan struct{}, inFlightLookups)
	for i, e := range execs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit <- struct{}{}
			defer func() { <-limit }()
			id, runID := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			d, err := a.tc.DescribeWorkflow(a.ctx, id, runID)
			if err != nil {
				return // closed meanwhile
			}
			step := stepOf(d.RawResponse)
			// A node in the middle of a workflow task (a short Job is watched inside its first
			// one, up to 20 s) would answer only when the task ends: its step is "job" then.
			busy := d.RawResponse.GetPendingWorkflowTask().GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED
			if !busy {
				if q, ok := a.queryStep(id, runID); ok {
					step = exactStep(step, q, d.RawResponse, time.Now())
				}
			}
			found[i] = &step
		}()
	}
	wg.Wait()
	if err := a.ctx.Err(); err != nil {
		return nil, err
	}
	var steps []nodeStep
	for _, s := range found {
		if s != nil {
			steps = append(steps, *s)
		}
	}
	// The longest at their step first: those are the ones to look at.
	slices.SortStableFunc(steps, func(x, y nodeStep) int { return x.Since.Compare(y.Since) })
	return steps, nil
}

// stepOf reads a node workflow's description: its pending regular activity, if any, is the step.
func stepOf(d *workflowservice.DescribeWorkflowExecutionResponse) nodeStep {
	info := d.GetWorkflowExecutionInfo()
	id := strings.TrimPrefix(info.GetExecution().GetWorkflowId(), api.NodeIDPrefix)
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

// stepQueryTimeout bounds the step query status asks each node workflow; inFlightLookups is
// how many nodes it looks at at once.
const (
	stepQueryTimeout = 2 * time.Second
	inFlightLookups  = 10
)

// queryStep asks a node workflow which step it is at; false when it cannot say (one from
// before the query, or its worker is not answering).
func (a *app) queryStep(id, runID string) (api.NodeStep, bool) {
	var q api.NodeStep
	ctx, cancel := context.WithTimeout(a.ctx, stepQueryTimeout)
	defer cancel()
	v, err := a.tc.QueryWorkflow(ctx, id, runID, api.QueryNodeStep)
	if err != nil || v.Get(&q) != nil || q.Step == "" {
		return q, false
	}
	return q, true
}

// exactStep is the node's step as its workflow names it, with the progress its pending
// activity's heartbeat tells: the Pods a drain has left, how far a soak is.
func exactStep(s nodeStep, q api.NodeStep, d *workflowservice.DescribeWorkflowExecutionResponse, now time.Time) nodeStep {
	s.Since = q.Since
	var details []*commonpb.Payload
	for _, p := range d.GetPendingActivities() {
		details = p.GetHeartbeatDetails().GetPayloads()
		break
	}
	dc := converter.GetDefaultDataConverter()
	length := time.Duration(q.Seconds) * time.Second
	switch q.Step {
	case api.NodeStepCordon:
		s.Step = "cordon"
	case api.NodeStepDrain:
		s.Step = "drain"
		var evicted, left int
		if len(details) >= 2 && dc.FromPayload(details[0], &evicted) == nil && dc.FromPayload(details[1], &left) == nil {
			s.Step = fmt.Sprintf("drain (%d %s left)", left, map[bool]string{true: "Pod", false: "Pods"}[left == 1])
			s.Progress = fmt.Sprintf("%d evicted", evicted)
		}
	case api.NodeStepJob:
		s.Step = "job running"
		if q.Job != "" {
			s.Progress = "Job " + q.Job
		}
	case api.NodeStepRelease:
		s.Step = "deleting Job " + q.Job + ", waiting for its Pods to go"
		s.Progress = ""
	case api.NodeStepFinalize:
		s.Step = "recording the outcome on the Node"
	case api.NodeStepHealth:
		s.Step = fmt.Sprintf("health: waiting for the node's conditions (timeout %s)", length)
	case api.NodeStepSoak:
		// The soak holds from the time the node was first seen healthy, which it heartbeats.
		since := q.Since
		var healthy time.Time
		if len(details) > 0 && dc.FromPayload(details[0], &healthy) == nil && !healthy.IsZero() {
			since = healthy
		}
		elapsed := min(max(now.Sub(since), 0), length).Round(time.Second)
		s.Step = fmt.Sprintf("soak %s/%s", elapsed, length)
	case api.NodeStepUncordon:
		s.Step = "uncordon"
	default:
		s.Step = q.Step
	}
	return s
}
