package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
)

// listStates are the states list --state takes, as Temporal's ExecutionStatus values.
var listStates = map[string]string{
	"running":          "Running",
	"completed":        "Completed",
	"failed":           "Failed",
	"canceled":         "Canceled",
	"terminated":       "Terminated",
	"timed-out":        "TimedOut",
	"continued-as-new": "ContinuedAsNew",
}

// listQueryTimeout bounds the status query list asks each running rollout.
const listQueryTimeout = 3 * time.Second

func listCommand(a *app) *cobra.Command {
	states := sortedStates()
	cmd := &cobra.Command{
		Use:     "list [--state STATE,...] [--limit N]",
		Aliases: []string{"ls"},
		GroupID: "rollout",
		Short:   "List running and recent rollouts",
		Long: `List rollouts (workflow Rollout, ID rollout-<name>): every running one, with its
progress, then the most recent ended ones, newest first, at most --limit. With
--state, only those in the states given (` + strings.Join(states, ", ") + `).
Dry runs are not listed. From Temporal's visibility, which may trail by a moment.`,
		Example: `  starter list
  starter list --state failed,canceled -o wide
  starter list --state running -o name`,
		Args: cobra.NoArgs,
		RunE: run(a.list),
	}
	cmd.Flags().StringSlice("state", nil, "only rollouts in these states: "+strings.Join(states, ", "))
	cmd.Flags().Int("limit", 20, "at most this many ended rollouts (running ones are all listed)")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(states, cobra.ShellCompDirectiveNoFileComp))
	outputFlag(cmd)
	return cmd
}

// rolloutList is what list prints with -o json|yaml, under items as kubectl's lists.
type rolloutList struct {
	Items []rolloutItem `json:"items"`
}

func (l rolloutList) names() []string {
	names := make([]string, len(l.Items))
	for i, it := range l.Items {
		names[i] = it.Name
	}
	return names
}

// rolloutItem is one rollout as list shows it.
type rolloutItem struct {
	Name       string     `json:"name"`
	WorkflowID string     `json:"workflowId"`
	RunID      string     `json:"runId"`
	Status     string     `json:"status"`
	StartedAt  time.Time  `json:"startedAt"`
	ClosedAt   *time.Time `json:"closedAt,omitempty"`
	// Phase and Counts of a running rollout, from its status query ("" when it did not answer).
	Phase        string      `json:"phase,omitempty"`
	Selected     int         `json:"selected,omitempty"`
	Counts       *api.Counts `json:"counts,omitempty"`
	Requester    string      `json:"requester,omitempty"`
	Reason       string      `json:"reason,omitempty"`
	TemplateHash string      `json:"templateHash,omitempty"`
	Namespace    string      `json:"namespace,omitempty"`
	NodeSelector string      `json:"nodeSelector,omitempty"`
}

func (a *app) list() error {
	var statuses []string
	for _, s := range a.stringSlice("state") {
		v, ok := listStates[strings.ToLower(strings.TrimSpace(s))]
		if !ok {
			return usageError{fmt.Sprintf("--state %q is not a state; use %s", s, strings.Join(sortedStates(), ", "))}
		}
		statuses = append(statuses, v)
	}
	limit, _ := a.cmd.Flags().GetInt("limit")
	if limit < 1 {
		return usageError{fmt.Sprintf("--limit %d: give 1 or more", limit)}
	}
	if _, err := a.client(); err != nil {
		return err
	}
	base := fmt.Sprintf("WorkflowType = '%s' AND WorkflowId STARTS_WITH '%s'", api.RolloutWorkflow, a.rolloutID(""))
	var execs []*workflowpb.WorkflowExecutionInfo
	if len(statuses) == 0 {
		// Every running rollout, then the latest ended ones.
		running, err := a.listWorkflows(base+" AND ExecutionStatus = 'Running'", 0)
		if err != nil {
			return err
		}
		ended, err := a.listWorkflows(base+" AND ExecutionStatus != 'Running' AND ExecutionStatus != 'ContinuedAsNew'", limit)
		if err != nil {
			return err
		}
		execs = append(running, ended...)
	} else {
		quoted := make([]string, len(statuses))
		for i, s := range statuses {
			quoted[i] = "'" + s + "'"
		}
		var err error
		execs, err = a.listWorkflows(base+" AND ExecutionStatus IN ("+strings.Join(quoted, ", ")+")", limit)
		if err != nil {
			return err
		}
	}
	items := make([]rolloutItem, len(execs))
	for i, e := range execs {
		items[i] = itemOf(e)
	}
	a.addProgress(items)
	list := rolloutList{Items: items}
	return a.print(list, func(w io.Writer) error { return printList(w, list, a.wide(), time.Now()) })
}

func sortedStates() []string {
	states := make([]string, 0, len(listStates))
	for s := range listStates {
		states = append(states, s)
	}
	sort.Strings(states)
	return states
}

func (a *app) stringSlice(name string) []string {
	v, _ := a.cmd.Flags().GetStringSlice(name)
	return v
}

// listWorkflows pages through the executions the visibility query matches, at most limit
// (0: all) of them, newest first as the server orders them.
func (a *app) listWorkflows(query string, limit int) ([]*workflowpb.WorkflowExecutionInfo, error) {
	var out []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		page := int32(100)
		if limit > 0 {
			page = int32(min(limit-len(out), 100))
		}
		resp, err := a.tc.ListWorkflow(a.ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: a.cfg.TemporalNamespace, PageSize: page, Query: query, NextPageToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("listing rollouts: %w", err)
		}
		out = append(out, resp.GetExecutions()...)
		token = resp.GetNextPageToken()
		if len(token) == 0 || limit > 0 && len(out) >= limit {
			if limit > 0 && len(out) > limit {
				out = out[:limit]
			}
			return out, nil
		}
	}
}

// rolloutName is the name in a rollout's workflow ID (rollout-<name>, rollout-<cluster>:<name>,
// and either followed by -<time> in a run a schedule started).
func rolloutName(id string) string {
	id, _ = cutScheduledRun(id)
	name := strings.TrimPrefix(id, api.RolloutIDPrefix)
	return name[strings.LastIndex(name, ":")+1:]
}

func itemOf(e *workflowpb.WorkflowExecutionInfo) rolloutItem {
	it := rolloutItem{
		Name:       rolloutName(e.GetExecution().GetWorkflowId()),
		WorkflowID: e.GetExecution().GetWorkflowId(),
		RunID:      e.GetExecution().GetRunId(),
		Status:     statusWord(e.GetStatus()),
		StartedAt:  e.GetStartTime().AsTime(),
	}
	if e.GetCloseTime() != nil && e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t := e.GetCloseTime().AsTime()
		it.ClosedAt = &t
	}
	memo := e.GetMemo()
	it.Requester = memoString(memo, api.MemoRequester)
	it.Reason = memoString(memo, api.MemoReason)
	it.TemplateHash = memoString(memo, "templateHash")
	it.Namespace = memoString(memo, "namespace")
	it.NodeSelector = memoString(memo, "nodeSelector")
	if it.NodeSelector == "" {
		var n int
		if p, ok := memo.GetFields()["nodes"]; ok && converter.GetDefaultDataConverter().FromPayload(p, &n) == nil {
			it.NodeSelector = fmt.Sprintf("%d named nodes", n)
		}
	}
	return it
}

// statusWord is Temporal's status without its prefix: Running, Completed, Failed, ...
func statusWord(s enumspb.WorkflowExecutionStatus) string {
	return strings.TrimPrefix(s.String(), "WorkflowExecutionStatus")
}

// addProgress asks each running rollout for its status, all at once, each for at most
// listQueryTimeout: a rollout whose worker is down is listed without its progress.
func (a *app) addProgress(items []rolloutItem) {
	var wg sync.WaitGroup
	for i := range items {
		if items[i].Status != "Running" {
			continue
		}
		wg.Add(1)
		go func(it *rolloutItem) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(a.ctx, listQueryTimeout)
			defer cancel()
			v, err := a.tc.QueryWorkflow(ctx, it.WorkflowID, it.RunID, api.QueryStatus)
			if err != nil {
				return
			}
			var st api.RolloutStatus
			if v.Get(&st) != nil {
				return
			}
			c := st.Counts
			c.Pending = max(0, st.Selected-c.Finished()-c.Running-c.Waiting)
			it.Phase, it.Selected, it.Counts = st.Phase, st.Selected, &c
		}(&items[i])
	}
	wg.Wait()
}

// printList draws the rollouts; wide adds the workflow ID, template, namespace, selector and
// reason.
func printList(w io.Writer, l rolloutList, wide bool, now time.Time) error {
	if len(l.Items) == 0 {
		_, err := fmt.Fprintln(w, "no rollouts")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "NAME\tSTATUS\tPROGRESS\tSTARTED\tDURATION\tREQUESTER"
	if wide {
		head += "\tWORKFLOW ID\tTEMPLATE\tNAMESPACE\tNODES\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, it := range l.Items {
		status := it.Status
		if it.Phase != "" && it.Phase != "running" {
			status += " (" + it.Phase + ")"
		}
		progress := "-"
		if c := it.Counts; c != nil {
			progress = fmt.Sprintf("%d/%d done, %d failed, %d in flight", c.Finished(), max(it.Selected, c.Finished()), c.Failures(), c.Running+c.Waiting)
		}
		end := now
		if it.ClosedAt != nil {
			end = *it.ClosedAt
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", it.Name, status, progress, it.StartedAt.Local().Format("2006-01-02 15:04:05"),
			end.Sub(it.StartedAt).Round(time.Second), orDash(it.Requester))
		if wide {
			line += fmt.Sprintf("\t%s\t%s\t%s\t%s\t%s", it.WorkflowID, orDash(it.TemplateHash), orDash(it.Namespace), orDash(it.NodeSelector), orDash(clipMessage(it.Reason)))
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
