package main

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"
)

// TestSecurityModelNamesEveryTemporalAPIToRestrict: docs/security.md's first layer lists every
// Temporal API through which someone other than the platform team could start, steer, end, rewrite or
// impersonate a rollout, each by its real name in the Temporal API.
func TestSecurityModelNamesEveryTemporalAPIToRestrict(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	start := strings.Index(string(doc), "**1. Temporal decides")
	require.NotEqual(t, -1, start)
	end := strings.Index(string(doc)[start:], "**2. ")
	require.NotEqual(t, -1, end)
	layer := string(doc)[start : start+end]

	apis := map[string]bool{}
	svc := reflect.TypeFor[workflowservice.WorkflowServiceClient]()
	for i := range svc.NumMethod() {
		apis[svc.Method(i).Name] = true
	}
	for _, name := range []string{
		// start
		"StartWorkflowExecution", "SignalWithStartWorkflowExecution", "ExecuteMultiOperation", "CreateSchedule", "UpdateSchedule", "PatchSchedule",
		// steer
		"SignalWorkflowExecution", "UpdateWorkflowExecution",
		// end, rewrite
		"RequestCancelWorkflowExecution", "TerminateWorkflowExecution", "ResetWorkflowExecution", "DeleteWorkflowExecution", "StartBatchOperation",
		// impersonate the worker
		"PollWorkflowTaskQueue", "PollActivityTaskQueue", "RespondActivityTaskCompletedById", "RespondActivityTaskFailedById",
	} {
		require.True(t, apis[name], "%s is a Temporal API", name)
		require.Contains(t, layer, "`"+name+"`", "docs/security.md names %s", name)
	}
}
