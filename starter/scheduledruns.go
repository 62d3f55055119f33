package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/noderollout/noderollout/api"
)

// scheduledRunTime is the layout of what a Temporal Schedule appends, after a '-', to the
// workflow ID its action names: the run's nominal time, RFC 3339 in UTC to the second. So the
// runs of `schedule create nightly -f x.yaml` (rollout x) have IDs rollout-x-2026-12-06T03:00:00Z.
const scheduledRunTime = "2006-01-02T15:04:05Z"

// cutScheduledRun is the workflow ID a schedule's action names, for the ID of one of its
// runs; ok is false for an ID no schedule made.
func cutScheduledRun(id string) (base string, ok bool) {
	cut := len(id) - len(scheduledRunTime) - 1
	if cut <= 0 || id[cut] != '-' {
		return id, false
	}
	if _, err := time.Parse(scheduledRunTime, id[cut+1:]); err != nil {
		return id, false
	}
	return id[:cut], true
}

// runLister is what newestRun needs of the Temporal client.
type runLister interface {
	describer
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// newestRun is the workflow ID a rollout's name means: the newest of the rollout started by
// hand (id, rollout-<name>) and the runs its schedules started (id-<time>), so that `status
// nightly` shows tonight's run, not one started by hand weeks ago. A server whose visibility
// cannot answer the query leaves id as it is.
func newestRun(ctx context.Context, tc runLister, namespace, id string) (string, error) {
	resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace, PageSize: 100,
		Query: fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s-'", api.RolloutWorkflow, id),
	})
	if err != nil {
		return id, nil
	}
	newest, newestAt := "", time.Time{}
	for _, e := range resp.GetExecutions() {
		wid := e.GetExecution().GetWorkflowId()
		if base, ok := cutScheduledRun(wid); ok && base == id && e.GetStartTime().AsTime().After(newestAt) {
			newest, newestAt = wid, e.GetStartTime().AsTime()
		}
	}
	if newest == "" {
		return id, nil
	}
	own, err := tc.DescribeWorkflow(ctx, id, "")
	switch {
	case errors.As(err, new(*serviceerror.NotFound)):
		return newest, nil
	case err != nil:
		return "", err
	case own.RawResponse.GetWorkflowExecutionInfo().GetStartTime().AsTime().After(newestAt):
		return id, nil
	}
	return newest, nil
}
