package activities

import (
	"context"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"
)

func described(status enumspb.WorkflowExecutionStatus, parent *commonpb.WorkflowExecution) *client.WorkflowExecutionDescription {
	return &client.WorkflowExecutionDescription{RawResponse: &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: status, ParentExecution: parent}}}
}

// A slot is gone only when its rollout run is closed and no node workflow of that run still
// runs: a node still deleting the Job of a terminated rollout keeps its slot.
func TestGoneHoldersOnlyWhenRolloutAndItsNodeAreClosed(t *testing.T) {
	tc := &mocks.Client{}
	running, closed := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED
	run1 := &commonpb.WorkflowExecution{WorkflowId: "rollout-a", RunId: "r1"}
	other := &commonpb.WorkflowExecution{WorkflowId: "rollout-b", RunId: "r9"}
	tc.On("DescribeWorkflow", mock.Anything, "rollout-live", "r1").Return(described(running, nil), nil)
	tc.On("DescribeWorkflow", mock.Anything, "rollout-a", "r1").Return(described(closed, nil), nil)
	tc.On("DescribeWorkflow", mock.Anything, "node-draining", "").Return(described(running, run1), nil)
	tc.On("DescribeWorkflow", mock.Anything, "node-done", "").Return(described(enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, run1), nil)
	tc.On("DescribeWorkflow", mock.Anything, "node-taken-over", "").Return(described(running, other), nil)
	tc.On("DescribeWorkflow", mock.Anything, "node-never-started", "").Return(nil, serviceerror.NewNotFound("no such workflow"))
	c := &Coordination{Temporal: tc}
	held := []api.SlotHolder{
		{Rollout: "rollout-live", RolloutRun: "r1", Node: "node-x"},
		{Rollout: "rollout-a", RolloutRun: "r1", Node: "node-draining"},
		{Rollout: "rollout-a", RolloutRun: "r1", Node: "node-done"},
		{Rollout: "rollout-a", RolloutRun: "r1", Node: "node-taken-over"},
		{Rollout: "rollout-a", RolloutRun: "r1", Node: "node-never-started"},
	}
	gone, err := c.GoneHolders(context.Background(), held)
	require.NoError(t, err)
	require.Equal(t, held[2:], gone)
	tc.AssertExpectations(t)
}

// NodeHolders lists the running node workflows of the task queue with their parents (asking a
// workflow itself when the listing leaves its parent out), across pages.
func TestNodeHoldersListsRunningNodesWithTheirRollouts(t *testing.T) {
	tc := &mocks.Client{}
	rollout := &commonpb.WorkflowExecution{WorkflowId: "rollout-c1:a", RunId: "r1"}
	query := "TaskQueue = 'noderollout-c1' AND ExecutionStatus = 'Running' AND WorkflowType IN ('NodeRolloutV2', 'NodeRolloutV3')"
	tc.On("ListWorkflow", mock.Anything, mock.MatchedBy(func(r *workflowservice.ListWorkflowExecutionsRequest) bool {
		return r.Query == query && len(r.NextPageToken) == 0
	})).Return(&workflowservice.ListWorkflowExecutionsResponse{NextPageToken: []byte("p2"), Executions: []*workflowpb.WorkflowExecutionInfo{
		{Execution: &commonpb.WorkflowExecution{WorkflowId: "noderollout-node-c1:x", RunId: "x1"}, ParentExecution: rollout},
	}}, nil).Once()
	tc.On("ListWorkflow", mock.Anything, mock.MatchedBy(func(r *workflowservice.ListWorkflowExecutionsRequest) bool {
		return string(r.NextPageToken) == "p2"
	})).Return(&workflowservice.ListWorkflowExecutionsResponse{Executions: []*workflowpb.WorkflowExecutionInfo{
		{Execution: &commonpb.WorkflowExecution{WorkflowId: "noderollout-node-c1:y", RunId: "y1"}},
	}}, nil).Once()
	tc.On("DescribeWorkflow", mock.Anything, "noderollout-node-c1:y", "y1").Return(described(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout), nil)
	c := &Coordination{Temporal: tc}
	holders, err := c.NodeHolders(context.Background(), NodeHoldersInput{TaskQueue: "noderollout-c1", WorkflowTypes: []string{"NodeRolloutV2", "NodeRolloutV3"}})
	require.NoError(t, err)
	require.Equal(t, []api.SlotHolder{
		{Rollout: "rollout-c1:a", RolloutRun: "r1", Node: "noderollout-node-c1:x"},
		{Rollout: "rollout-c1:a", RolloutRun: "r1", Node: "noderollout-node-c1:y"},
	}, holders)
	tc.AssertExpectations(t)
}
