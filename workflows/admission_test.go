package workflows

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/api"
)

// Every node start passes the one admission point (startRefusal) at the instant it starts,
// whatever it waited for before: these tests make a node wait for a slot of the cluster-wide
// budget while another rule turns against it, then grant the slot.

var slotCluster = api.Cluster{Name: "c1", Budget: 5}

// slotEnv runs a Rollout on slotCluster whose budget coordinator is the test: slot requests
// are recorded, and grants arrive when the test sends them. Nodes named fail-* fail.
type slotEnv struct {
	env     *testsuite.TestWorkflowEnvironment
	mu      sync.Mutex
	started map[string]time.Time
	took    time.Duration
}

func newSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env, a := newTestEnv(&ts, slotCluster)
	s := &slotEnv{env: env, started: map[string]time.Time{}, took: 10 * time.Minute}
	listsNamedNodes(env, a)
	s.env.OnSignalExternalWorkflow(mock.Anything, slotCluster.BudgetWorkflowID(), "", mock.Anything, mock.Anything).Return(nil).Maybe()
	s.env.OnWorkflow(NodeRolloutV3, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in NodeRolloutInput) (api.NodeResult, error) {
			s.mu.Lock()
			s.started[in.Node] = workflow.Now(ctx)
			s.mu.Unlock()
			if err := workflow.Sleep(ctx, s.took); err != nil {
				return api.NodeResult{}, err
			}
			if len(in.Node) > 5 && in.Node[:5] == "fail-" {
				res := api.NodeResult{Node: in.Node, Outcome: api.OutcomeFailed, Reason: "BackoffLimitExceeded"}
				return res, temporal.NewNonRetryableApplicationError("node failed", api.ErrNodeFailed, nil, res)
			}
			return api.NodeResult{Node: in.Node, Outcome: api.OutcomeSucceeded}, nil
		}).Maybe()
	return s
}

// grant hands node a slot after d.
func (s *slotEnv) grant(node string, d time.Duration) {
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(SignalSlotGranted, SlotGrant{Node: slotCluster.NodeWorkflowID(node)})
	}, d)
}

func (s *slotEnv) startedAt(node string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.started[node]
	return at, ok
}

// A node that waited for a cluster slot does not start once the failure budget was spent
// while it waited.
func TestNodeWaitingForAClusterSlotDoesNotStartOverTheFailureBudget(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("fail-a", time.Second)
	s.grant("b", 18*time.Minute)
	s.grant("c", 28*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"b", "c", "fail-a"}, JobTemplate: sampleTemplate, Parallelism: 3}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.ErrorContains(t, s.env.GetWorkflowError(), "over the budget")
	_, ok := s.startedAt("b")
	require.False(t, ok, "b started 8 minutes after fail-a spent the failure budget")
	_, ok = s.startedAt("c")
	require.False(t, ok, "c started 18 minutes after fail-a spent the failure budget")
}

// A second canary does not start after the first failed, however long it waited for a slot.
func TestCanaryWaitingForAClusterSlotDoesNotStartAfterACanaryFailed(t *testing.T) {
	s := newSlotEnv(t)
	s.grant("fail-a", time.Second)
	s.grant("b", 20*time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"b", "fail-a", "z"}, JobTemplate: sampleTemplate,
		Parallelism: 2, MaxFailures: "100%", Canary: &api.Canary{Nodes: []string{"b", "fail-a"}}}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.ErrorContains(t, s.env.GetWorkflowError(), "no other node was started")
	_, ok := s.startedAt("b")
	require.False(t, ok, "canary b started after canary fail-a failed")
}

// A node granted its slot after the maintenance window closed waits for the next opening.
func TestNodeGrantedAClusterSlotOutsideTheWindowWaitsForTheWindow(t *testing.T) {
	s := newSlotEnv(t)
	start := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	s.env.SetStartTime(start)
	s.grant("a", time.Minute)
	s.grant("b", time.Hour) // 11:00, the window was 10:00-10:30
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a", "b"}, JobTemplate: sampleTemplate, Parallelism: 2,
		MaintenanceWindow: &api.MaintenanceWindow{Start: "10:00", Duration: "30m"}}
	// The second grant is taken back and asked for again at the next opening: grant it then too.
	s.grant("b", 24*time.Hour+time.Minute)
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.NoError(t, s.env.GetWorkflowError())
	at, ok := s.startedAt("b")
	require.True(t, ok)
	open, _ := api.WindowState(*mustSettings(t, req).Pacing.Window, time.UTC, at)
	require.True(t, open, "b started at %s, outside the 10:00-10:30 window", at.Format(time.RFC3339))
}

// A node granted its slot while the rollout is paused waits for resume.
func TestNodeGrantedAClusterSlotWhilePausedWaitsForResume(t *testing.T) {
	s := newSlotEnv(t)
	start := s.env.Now()
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalPause, nil) }, 5*time.Minute)
	s.grant("a", 10*time.Minute)
	s.env.RegisterDelayedCallback(func() { s.env.SignalWorkflow(api.SignalResume, nil) }, time.Hour)
	s.grant("a", time.Hour+time.Minute)
	req := api.RolloutRequest{Name: "r", Namespace: "jobs", Nodes: []string{"a"}, JobTemplate: sampleTemplate}
	s.env.ExecuteWorkflow(api.RolloutWorkflow, req)
	require.True(t, s.env.IsWorkflowCompleted())
	require.NoError(t, s.env.GetWorkflowError())
	at, ok := s.startedAt("a")
	require.True(t, ok)
	require.GreaterOrEqual(t, at.Sub(start), time.Hour, "a started while the rollout was paused")
}
