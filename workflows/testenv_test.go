package workflows

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// newTestEnv is the one environment of the workflow tests: every workflow a worker runs (the
// workflows of the cluster, OnCluster.Register, and FleetRollout), childOfARollout to run a
// node as a Rollout's child, and the activities, whose calls each test mocks (a call without a
// mock fails the test). Its deadlock detector tolerates a starved CPU: the SDK's 1 s default
// fails a workflow task that a loaded machine merely descheduled ("deadlock detected"), which
// none of these tests is about. A test registers only its own harness workflows; ts may be nil
// (a suite of its own).
func newTestEnv(ts *testsuite.WorkflowTestSuite, cluster ...api.Cluster) (*testsuite.TestWorkflowEnvironment, *activities.Activities) {
	if ts == nil {
		ts = &testsuite.WorkflowTestSuite{}
	}
	ts.SetLogger(quietLogger)
	env := ts.NewTestWorkflowEnvironment()
	intercept(env)
	var c api.Cluster
	if len(cluster) > 0 {
		c = cluster[0]
	}
	OnCluster{c}.Register(env)
	env.RegisterWorkflowWithOptions(FleetRollout, workflow.RegisterOptions{Name: api.FleetRolloutWorkflow})
	env.RegisterWorkflowWithOptions(asChildOfARollout, workflow.RegisterOptions{Name: childOfARollout})
	a := &activities.Activities{}
	env.RegisterActivity(a)
	env.RegisterActivity(&activities.Coordination{})
	return env, a
}

// quietLogger keeps the environments' warnings and errors and drops their debug and info
// lines: the model alone ran 92 MB of them, and a test whose activity panics on every retry
// wrote gigabytes, which go test holds in memory for a package's summary until the machine
// runs out.
var quietLogger = log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))

// intercept gives the environment's worker these interceptors (and newTestEnv's deadlock
// timeout).
func intercept(env *testsuite.TestWorkflowEnvironment, interceptors ...interceptor.WorkerInterceptor) {
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: 30 * time.Second, Interceptors: interceptors})
}

// listsNamedNodes mocks the template's preparation and a listing that returns the nodes a
// request names, as a cluster where every named node exists.
func listsNamedNodes(env *testsuite.TestWorkflowEnvironment, a *activities.Activities) {
	env.OnActivity(a.PrepareTemplate, mock.Anything, mock.Anything).Return(activities.PreparedTemplate{Hash: "h"}, nil).Maybe()
	env.OnActivity(a.ListNodes, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.ListNodesInput) (activities.ListNodesResult, error) {
			return activities.ListNodesResult{Nodes: in.Names, Total: len(in.Names)}, nil
		}).Maybe()
}

// childOfARollout runs a node workflow the way a Rollout does: as its child, under the node's
// workflow ID. Node tests start it rather than the node workflow itself, which refuses to run
// without such a parent (checkLineage).
const childOfARollout = "child-of-a-rollout"

func asChildOfARollout(ctx workflow.Context, nodeWorkflow string, in NodeRolloutInput) (api.NodeResult, error) {
	var res api.NodeResult
	err := workflow.ExecuteChildWorkflow(nodeChildOptions(ctx, api.NodeWorkflowID(in.Node), "rollout "+in.Rollout, false), nodeWorkflow, in).Get(ctx, &res)
	return res, err
}

// childNode is the node a node workflow (or a test's stand-in for one) runs for: its input
// names it, or, for a NodeRolloutV5, its workflow ID in whichever cluster.
func childNode(ctx workflow.Context, in NodeRolloutInput) string {
	if in.Node != "" {
		return in.Node
	}
	id := strings.TrimPrefix(workflow.GetInfo(ctx).WorkflowExecution.ID, api.NodeIDPrefix)
	if _, node, ok := strings.Cut(id, ":"); ok {
		return node
	}
	return id
}

// jobsOutlastTheWatch makes every node's local watch see its Job still running, so that the
// test's WaitJob mock decides how each Job ends (node_test.go tests the watch itself). It
// pins parents to NodeRolloutV2 children, whose create, watch and finalize are the separate
// activities these tests mock one by one; NodeRolloutV3 runs them as one (RunJob), which
// node_test.go tests.
func jobsOutlastTheWatch(env *testsuite.TestWorkflowEnvironment) {
	var a *activities.Activities
	env.OnActivity(a.WatchJob, mock.Anything, mock.Anything).Return(activities.JobWatch{Running: true}, nil).Maybe()
	env.OnGetVersion(versionNodeV2, workflow.DefaultVersion, 4).Return(workflow.Version(1)).Maybe()
}

// executeNodeAsChild runs the node workflow fn (registered as name) as a Rollout's child.
func executeNodeAsChild(env *testsuite.TestWorkflowEnvironment, fn any, name string, in NodeRolloutInput) {
	env.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: name, DisableAlreadyRegisteredCheck: true})
	env.ExecuteWorkflow(childOfARollout, name, in)
}

// mustSettings is the request's settings; the request must be valid.
func mustSettings(t *testing.T, req api.RolloutRequest) api.Settings {
	t.Helper()
	require.Empty(t, req.Problems())
	return req.Settings()
}

// outbound intercepts the outbound calls of the workflows of the types given (every workflow
// when none), with the outbound interceptor wrap makes around the next one: the worker and
// inbound interceptors every recording interceptor of these tests needs, written once.
func outbound(wrap func(next interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor, types ...string) interceptor.WorkerInterceptor {
	return &outboundInterceptor{wrap: wrap, types: types}
}

type outboundInterceptor struct {
	interceptor.WorkerInterceptorBase
	wrap  func(interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor
	types []string
}

func (o *outboundInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if len(o.types) > 0 && !slices.Contains(o.types, workflow.GetInfo(ctx).WorkflowType.Name) {
		return next
	}
	return &outboundInit{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, wrap: o.wrap}
}

type outboundInit struct {
	interceptor.WorkflowInboundInterceptorBase
	wrap func(interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor
}

func (i *outboundInit) Init(next interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(i.wrap(next))
}

// outboundSeen shows each activity and each child workflow a workflow starts to its hooks
// (either may be nil) before passing it on: the recorders of these tests look only, and this
// is their outbound interceptor, written once.
type outboundSeen struct {
	interceptor.WorkflowOutboundInterceptorBase
	activity func(ctx workflow.Context, activityType string)
	child    func(ctx workflow.Context)
}

// interceptor sees the outbound calls of every workflow, each through its own copy of o.
func (o outboundSeen) interceptor() interceptor.WorkerInterceptor {
	return outbound(func(next interceptor.WorkflowOutboundInterceptor) interceptor.WorkflowOutboundInterceptor {
		seen := o
		seen.Next = next
		return &seen
	})
}

func (o *outboundSeen) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if o.activity != nil {
		o.activity(ctx, activityType)
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *outboundSeen) ExecuteChildWorkflow(ctx workflow.Context, childType string, args ...any) workflow.ChildWorkflowFuture {
	if o.child != nil {
		o.child(ctx)
	}
	return o.Next.ExecuteChildWorkflow(ctx, childType, args...)
}

// requireNodeFailed requires that the node workflow failed as a node that did not succeed.
func requireNodeFailed(t *testing.T, env *testsuite.TestWorkflowEnvironment) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &appErr)
	require.Equal(t, api.ErrNodeFailed, appErr.Type())
}

// nodeFailure requires that the node workflow failed with an ApplicationError and returns the
// NodeResult it carries, and the error for its message.
func nodeFailure(t *testing.T, env *testsuite.TestWorkflowEnvironment) (api.NodeResult, *temporal.ApplicationError) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(env.GetWorkflowError(), &appErr), "%v", env.GetWorkflowError())
	var r api.NodeResult
	require.NoError(t, appErr.Details(&r))
	return r, appErr
}

// requireAppError requires that err is an ApplicationError of type wantType and returns it,
// for what a test checks further (its message, its details).
func requireAppError(t testing.TB, err error, wantType string) *temporal.ApplicationError {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "%v", err)
	require.Equal(t, wantType, appErr.Type())
	return appErr
}

// queryStatus reads the workflow's status query into status (an api.RolloutStatus, an
// api.FleetStatus).
func queryStatus(t testing.TB, env *testsuite.TestWorkflowEnvironment, status any) {
	t.Helper()
	v, err := env.QueryWorkflow(api.QueryStatus)
	require.NoError(t, err)
	require.NoError(t, v.Get(status))
}

// zFailsOthersRun mocks the node workflow: node z fails after a minute, every other node
// succeeds after others. zFailed is when z failed; starts, which rollouts started each node.
func zFailsOthersRun(env *testsuite.TestWorkflowEnvironment, others time.Duration) (zFailed func() time.Time, starts func(node string) []string) {
	var mu sync.Mutex
	var failedAt time.Time
	started := map[string][]string{}
	env.OnWorkflow(NodeRolloutV2, mock.Anything, mock.Anything).Return(func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
		mu.Lock()
		started[in.Node] = append(started[in.Node], in.Rollout)
		mu.Unlock()
		d := others
		if in.Node == "z" {
			d = time.Minute
		}
		if err := workflow.Sleep(ctx, d); err != nil {
			return api.NodeResult{}, err
		}
		if in.Node == "z" {
			mu.Lock()
			failedAt = workflow.Now(ctx)
			mu.Unlock()
			res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
			return res, temporal.NewNonRetryableApplicationError("failed", api.ErrNodeFailed, nil, res)
		}
		return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
	})
	zFailed = func() time.Time { mu.Lock(); defer mu.Unlock(); return failedAt }
	starts = func(node string) []string { mu.Lock(); defer mu.Unlock(); return started[node] }
	return zFailed, starts
}

// finalizedOnce expects one FinalizeJob of an input that match accepts: the node tests differ
// only in what the node finalizes (which Job, which end), so each says just that.
func finalizedOnce(env *testsuite.TestWorkflowEnvironment, a *activities.Activities, match func(activities.FinalizeInput) bool) {
	env.OnActivity(a.FinalizeJob, mock.Anything, mock.MatchedBy(match)).Return(activities.FinalizeResult{}, nil).Once()
}

// continuation is what a run that continued as new hands its next run: the request and the
// progress, decoded as the server would give them to the next run; ok is false when err is not
// a continue-as-new.
func continuation(t require.TestingT, err error) (next api.RolloutRequest, carried *api.Progress, ok bool) {
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		return next, nil, false
	}
	require.NoError(t, converterFromEnv().FromPayloads(can.Input, &next, &carried))
	return next, carried, true
}

// continuedAsNew requires that the run continued as new and returns what it handed over.
func continuedAsNew(t *testing.T, err error) (api.RolloutRequest, *api.Progress) {
	t.Helper()
	next, carried, ok := continuation(t, err)
	require.True(t, ok, "the run continues as new: %v", err)
	return next, carried
}

// childrenDrainAtContinueAsNew makes each run wait for its children before it continues as new
// (versionHandOverInFlight's default branch), for tests whose environment stubs the children:
// a stub does not outlive its environment to tell the next run when it ends, as the model's
// stand-ins do (model_test.go), so none may be handed over.
func childrenDrainAtContinueAsNew(env *testsuite.TestWorkflowEnvironment) {
	env.OnGetVersion(versionHandOverInFlight, workflow.DefaultVersion, 3).Return(workflow.DefaultVersion)
}
