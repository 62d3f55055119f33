package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
	"go.temporal.io/sdk/testsuite"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The test activity environment calls every activity from this workflow.
const (
	testCallerType = "0" // what the environment calls a type it was not given
	testCallerID   = "default-test-workflow-id"
	testCallerRun  = "default-test-run-id"
)

// lineageOf describes the caller (its parent) and the parent (its type, status, template, and
// the caller among its pending children) as Temporal would.
func lineageOf(parent *commonpb.WorkflowExecution, parentType string, status enumspb.WorkflowExecutionStatus, hash string, stepHashes ...string) *mocks.Client {
	tc := &mocks.Client{}
	tc.On("DescribeWorkflow", mock.Anything, testCallerID, testCallerRun).Return(&client.WorkflowExecutionDescription{
		RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{ParentExecution: parent}}}, nil).Maybe()
	if parent != nil {
		info := &workflowpb.WorkflowExecutionInfo{Type: &commonpb.WorkflowType{Name: parentType}, Status: status,
			Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{"templateHash": {Data: []byte(`"` + hash + `"`)}}}}
		if len(stepHashes) > 0 {
			steps, _ := json.Marshal(stepHashes)
			info.Memo.Fields["stepTemplateHashes"] = &commonpb.Payload{Data: steps}
		}
		pending := []*workflowpb.PendingChildExecutionInfo{{WorkflowId: testCallerID, RunId: testCallerRun}}
		tc.On("DescribeWorkflow", mock.Anything, parent.GetWorkflowId(), parent.GetRunId()).Return(&client.WorkflowExecutionDescription{
			RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info, PendingChildren: pending}}, nil).Maybe()
	}
	return tc
}

// continuedInto adds the rollout's current run, of the given type and status, to tc: the run
// its parent continued as new into.
func continuedInto(tc *mocks.Client, rollout *commonpb.WorkflowExecution, currentType string, status enumspb.WorkflowExecutionStatus) *mocks.Client {
	tc.On("DescribeWorkflow", mock.Anything, rollout.GetWorkflowId(), "").Return(&client.WorkflowExecutionDescription{
		RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
			Type: &commonpb.WorkflowType{Name: currentType}, Status: status}}}, nil).Maybe()
	return tc
}

// Only a node workflow that a running Rollout started (or handed over when it continued as new,
// its rollout still running), with the template that Rollout prepared, gets to create a Job;
// anything else is refused before any write, and a verified node run is not looked up again.
func TestCreateJobOnlyForANodeOfARunningRollout(t *testing.T) {
	rollout := &commonpb.WorkflowExecution{WorkflowId: "rollout-kata", RunId: "r1"}
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	continued := enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	req := testRequest("node-a")
	for name, tc := range map[string]struct {
		client   *mocks.Client
		types    []string
		refusal  string
		template string
		lookups  int // DescribeWorkflow calls of a node let through: 2 unless said
	}{
		"no parent":            {client: lineageOf(nil, "", running, ""), refusal: "it has no parent"},
		"not a node workflow":  {client: lineageOf(rollout, "Rollout", running, req.TemplateHash), types: []string{"NodeRolloutV3"}, refusal: "not a node workflow"},
		"parent not a Rollout": {client: lineageOf(rollout, "Rogue", running, req.TemplateHash), refusal: "is a Rogue, not a Rollout"},
		"parent closed":        {client: lineageOf(rollout, "Rollout", enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, req.TemplateHash), refusal: "is Terminated"},
		"another template":     {client: lineageOf(rollout, "Rollout", running, "0000"), refusal: "its rollout prepared 0000"},
		"a rollout's node":     {client: lineageOf(rollout, "Rollout", running, req.TemplateHash)},
		"handed over, rollout ended": {client: continuedInto(lineageOf(rollout, "Rollout", continued, req.TemplateHash), rollout, "Rollout", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED),
			refusal: "continued as new and its rollout is Canceled"},
		"handed over, rollout runs": {client: continuedInto(lineageOf(rollout, "Rollout", continued, req.TemplateHash), rollout, "Rollout", running), lookups: 3},
		"handed over, another template": {client: continuedInto(lineageOf(rollout, "Rollout", continued, "0000"), rollout, "Rollout", running),
			refusal: "its rollout prepared 0000"},
	} {
		t.Run(name, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil), testNS("jobs"))
			types := tc.types
			if types == nil {
				types = []string{testCallerType}
			}
			a.Lineage = &Lineage{Temporal: tc.client, RolloutType: "Rollout", NodeTypes: types}
			env := newEnv(a)
			_, err := env.ExecuteActivity(a.CreateJob, req)
			if tc.refusal == "" {
				require.NoError(t, err)
				_, err = env.ExecuteActivity(a.CreateJob, req) // the retry adopts; no second look-up
				require.NoError(t, err)
				tc.client.AssertNumberOfCalls(t, "DescribeWorkflow", max(2, tc.lookups))
				return
			}
			appErr := requireAppError(t, err, api.ErrNotStartedByARollout, true)
			require.Contains(t, appErr.Error(), tc.refusal)
			require.Zero(t, countActions(cs, "create", "jobs"), "nothing written")
		})
	}
}

// A node hands its local activities its parent as its own history records it: the check then
// describes only the rollout, never the node. The rollout still decides: a parent the node
// names that is no Rollout is refused as before. Over the
// wire the parent is never sent, so a scheduled activity describes its caller.
func TestCreateJobInALocalActivityTakesTheParentFromItsNode(t *testing.T) {
	rollout := &commonpb.WorkflowExecution{WorkflowId: "rollout-kata", RunId: "r1"}
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	req := testRequest("node-a")
	req.Parent = &WorkflowRun{ID: rollout.WorkflowId, RunID: rollout.RunId}
	for name, tc := range map[string]struct {
		client  *mocks.Client
		local   bool
		refusal string
		lookups int
	}{
		"local: the rollout alone is described": {client: lineageOf(rollout, "Rollout", running, req.TemplateHash), local: true, lookups: 1},
		"local: a parent that is no Rollout":    {client: lineageOf(rollout, "Rogue", running, req.TemplateHash), local: true, refusal: "is a Rogue, not a Rollout"},
		"scheduled: the caller is described":    {client: lineageOf(rollout, "Rollout", running, req.TemplateHash), lookups: 2},
	} {
		t.Run(name, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil), testNS("jobs"))
			// The environment names a local activity's caller type so.
			a.Lineage = &Lineage{Temporal: tc.client, RolloutType: "Rollout", NodeTypes: []string{testCallerType, "workflow-type-not-specified"}}
			env := newEnv(a)
			var err error
			if tc.local {
				_, err = env.ExecuteLocalActivity(a.CreateJob, req)
			} else {
				_, err = env.ExecuteActivity(a.CreateJob, req)
			}
			if tc.refusal != "" {
				appErr := requireAppError(t, err, api.ErrNotStartedByARollout, true)
				require.Contains(t, appErr.Error(), tc.refusal)
				require.Zero(t, countActions(cs, "create", "jobs"), "nothing written")
				return
			}
			require.NoError(t, err)
			tc.client.AssertNumberOfCalls(t, "DescribeWorkflow", tc.lookups)
			if tc.local {
				tc.client.AssertNotCalled(t, "DescribeWorkflow", mock.Anything, testCallerID, testCallerRun)
			}
		})
	}
}

// A parent in hand counts only in a local activity, whose input no other process writes: an
// activity scheduled over the wire describes its caller whatever it was given, and a caller
// with no parent is refused though the parent it names would list it.
func TestLineageIgnoresAParentHandedToAScheduledActivity(t *testing.T) {
	rollout := &commonpb.WorkflowExecution{WorkflowId: "rollout-kata", RunId: "r1"}
	tc := lineageOf(nil, "", enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "")
	tc.On("DescribeWorkflow", mock.Anything, rollout.WorkflowId, rollout.RunId).Return(&client.WorkflowExecutionDescription{
		RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
			WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Type: &commonpb.WorkflowType{Name: "Rollout"}, Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
			PendingChildren:       []*workflowpb.PendingChildExecutionInfo{{WorkflowId: testCallerID, RunId: testCallerRun}}}}, nil).Maybe()
	l := &Lineage{Temporal: tc, RolloutType: "Rollout", NodeTypes: []string{testCallerType}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(func(ctx context.Context) error {
		return l.checkJob(ctx, "", &WorkflowRun{ID: rollout.WorkflowId, RunID: rollout.RunId})
	}, activity.RegisterOptions{Name: "ForgedParent"})
	_, err := env.ExecuteActivity("ForgedParent")
	appErr := requireAppError(t, err, api.ErrNotStartedByARollout, true)
	require.Contains(t, appErr.Error(), "it has no parent")
}

// rolloutDescribes answers the describes of rollout run r1 of "kata", n of them, with the given
// status; each lists a node of its own among the rollout's pending children, which no check
// needs.
func rolloutDescribes(status enumspb.WorkflowExecutionStatus, n int) *mocks.Client {
	tc := &mocks.Client{}
	for i := range n {
		pending := []*workflowpb.PendingChildExecutionInfo{{WorkflowId: fmt.Sprint("node-", i), RunId: fmt.Sprint("run-", i)}}
		tc.On("DescribeWorkflow", mock.Anything, "rollout-kata", "r1").Return(&client.WorkflowExecutionDescription{
			RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
				WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Type: &commonpb.WorkflowType{Name: "Rollout"}, Status: status},
				PendingChildren:       pending}}, nil).Once()
	}
	return tc
}

// One describe of a rollout run answers the checks of all its nodes while it is fresh, those
// started after it too (the run was running when it started them, later than the read): no
// describe here lists the checking node. Past rolloutViewAge the next check reads again.
func TestRolloutViewsShareADescribeAmongTheRunsNodes(t *testing.T) {
	tc := rolloutDescribes(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, 2)
	clk := &clock{now: t0}
	_, a := newCluster(testNode("node-a", nil), testNS("jobs"))
	a.Lineage = &Lineage{Temporal: tc, RolloutType: "Rollout", NodeTypes: []string{testCallerType, "workflow-type-not-specified"}, Clock: clk.Now}
	req := testRequest("node-a")
	req.Parent = &WorkflowRun{ID: "rollout-kata", RunID: "r1"}
	check := func() {
		t.Helper()
		a.Lineage.verified.Clear() // as if another node run asked: the test environment has one
		_, err := newEnv(a).ExecuteLocalActivity(a.CreateJob, req)
		require.NoError(t, err)
	}

	check()
	clk.Advance(time.Second)
	check()
	clk.Advance(rolloutViewAge - time.Second)
	check()
	tc.AssertNumberOfCalls(t, "DescribeWorkflow", 1)
	clk.Advance(time.Second)
	check()
	tc.AssertNumberOfCalls(t, "DescribeWorkflow", 2)
}

// A view of a rollout run that has ended answers for any node while it is fresh: the check
// refuses on it.
func TestRolloutViewsOfAnEndedRolloutAnswerEveryNode(t *testing.T) {
	tc := rolloutDescribes(enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, 1)
	l := &Lineage{Temporal: tc, RolloutType: "Rollout"}
	kata := WorkflowRun{ID: "rollout-kata", RunID: "r1"}
	for range 3 {
		v, err := l.rollouts.view(t.Context(), l, kata)
		require.NoError(t, err)
		require.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, v.status)
	}
	tc.AssertNumberOfCalls(t, "DescribeWorkflow", 1)
}

// Nodes that check while a describe of their rollout is in flight wait for it, and it answers
// every one: one describe for fifty nodes.
func TestRolloutViewsJoinTheDescribeInFlight(t *testing.T) {
	const nodes = 50
	// The first describe returns once every other node waits for it; a second describe (a node
	// that did not wait) lets it return too, so a failing check fails rather than hangs.
	entered, released, waiting := make(chan struct{}), make(chan struct{}), 0
	first := sync.OnceFunc(func() { close(entered) })
	release := sync.OnceFunc(func() { close(released) })
	tc := &mocks.Client{}
	tc.On("DescribeWorkflow", mock.Anything, "rollout-kata", "r1").Run(func(mock.Arguments) {
		select {
		case <-entered: // not the first
			release()
		default:
			first()
			<-released
		}
	}).Return(&client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Type: &commonpb.WorkflowType{Name: "Rollout"}, Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}}, nil)
	l := &Lineage{Temporal: tc, RolloutType: "Rollout"}
	var mu sync.Mutex
	l.rollouts.onWait = func() {
		mu.Lock()
		defer mu.Unlock()
		if waiting++; waiting == nodes-1 {
			release()
		}
	}
	kata := WorkflowRun{ID: "rollout-kata", RunID: "r1"}
	check := func() {
		v, err := l.rollouts.view(t.Context(), l, kata)
		assert.NoError(t, err)
		assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, v.status)
	}
	var wg sync.WaitGroup
	wg.Go(check)
	<-entered
	for i := 1; i < nodes; i++ {
		wg.Go(check)
	}
	wg.Wait()
	tc.AssertNumberOfCalls(t, "DescribeWorkflow", 1)
}

// A Rollout records the failure of a node whose workflow was terminated itself, in a local
// activity (which runs in this worker, so its caller is this worker's Rollout code). The same
// write scheduled over the wire, or one that names a Job, is refused as before.
func TestRolloutRecordsATerminatedNodeOnlyInALocalActivity(t *testing.T) {
	in := FinalizeInput{Rollout: "kata", Node: "node-a", TemplateHash: testHash,
		End: JobEnd{Outcome: api.OutcomeFailed, Reason: api.ReasonNodeWorkflowTerminated}}
	withJob := in
	withJob.Job = &JobRef{Namespace: testNamespace, Name: "kata-node-a-x"}
	// The environment names a local activity's caller workflow-type-not-specified, a scheduled
	// activity's testCallerType: each case makes its caller the Rollout.
	for name, tc := range map[string]struct {
		local   bool
		in      FinalizeInput
		refused bool
	}{
		"local, no Job":     {local: true, in: in},
		"scheduled, no Job": {in: in, refused: true},
		"local, a Job":      {local: true, in: withJob, refused: true},
	} {
		t.Run(name, func(t *testing.T) {
			cs, a := newCluster(testNode("node-a", nil), testNS(testNamespace))
			rolloutType := testCallerType
			if tc.local {
				rolloutType = "workflow-type-not-specified"
			}
			a.Lineage = &Lineage{Temporal: &mocks.Client{}, RolloutType: rolloutType, NodeTypes: []string{"NodeRolloutV5"}}
			env := newEnv(a)
			var err error
			if tc.local {
				_, err = env.ExecuteLocalActivity(a.FinalizeJob, tc.in)
			} else {
				_, err = env.ExecuteActivity(a.FinalizeJob, tc.in)
			}
			node, getErr := cs.CoreV1().Nodes().Get(t.Context(), "node-a", metav1.GetOptions{})
			require.NoError(t, getErr)
			if tc.refused {
				appErr := requireAppError(t, err, api.ErrNotStartedByARollout, true)
				require.Contains(t, appErr.Error(), "not a node workflow")
				require.NotContains(t, node.Annotations, jobspec.NodeMarkerKey("kata"), "nothing written")
				return
			}
			require.NoError(t, err)
			require.Equal(t, jobspec.NodeMarker(testHash, "failed"), node.Annotations[jobspec.NodeMarkerKey("kata")])
		})
	}
}
