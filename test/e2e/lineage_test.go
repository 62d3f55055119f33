//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/workflows"
)

// rogueParent is a workflow of someone else's, on a task queue of their own, that starts a
// node workflow on noderollout's queue under the node's own workflow ID: what anyone allowed
// to run a worker in the namespace could do to skip the Rollout's cap, budget and pacing.
func rogueParent(ctx workflow.Context, taskQueue string, in workflows.NodeRolloutInput) error {
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: api.NodeWorkflowID(in.Node),
		TaskQueue:  taskQueue,
	})
	return workflow.ExecuteChildWorkflow(ctx, api.NodeRolloutV3Workflow, in).Get(ctx, nil)
}

// A node workflow whose parent is not a Rollout writes nothing: its Job is refused by the
// worker, which asks Temporal who started it (row 7 of the seams issue).
func TestSeamsANodeWorkflowOfARogueParentCreatesNoJob(t *testing.T) {
	f := NewFleet(t, 1)
	rogueQueue := "rogue-" + rand.String(6)
	w := worker.New(stack.Temporal, rogueQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(rogueParent, workflow.RegisterOptions{Name: "RogueParent"})
	require.NoError(t, w.Start())
	t.Cleanup(w.Stop)

	template := JobTemplate(time.Second, nil)
	in := workflows.NodeRolloutInput{Rollout: "rogue", Namespace: f.Namespace, Node: f.Nodes[0], Template: template,
		TemplateHash: jobspec.TemplateHash(template), JobTimeoutSeconds: 120, JobTTLSeconds: 60, KeepJobs: api.KeepAlways, WatchSeconds: 20}
	ctx := context.Background()
	run, err := stack.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "rogue-" + f.ID, TaskQueue: rogueQueue}, "RogueParent", suiteQueue, in)
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, err, &appErr, "the node fails: %v", err)
	require.Equal(t, api.ErrNodeFailed, appErr.Type(), "%v", err)
	require.Contains(t, appErr.Message(), api.ErrNotStartedByARollout)
	require.Contains(t, appErr.Message(), "is a RogueParent, not a Rollout")
	jobs, err := stack.Kube.BatchV1().Jobs(f.Namespace).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, jobs.Items, "no Job was created on the node")
}
