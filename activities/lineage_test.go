package activities

import (
	"encoding/json"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
)

// The test activity environment calls every activity from this workflow.
const (
	testCallerType = "0" // what the environment calls a type it was not given
	testCallerID   = "default-test-workflow-id"
	testCallerRun  = "default-test-run-id"
)

// lineageOf describes the caller (its parent) and the parent (its type, status, children and
// template) as Temporal would.
func lineageOf(parent *commonpb.WorkflowExecution, parentType string, status enumspb.WorkflowExecutionStatus, children []string, hash string, stepHashes ...string) *mocks.Client {
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
		var pending []*workflowpb.PendingChildExecutionInfo
		for _, c := range children {
			pending = append(pending, &workflowpb.PendingChildExecutionInfo{WorkflowId: testCallerID, RunId: c})
		}
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

// Only a node workflow that a running Rollout started, and lists among its children (or handed
// over when it continued as new, its rollout still running), with the template that Rollout
// prepared, gets to create a Job; anything else is refused before any
// write, and a verified node run is not looked up again.
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
		"no parent":              {client: lineageOf(nil, "", running, nil, ""), refusal: "it has no parent"},
		"not a node workflow":    {client: lineageOf(rollout, "Rollout", running, []string{testCallerRun}, req.TemplateHash), types: []string{"NodeRolloutV3"}, refusal: "not a node workflow"},
		"parent not a Rollout":   {client: lineageOf(rollout, "Rogue", running, []string{testCallerRun}, req.TemplateHash), refusal: "is a Rogue, not a Rollout"},
		"parent closed":          {client: lineageOf(rollout, "Rollout", enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, []string{testCallerRun}, req.TemplateHash), refusal: "is Terminated"},
		"not among its children": {client: lineageOf(rollout, "Rollout", running, []string{"another-run"}, req.TemplateHash), refusal: "does not list it"},
		"another template":       {client: lineageOf(rollout, "Rollout", running, []string{testCallerRun}, "0000"), refusal: "its rollout prepared 0000"},
		"a rollout's node":       {client: lineageOf(rollout, "Rollout", running, []string{testCallerRun}, req.TemplateHash)},
		"handed over, rollout ended": {client: continuedInto(lineageOf(rollout, "Rollout", continued, nil, req.TemplateHash), rollout, "Rollout", enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED),
			refusal: "continued as new and its rollout is Canceled"},
		"handed over, rollout runs": {client: continuedInto(lineageOf(rollout, "Rollout", continued, nil, req.TemplateHash), rollout, "Rollout", running), lookups: 3},
		"handed over, another template": {client: continuedInto(lineageOf(rollout, "Rollout", continued, nil, "0000"), rollout, "Rollout", running),
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
