package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// visibility answers list queries from a fixed set of rollouts and status queries from
// their statuses; it records the queries.
type visibility struct {
	client.Client
	execs    []*workflowpb.WorkflowExecutionInfo
	statuses map[string]api.RolloutStatus
	queries  []string
}

func (v *visibility) ListWorkflow(_ context.Context, r *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	v.queries = append(v.queries, r.GetQuery())
	var out []*workflowpb.WorkflowExecutionInfo
	q := r.GetQuery()
	_, prefix, _ := strings.Cut(q, "STARTS_WITH '")
	prefix, _, _ = strings.Cut(prefix, "'")
	for _, e := range v.execs {
		running := e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
		if !strings.HasPrefix(e.GetExecution().GetWorkflowId(), prefix) {
			continue
		}
		switch {
		case !strings.Contains(q, "ExecutionStatus"),
			strings.Contains(q, "ExecutionStatus = 'Running'") && running,
			strings.Contains(q, "ExecutionStatus != 'Running'") && !running,
			strings.Contains(q, "'"+statusWord(e.GetStatus())+"'") && strings.Contains(q, " IN ("):
			out = append(out, e)
		}
	}
	return &workflowservice.ListWorkflowExecutionsResponse{Executions: out}, nil
}

func (v *visibility) QueryWorkflow(_ context.Context, id, _, _ string, _ ...any) (converter.EncodedValue, error) {
	st, ok := v.statuses[id]
	if !ok {
		return nil, context.DeadlineExceeded
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(st)
	return encodedValue{p}, err
}

type encodedValue struct{ p *commonpb.Payloads }

func (e encodedValue) HasValue() bool { return true }
func (e encodedValue) Get(v any) error {
	return converter.GetDefaultDataConverter().FromPayloads(e.p, v)
}

func execution(name string, status enumspb.WorkflowExecutionStatus, started time.Time, requester string) *workflowpb.WorkflowExecutionInfo {
	memo := &commonpb.Memo{Fields: map[string]*commonpb.Payload{}}
	for k, v := range map[string]any{api.MemoRequester: requester, "templateHash": "abc123", "namespace": "kube-system", "nodeSelector": "kata=true"} {
		memo.Fields[k], _ = converter.GetDefaultDataConverter().ToPayload(v)
	}
	e := &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: api.RolloutID(name), RunId: "run-" + name},
		Type:      &commonpb.WorkflowType{Name: api.RolloutWorkflow},
		Status:    status,
		StartTime: timestamppb.New(started),
		Memo:      memo,
	}
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		e.CloseTime = timestamppb.New(started.Add(90 * time.Second))
	}
	return e
}

func listFixture() *visibility {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &visibility{
		execs: []*workflowpb.WorkflowExecutionInfo{
			execution("kata", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, t0, "ann@host"),
			execution("kernel", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, t0.Add(-time.Hour), "bob@host"),
			execution("firmware", enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, t0.Add(-2*time.Hour), "ann@host"),
		},
		statuses: map[string]api.RolloutStatus{
			api.RolloutID("kata"): {Name: "kata", Phase: "paused", Selected: 50, ListingDone: true,
				Counts: api.Counts{Succeeded: 12, Failed: 1, Running: 3}},
		},
	}
}

// list shows running rollouts with their progress, then the recent ended ones; --state
// filters; -o name, -o wide and -o jsonpath= print what kubectl users expect.
func TestListRunningAndRecentFilteredByState(t *testing.T) {
	v := listFixture()
	a, out := commandApp(t, v, listCommand)
	require.NoError(t, a.list())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, out.String())
	require.Regexp(t, `^NAME\s+STATUS\s+PROGRESS`, lines[0])
	require.Regexp(t, `^kata\s+Running \(paused\)\s+13/50 done, 1 failed, 3 in flight\s+`, lines[1])
	require.Regexp(t, `^kernel\s+Failed\s+-\s+.*1m30s\s+bob@host`, lines[2])
	require.Regexp(t, `^firmware\s+Completed`, lines[3])
	require.Contains(t, v.queries[0], "WorkflowType = 'Rollout' AND WorkflowId STARTS_WITH 'rollout-'")

	a, out = commandApp(t, v, listCommand, "--state", "failed,completed", "-o", "name")
	require.NoError(t, a.list())
	require.Equal(t, "kernel\nfirmware\n", out.String())

	a, out = commandApp(t, v, listCommand, "--state", "running", "-o", "wide")
	require.NoError(t, a.list())
	require.Regexp(t, `WORKFLOW ID\s+TEMPLATE\s+NAMESPACE\s+NODES\s+REASON`, out.String())
	require.Regexp(t, `rollout-kata\s+abc123\s+kube-system\s+kata=true`, out.String())

	a, out = commandApp(t, v, listCommand, "-o", "jsonpath={.items[*].status}")
	require.NoError(t, a.list())
	require.Equal(t, "Running Failed Completed\n", out.String())

	a, out = commandApp(t, v, listCommand, "-o", "json")
	require.NoError(t, a.list())
	var l rolloutList
	require.NoError(t, json.Unmarshal(out.Bytes(), &l))
	require.Equal(t, 13, l.Items[0].Counts.Finished())

	a, _ = commandApp(t, v, listCommand, "--state", "sleeping")
	require.ErrorContains(t, a.list(), `--state "sleeping" is not a state`)
}

// -o jsonpath= and -o name work on status too; a template that does not parse exits 2
// before anything is dialled.
func TestJSONPathAndNameOutputs(t *testing.T) {
	code, _, errOut := starter(t, "status", "x", "-o", "jsonpath={.status")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "-o jsonpath={.status")
	require.NotContains(t, errOut, "temporal at")

	var buf strings.Builder
	require.NoError(t, printJSONPath(&buf, ".counts.succeeded", rolloutView{Counts: api.Counts{Succeeded: 7}}))
	require.Equal(t, "7\n", buf.String())
	require.Equal(t, []string{"kata"}, rolloutView{Name: "kata"}.names())
}

// Completion suggests rollout names: running ones to steer, recent ones too for status.
func TestCompletionSuggestsRolloutNames(t *testing.T) {
	complete := func(args ...string) string {
		var out bytes.Buffer
		a := &app{ctx: context.Background(), tc: listFixture(), out: &out, errOut: &out}
		root := newRoot(a)
		root.SetArgs(append([]string{"__complete"}, args...))
		root.SetOut(&out)
		require.NoError(t, root.Execute())
		return out.String()
	}
	require.Equal(t, "kata\nkernel\n:4\n", firstLines(complete("status", "k"), 3))
	require.Equal(t, "kata\n:4\n", firstLines(complete("abort", ""), 2))
	require.Equal(t, "kata\n:4\n", firstLines(complete("set-parallelism", "ka"), 2))
	require.Equal(t, ":4\n", firstLines(complete("status", "kata", ""), 1), "one ID only")
}

func firstLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[:min(n, len(lines))], "")
}
