package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc"
)

// The node tables and the in-flight table cut a message past 100 bytes, marking the cut; one of
// 100 bytes is shown whole.
func TestTablesClipLongMessagesAt100Bytes(t *testing.T) {
	whole, long := strings.Repeat("w", 100), strings.Repeat("l", 100)+"z"
	now := time.Now()
	var b bytes.Buffer
	printNodes(&b, "FAILED NODES", []api.NodeResult{{Node: "a", Message: whole}, {Node: "b", Message: long}})
	printInFlight(&b, []nodeStep{{Node: "c", Step: "job", Since: now, LastFailure: long}}, nil, now)
	out := b.String()
	require.Contains(t, out, whole+"\n")
	require.NotContains(t, out, "z", "the 101st byte is cut")
	require.Equal(t, 2, strings.Count(out, strings.Repeat("l", 100)+"…"), out)
}

// progressing is a rollout that moves through statuses, one per status query, and ends once
// they are all answered.
type progressing struct {
	client.Client
	mu       sync.Mutex
	statuses []api.RolloutStatus
	asked    int
	ended    chan struct{}
	result   api.RolloutResult
}

func newProgressing(statuses ...api.RolloutStatus) *progressing {
	return &progressing{statuses: statuses, ended: make(chan struct{})}
}

func (p *progressing) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.statuses[min(p.asked, len(p.statuses)-1)]
	p.asked++
	if p.asked == len(p.statuses)+1 {
		close(p.ended)
	}
	payloads, err := converter.GetDefaultDataConverter().ToPayloads(st)
	return encodedValue{payloads}, err
}

func (p *progressing) GetWorkflow(_ context.Context, id, _ string) client.WorkflowRun {
	return waitingRun{p: p, id: id}
}

type waitingRun struct {
	client.WorkflowRun
	p  *progressing
	id string
}

func (r waitingRun) Get(ctx context.Context, res any) error {
	select {
	case <-r.p.ended:
	case <-ctx.Done():
		return ctx.Err()
	}
	*res.(*api.RolloutResult) = r.p.result
	return nil
}

func running(done, failed, inFlight int, phase string) api.RolloutStatus {
	return api.RolloutStatus{Name: "kata", Phase: phase, Selected: 10, ListingDone: true,
		Counts: api.Counts{Succeeded: done - failed, Failed: failed, Running: inFlight}}
}

// Into a pipe or a CI log, progress is one line per change: no carriage return, no escape
// sequence, a line only when the counts or the phase changed (before: one line per 10 s at
// most, so changes in between were lost, and a rate that changes each time).
func TestFollowWritesOneLinePerChangeWhenNotATerminal(t *testing.T) {
	defer func(d, q time.Duration) { followInterval, followQueryInterval = d, q }(followInterval, followQueryInterval)
	followInterval, followQueryInterval = 5*time.Millisecond, 0
	p := newProgressing(
		running(0, 0, 3, "running"),
		running(0, 0, 3, "running"),
		running(2, 0, 3, "running"),
		running(2, 0, 3, "running"),
		running(5, 1, 3, "paused"),
		running(10, 1, 0, "running"),
	)
	p.result = api.RolloutResult{Name: "kata", Selected: 10, Counts: api.Counts{Succeeded: 9, Failed: 1}}
	var out bytes.Buffer
	a := &app{ctx: context.Background(), tc: p, out: &out}
	a.cmd = startCommand(a)
	err := a.follow("rollout-kata")
	require.NoError(t, err)
	text := out.String()
	require.NotContains(t, text, "\r")
	require.NotContains(t, text, "\033")
	var progress []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "done,") && strings.Contains(l, "in flight") {
			progress = append(progress, l[strings.Index(l, "]")+2:])
		}
	}
	require.Equal(t, []string{
		"0/10 done, 0 failed, 3 in flight (running)",
		"2/10 done, 0 failed, 3 in flight (running)",
		"5/10 done, 1 failed, 3 in flight (paused)",
		"10/10 done, 1 failed, 0 in flight (running)",
	}, progress, text)
}

// describedOnly is a running rollout whose node workflows in flight go from 3 to 1 over its
// describes, and which ends after the last of them.
type describedOnly struct {
	*progressing
	inFlight  []int
	described int
}

func (d *describedOnly) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.inFlight[min(d.described, len(d.inFlight)-1)]
	d.described++
	if d.described == len(d.inFlight) {
		close(d.ended)
	}
	return &client.WorkflowExecutionDescription{
		WorkflowExecutionMetadata: client.WorkflowExecutionMetadata{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
		RawResponse:               &workflowservice.DescribeWorkflowExecutionResponse{PendingChildren: make([]*workflowpb.PendingChildExecutionInfo, n)},
	}, nil
}

// Following costs at most one query (a Temporal action) per followQueryInterval, however often
// it looks: in between, a describe (no action) keeps the nodes in flight live (before: a query
// every 2 s, 30 actions a minute).
func TestFollowQueriesAtMostOncePerQueryInterval(t *testing.T) {
	defer func(d, q time.Duration) { followInterval, followQueryInterval = d, q }(followInterval, followQueryInterval)
	followInterval, followQueryInterval = 5*time.Millisecond, time.Hour
	p := &describedOnly{progressing: newProgressing(running(2, 0, 3, "running"), running(9, 0, 1, "running")), inFlight: []int{3, 3, 2, 2, 1}}
	p.result = api.RolloutResult{Name: "kata", Selected: 10, Counts: api.Counts{Succeeded: 10}}
	var out bytes.Buffer
	a := &app{ctx: context.Background(), tc: p, out: &out}
	a.cmd = startCommand(a)
	require.NoError(t, a.follow("rollout-kata"))
	require.Equal(t, 1, p.asked, "one query within the interval")
	text := out.String()
	require.Contains(t, text, "2/10 done, 0 failed, 3 in flight (running)")
	require.Contains(t, text, "2/10 done, 0 failed, 2 in flight (running)", "the describe updates the nodes in flight")
	require.Contains(t, text, "2/10 done, 0 failed, 1 in flight (running)")
}

// watched is a running rollout for status -w: described as running, with no node workflow
// listed, moving through its statuses.
type watched struct{ *progressing }

func (w watched) DescribeWorkflow(context.Context, string, string) (*client.WorkflowExecutionDescription, error) {
	return &client.WorkflowExecutionDescription{WorkflowExecutionMetadata: client.WorkflowExecutionMetadata{Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil
}

func (w watched) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

// status -w shows the status, then follows the rollout to its end (before: no -w).
func TestStatusWatchFollowsToTheEnd(t *testing.T) {
	defer func(d, q time.Duration) { followInterval, followQueryInterval = d, q }(followInterval, followQueryInterval)
	followInterval, followQueryInterval = 5*time.Millisecond, 0
	p := newProgressing(running(0, 0, 2, "running"), running(4, 0, 2, "running"), running(10, 0, 0, "running"))
	p.result = api.RolloutResult{Name: "kata", Selected: 10, Counts: api.Counts{Succeeded: 10}}
	a, out := commandApp(t, watched{p}, statusCommand, "kata", "-w")
	require.NoError(t, a.showStatus())
	text := out.String()
	require.Contains(t, text, "PHASE")
	require.Contains(t, text, "watching rollout-kata until it ends")
	require.Contains(t, text, "4/10 done, 0 failed, 2 in flight (running)")
	require.Contains(t, text, "rollout kata: 10/10 nodes succeeded, 0 failed")
}

// The end line of a rollout that skipped nodes says so: a re-run over done nodes succeeds on
// none, which alone reads like a rollout that did nothing.
func TestSummaryLineNamesSkippedNodes(t *testing.T) {
	res := api.RolloutResult{Name: "demo", Selected: 50, Counts: api.Counts{Succeeded: 50}}
	require.Equal(t, "rollout demo: 50/50 nodes succeeded, 0 failed", summaryLine(res))
	res.Counts = api.Counts{Succeeded: 2, Failed: 1, Skipped: 47}
	require.Equal(t, "rollout demo: 2/50 nodes succeeded, 1 failed, 47 skipped (already done at this template, a taint, or blocking Pods)", summaryLine(res))
}

// start --wait on a rollout that was aborted meanwhile says Canceled, not Failed, with what ran.
func TestWaitOnAnAbortedRolloutSaysCanceled(t *testing.T) {
	a, out := commandApp(t, nil, startCommand, "-o", "json")
	res := api.RolloutResult{Name: "demo", Selected: 5, Counts: api.Counts{Succeeded: 2, Aborted: 3}}
	err := a.ended("rollout-demo", res, temporal.NewCanceledError(), false)
	var re runError
	require.ErrorAs(t, err, &re, "exit 1: it did not finish")
	var view rolloutView
	require.NoError(t, json.Unmarshal(out.Bytes(), &view), out.String())
	require.Equal(t, "Canceled", view.Status)
	require.Equal(t, 3, view.Counts.Aborted)
}

// aborting is a rollout being aborted: cancelled, it ends at once; its node workflows stop
// one after another.
type aborting struct {
	client.Client
	mu        sync.Mutex
	running   []int64 // what each count of running node workflows answers
	cancelled bool
}

// ListWorkflow finds no run a schedule started.
func (c *aborting) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

func (c *aborting) WorkflowService() workflowservice.WorkflowServiceClient {
	return cancelService{c: c}
}

type cancelService struct {
	workflowservice.WorkflowServiceClient
	c *aborting
}

func (s cancelService) RequestCancelWorkflowExecution(context.Context, *workflowservice.RequestCancelWorkflowExecutionRequest, ...grpc.CallOption) (*workflowservice.RequestCancelWorkflowExecutionResponse, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.c.cancelled = true
	return &workflowservice.RequestCancelWorkflowExecutionResponse{}, nil
}

func (c *aborting) CountWorkflow(context.Context, *workflowservice.CountWorkflowExecutionsRequest) (*workflowservice.CountWorkflowExecutionsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.running[0]
	if len(c.running) > 1 {
		c.running = c.running[1:]
	}
	return &workflowservice.CountWorkflowExecutionsResponse{Count: n}, nil
}

func (c *aborting) GetWorkflow(context.Context, string, string) client.WorkflowRun {
	return cancelledRun{}
}

type cancelledRun struct{ client.WorkflowRun }

func (cancelledRun) Get(context.Context, any) error {
	return temporal.NewCanceledError()
}

// abort --wait returns only once none of the rollout's node workflows runs (before: abort
// returned at once, before anything had stopped).
func TestAbortWaitReturnsOnceEveryNodeStopped(t *testing.T) {
	defer func(d time.Duration) { abortPoll = d }(abortPoll)
	abortPoll = 5 * time.Millisecond
	c := &aborting{running: []int64{3, 3, 2, 0}}
	a, out := commandApp(t, c, abortCommand, "kata", "--wait")
	require.NoError(t, a.abort())
	require.True(t, c.cancelled)
	require.Equal(t, []int64{0}, c.running, "counted until none ran")
	text := out.String()
	require.Contains(t, text, "waiting: 3 node(s) still deleting their Jobs")
	require.Contains(t, text, "waiting: 2 node(s)")
	require.Contains(t, text, "aborted rollout-kata after")
}
