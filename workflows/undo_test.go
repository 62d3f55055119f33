package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// undoRun is one maintained node with maintenance.onFailure undo over mocked activities that
// record each step; the undo Job is the one the undo rollout's name creates.
type undoRun struct {
	env      *testsuite.TestWorkflowEnvironment
	mu       sync.Mutex
	calls    []string
	outcome  map[string]api.Outcome // by Job name; succeeded when absent
	unhealth bool
	checkJob bool // the request has gates.checkJob; its Job is "check-job"
	undoReq  activities.JobRequest
	undoFin  activities.FinalizeInput
}

func newUndoRun(t *testing.T) *undoRun {
	env, a := newTestEnv(nil)
	r := &undoRun{env: env, outcome: map[string]api.Outcome{}}
	env.SetTestTimeout(time.Minute)
	env.OnActivity(a.CordonNode, mock.Anything, mock.Anything).Return(func(context.Context, activities.NodeInput) (activities.CordonResult, error) {
		r.step("cordon")
		return activities.CordonResult{WeCordoned: true}, nil
	})
	env.OnActivity(a.CreateJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.JobRequest) (activities.JobRef, error) {
		name := "job"
		if strings.HasPrefix(in.Rollout, api.UndoNamePrefix) {
			name = "undo-job"
			r.mu.Lock()
			r.undoReq = in
			r.mu.Unlock()
		}
		r.step("create " + name)
		return activities.JobRef{Namespace: in.Namespace, Name: name, UID: "u-" + name, Node: in.Node}, nil
	})
	env.OnActivity(a.WaitJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.WaitJobInput) (activities.JobEnd, error) {
		r.step("wait " + in.Job.Name)
		r.mu.Lock()
		defer r.mu.Unlock()
		if o, ok := r.outcome[in.Job.Name]; ok {
			return activities.JobEnd{Outcome: o, Reason: "BackoffLimitExceeded"}, nil
		}
		return activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}, nil
	})
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		if in.UndoOf != "" {
			r.mu.Lock()
			r.undoFin = in
			r.mu.Unlock()
		}
		r.step("finalize " + in.Rollout + " " + string(in.End.Outcome))
		return activities.FinalizeResult{}, nil
	})
	env.OnActivity(a.CheckNodeHealth, mock.Anything, mock.Anything).Return(func(context.Context, activities.HealthInput) error {
		r.step("health")
		if r.unhealth {
			return temporal.NewNonRetryableApplicationError("node node-a is not Ready", api.ErrUnhealthy, nil)
		}
		return nil
	})
	env.OnActivity(a.UncordonNode, mock.Anything, mock.Anything).Return(func(context.Context, activities.NodeInput) (activities.UncordonResult, error) {
		r.step("uncordon")
		return activities.UncordonResult{Uncordoned: true}, nil
	})
	return r
}

func (r *undoRun) step(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, s)
}

func (r *undoRun) run(t *testing.T) (api.NodeResult, error) {
	in := nodeInput()
	in.Maintenance = resolvedMaintenance(&api.Maintenance{Cordon: true, Health: &api.HealthGate{Timeout: "1m"}, OnFailure: api.OnFailureUndo})
	in.UndoTemplateHash = "undo-hash"
	in.RecordNodeEnd = true // as startChild sets it
	if r.checkJob {
		in.Maintenance.CheckJob = &api.NodeCheckJob{TimeoutSeconds: 60, TemplateHash: "check-hash"}
		var a *activities.Activities
		r.env.OnActivity(a.CreateStepJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.StepJobRequest) (activities.JobRef, error) {
			r.step("create check-job")
			return activities.JobRef{Namespace: in.Namespace, Name: "check-job", UID: "u-check", Node: in.Node}, nil
		})
		r.env.OnActivity(a.DeleteJob, mock.Anything, mock.Anything).Return(func(_ context.Context, job activities.JobRef) error {
			r.step("delete " + job.Name)
			return nil
		})
	}
	executeNodeAsChild(r.env, NodeRolloutV3, api.NodeRolloutV3Workflow, in)
	require.True(t, r.env.IsWorkflowCompleted())
	err := r.env.GetWorkflowError()
	var res api.NodeResult
	if err == nil {
		require.NoError(t, r.env.GetWorkflowResult(&res))
		return res, nil
	}
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.NoError(t, appErr.Details(&res))
	return res, err
}

// A node whose Job failed runs the undo Job (the undo template, under the undo rollout's
// name, marking the rollout's marker undone when it succeeds) while still cordoned, and is
// uncordoned once it succeeded; its outcome stays failed, with undone beside it.
func TestOnFailureUndoRunsTheUndoJobThenReleasesTheNode(t *testing.T) {
	r := newUndoRun(t)
	r.outcome["job"] = api.OutcomeFailed
	res, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, []string{"cordon", "create job", "wait job", "finalize demo failed",
		"create undo-job", "wait undo-job", "finalize undo-demo succeeded", "uncordon"}, r.calls)
	require.Equal(t, api.OutcomeFailed, res.Outcome)
	require.True(t, res.Undone)
	require.Empty(t, res.UndoFailed)
	require.Equal(t, "undo-job", res.UndoJob)
	require.Contains(t, err.Error(), "undone (Job undo-job)")
	require.Equal(t, "undo-hash", r.undoReq.TemplateHash)
	require.Equal(t, "demo", r.undoFin.UndoOf, "the undo's success turns the rollout's marker to undone")
}

// A node whose undo Job failed too stays cordoned, and its outcome says the undo failed.
func TestOnFailureUndoThatFailsKeepsTheNodeCordoned(t *testing.T) {
	r := newUndoRun(t)
	r.outcome["job"] = api.OutcomeFailed
	r.outcome["undo-job"] = api.OutcomeTimedOut
	res, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, []string{"cordon", "create job", "wait job", "finalize demo failed",
		"create undo-job", "wait undo-job", "finalize undo-demo timedOut"}, r.calls, "no uncordon")
	require.Equal(t, api.OutcomeFailed, res.Outcome)
	require.False(t, res.Undone)
	require.Equal(t, "timedOut: BackoffLimitExceeded", res.UndoFailed)
	require.Contains(t, err.Error(), "the undo failed too (timedOut: BackoffLimitExceeded): the node stays cordoned")
}

// A health gate that fails after the Job succeeded is undone too, once unhealthy is recorded.
func TestOnFailureUndoAfterTheHealthGateFailed(t *testing.T) {
	r := newUndoRun(t)
	r.unhealth = true
	res, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, []string{"cordon", "create job", "wait job", "finalize demo succeeded", "health", "finalize demo unhealthy",
		"create undo-job", "wait undo-job", "finalize undo-demo succeeded", "uncordon"}, r.calls)
	require.Equal(t, api.OutcomeUnhealthy, res.Outcome)
	require.True(t, res.Undone)
}

// A check Job (gates.checkJob) that fails is a gate that failed: the node is undone too.
func TestOnFailureUndoAfterTheCheckJobFailed(t *testing.T) {
	r := newUndoRun(t)
	r.checkJob = true
	r.outcome["check-job"] = api.OutcomeFailed
	res, err := r.run(t)
	require.Error(t, err)
	require.Equal(t, []string{"cordon", "create job", "wait job", "finalize demo succeeded", "health",
		"create check-job", "wait check-job", "delete check-job", "finalize demo checkFailed",
		"create undo-job", "wait undo-job", "finalize undo-demo succeeded", "uncordon"}, r.calls)
	require.Equal(t, api.OutcomeCheckFailed, res.Outcome)
	require.True(t, res.Undone)
}

// A node that succeeded runs no undo.
func TestOnFailureUndoLeavesASucceededNodeAlone(t *testing.T) {
	r := newUndoRun(t)
	res, err := r.run(t)
	require.NoError(t, err)
	require.Equal(t, []string{"cordon", "create job", "wait job", "finalize demo succeeded", "health", "uncordon", "finalize demo succeeded"}, r.calls)
	require.False(t, res.Undone)
}

// undoPlan is what the mocked PlanUndo answers: failed first, then reverse completion.
var undoPlan = []api.UndoNode{
	{Node: "n4", Outcome: api.OutcomeFailed, Template: "h2", Previous: "h1"},
	{Node: "n2", Outcome: api.OutcomeSucceeded, Template: "h2", Previous: "h1"},
	{Node: "n5", Outcome: api.OutcomeSucceeded, Template: "h2", Previous: "h1"},
	{Node: "n1", Outcome: api.OutcomeSucceeded, Template: "h2"},
	{Node: "n3", Outcome: api.OutcomeSucceeded, Template: "h2", Previous: "h1"},
}

// pagedListing lists named nodes in name order two at a time, as ListNodes pages through
// them by name (a page of two stands in for listPageSize).
func pagedListing(env *testsuite.TestWorkflowEnvironment, a *activities.Activities) {
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
		names := slices.Sorted(slices.Values(in.Names))
		i, _ := slices.BinarySearch(names, in.After)
		if i < len(names) && names[i] == in.After {
			i++
		}
		page := names[i:min(i+2, len(names))]
		res := activities.ListNodesResult{Nodes: page, Total: len(names), More: i+2 < len(names)}
		if res.More {
			res.Next = page[len(page)-1]
		}
		return res, nil
	})
}

// An undo (undoOf) starts its nodes in PlanUndo's order, whatever their names, across the
// listing's pages, and hands the undone rollout to each node.
func TestUndoRolloutRunsItsNodesInThePlannedOrder(t *testing.T) {
	env, a := newTestEnv(nil)
	env.SetTestTimeout(time.Minute)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "undo-hash"}, nil)
	var planned activities.UndoPlanInput
	env.OnActivity(a.PlanUndo, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.UndoPlanInput) ([]api.UndoNode, error) {
		planned = in
		return undoPlan, nil
	}).Once()
	pagedListing(env, a)
	var mu sync.Mutex
	var started []string
	env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		in.Node = childNode(ctx, in)
		mu.Lock()
		started = append(started, in.Node)
		mu.Unlock()
		require.Equal(t, "demo", in.UndoOf)
		require.Equal(t, api.UndoName("demo"), in.Rollout)
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, workflow.Sleep(ctx, time.Minute)
	})
	req := api.RolloutRequest{Name: api.UndoName("demo"), Namespace: "jobs", JobTemplate: sampleTemplate, Parallelism: 1, Rerun: true,
		UndoOf: &api.UndoOf{Rollout: "demo", To: "h1"}}
	require.Empty(t, req.Problems())
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, activities.UndoPlanInput{Rollout: "demo", To: "h1"}, planned)
	require.Equal(t, []string{"n4", "n2", "n5", "n1", "n3"}, started)
}

// The dry run of an undo lists the nodes in the order they would go back, with what each goes
// back from and to.
func TestUndoDryRunListsWhatEachNodeGoesBackTo(t *testing.T) {
	env, a := newTestEnv(nil)
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "undo-hash"}, nil)
	env.OnActivity(a.PlanUndo, mock.Anything, mock.Anything).Return(undoPlan, nil)
	pagedListing(env, a)
	req := api.RolloutRequest{Name: api.UndoName("demo"), Namespace: "jobs", JobTemplate: sampleTemplate, DryRun: true, Rerun: true,
		UndoOf: &api.UndoOf{Rollout: "demo"}}
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.NoError(t, env.GetWorkflowError())
	var res api.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	var order []string
	for _, p := range res.Planned {
		order = append(order, p.Node)
		require.NotNil(t, p.Undo, p.Node)
	}
	require.Equal(t, []string{"n4", "n2", "n5", "n1", "n3"}, order)
	require.Equal(t, "h1", res.Planned[0].Undo.Previous)
	require.Equal(t, api.OutcomeFailed, res.Planned[0].Undo.Outcome)
}

// A node of an undo rollout whose Job runs as one RunJob hands it the undone rollout, so the
// finalize inside RunJob marks that rollout's marker undone.
func TestUndoNodeInOneStepNamesTheUndoneRollout(t *testing.T) {
	env, a := newTestEnv(nil)
	var got activities.RunJobInput
	env.OnActivity(a.RunJob, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.RunJobInput) (activities.RunJobResult, error) {
		got = in
		return activities.RunJobResult{Job: activities.JobRef{Namespace: "jobs", Name: "j", Node: in.Job.Node}, Done: true,
			End: activities.JobEnd{Outcome: api.OutcomeSucceeded, Reason: "Completed"}}, nil
	})
	in := watchedInput()
	in.Rollout, in.UndoOf = api.UndoName("demo"), "demo"
	executeNodeAsChild(env, NodeRolloutV3, api.NodeRolloutV3Workflow, in)
	require.NoError(t, env.GetWorkflowError())
	require.Equal(t, "demo", got.UndoOf)
}

// An undo that continues as new carries its planned order in its request: the next run reads
// no marker again and starts the rest in the same order.
func TestUndoRolloutKeepsItsOrderAcrossContinueAsNew(t *testing.T) {
	undoEnv := func(started *[]string) (*testsuite.TestWorkflowEnvironment, *activities.Activities) {
		env, a := newTestEnv(nil)
		env.SetTestTimeout(time.Minute)
		childrenDrainAtContinueAsNew(env)
		env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "undo-hash"}, nil).Maybe()
		pagedListing(env, a)
		env.OnWorkflow(NodeRolloutV5, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			in.Node = childNode(ctx, in)
			*started = append(*started, in.Node)
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, workflow.Sleep(ctx, time.Minute)
		})
		return env, a
	}
	var first, second []string
	env, a := undoEnv(&first)
	env.OnActivity(a.PlanUndo, mock.Anything, mock.Anything).Return(undoPlan, nil).Once()
	req := api.RolloutRequest{Name: api.UndoName("demo"), Namespace: "jobs", JobTemplate: sampleTemplate, Parallelism: 1, Rerun: true,
		ContinueAsNewAfter: 2, UndoOf: &api.UndoOf{Rollout: "demo"}}
	env.ExecuteWorkflow(api.RolloutWorkflow, req)
	next, carried := continuedAsNew(t, env.GetWorkflowError())
	require.Equal(t, []string{"n4", "n2"}, first)
	require.Equal(t, []string{"n4", "n2", "n5", "n1", "n3"}, next.Nodes, "the plan travels in the request")

	// Later runs have no PlanUndo mock: a second read of the markers fails the test.
	for run := 2; ; run++ {
		require.Less(t, run, 6, "the undo ends")
		env, _ = undoEnv(&second)
		env.SetContinuedExecutionRunID(fmt.Sprintf("run-%d", run-1))
		env.ExecuteWorkflow(api.RolloutWorkflow, next, carried)
		handedNext, handed, ok := continuation(t, env.GetWorkflowError())
		if !ok {
			require.NoError(t, env.GetWorkflowError())
			break
		}
		next, carried = handedNext, handed
	}
	require.Equal(t, []string{"n5", "n1", "n3"}, second)
}
