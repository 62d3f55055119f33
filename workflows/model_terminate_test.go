package workflows

import (
	"time"

	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// The model's termination: in some scenarios an operator terminates one node's workflow (the
// UI's Terminate) while its Job runs or, with maintenance, once its Job's success is recorded
// on the Node and its steps go on. None of the node's own clean-up runs and it schedules
// nothing more. The invariants, at the end: the rollout counts the node failed and reports it
// so; the Node's marker says failed, written by the rollout, so a re-run covers the node and
// a converging rollout retries it only as retryFailedAfter says; our cordon stays,
// whatever onFailure says, for nothing is left to lift it; a Job left running is the
// terminated workflow's, not the rollout's.

// modelTermination is a scenario's termination and what became of it.
type modelTermination struct {
	node string
	// afterJob: once the Job's success is recorded and the maintenance goes on; else when the
	// Job's wait ends (the Job has ended, no finalize has run).
	afterJob bool
	// armed: the node's first workflow runs in a run's own environment and may be terminated;
	// fired: it is being terminated (its activities do nothing from then on); lastRun: the
	// node's last workflow ended terminated.
	armed, fired, lastRun bool
	used                  bool // the node's first workflow has begun: later ones are not terminated
	// handed: the workflow was handed over in flight before it was terminated. The next run
	// never hears its end from it, and finds it ended on its recheck or at an abort
	// (handedInLost).
	handed bool
	// workerTells: a worker finds the handed-over workflow terminated and tells the rollout
	// at once (activities.TerminatedNodeNotifier), racing the recheck and an abort.
	workerTells bool
}

// scriptTermination gives a fifth of the scenarios a termination. It draws from the seed after
// everything else, so the scenarios of the seeds stay as they were before.
func (m *model) scriptTermination() {
	r := m.rng
	if r.IntN(5) != 0 {
		return
	}
	var candidates []string
	for _, name := range m.order {
		if n := m.nodes[name]; !n.missing && !n.done {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return
	}
	t := &modelTermination{node: candidates[r.IntN(len(candidates))]}
	t.afterJob = m.req.Maintenance != nil && !m.nodes[t.node].jobFails && r.IntN(2) == 0
	t.workerTells = r.IntN(2) == 0
	m.termination = t
}

// workerTells says whether a worker tells the rollout of the node's handed-over workflow's
// termination (callers hold m.mu).
func (m *model) workerTells(node string) bool {
	t := m.termination
	return t != nil && t.node == node && t.handed && t.lastRun && t.workerTells
}

// tellTerminated sends the rollout that started the stand-in the word a worker sends for a
// terminated node workflow a rollout was handed: the stand-in's own calls are held (dead),
// and this one is the worker's, so it goes past them.
func tellTerminated(ctx workflow.Context, node string, dead *bool) {
	info := workflow.GetInfo(ctx)
	held := *dead
	*dead = false
	told := workflow.SignalExternalWorkflow(ctx, info.ParentWorkflowExecution.ID, "", api.SignalNodeFree, activities.TerminatedNodeWord(node, info.WorkflowExecution.RunID))
	*dead = held
	_ = told.Get(ctx, nil)
}

// armTermination says whether the node workflow beginning now is the one the scenario
// terminates: the node's first, or its stand-in once handed over in flight (goesOn)
// (callers hold m.mu).
func (m *model) armTermination(node string, goesOn bool) bool {
	t := m.termination
	if t == nil || t.node != node {
		return false
	}
	if goesOn {
		t.handed = t.armed
		return t.armed
	}
	t.lastRun = false
	if t.used {
		return false
	}
	t.used, t.armed = true, true
	return true
}

// fireTermination terminates the node's workflow if it is the armed one and this is the
// scenario's moment (callers hold m.mu).
func (m *model) fireTermination(node string, afterJob bool) {
	if t := m.termination; t != nil && t.node == node && t.armed && t.afterJob == afterJob {
		t.armed, t.fired = false, true
		m.note("%s: an operator terminates its node workflow", node)
	}
}

// terminated says whether the node's workflow is being terminated or was, and no new one
// has begun (callers hold m.mu).
func (m *model) terminated(node string) bool {
	t := m.termination
	return t != nil && t.node == node && t.fired
}

// lastRunTerminated says whether the node's last workflow ended terminated (callers hold m.mu).
func (m *model) lastRunTerminated(node string) bool {
	t := m.termination
	return t != nil && t.node == node && t.lastRun
}

var errTerminatedByOperator = temporal.GetDefaultFailureConverter().FailureToError(&failurepb.Failure{
	Message:     "terminated by an operator",
	FailureInfo: &failurepb.Failure_TerminatedFailureInfo{TerminatedFailureInfo: &failurepb.TerminatedFailureInfo{}},
})

// runTerminable runs the node's workflow. The one the scenario terminates runs in a coroutine
// and ends as a terminated one when the termination fires: the workflow's coroutine is left
// where it stands, its calls held from then on (dead), as a server leaves a terminated
// workflow.
func (m *model) runTerminable(ctx workflow.Context, node string, goesOn bool, dead *bool, run func(workflow.Context) (any, error)) (any, error, bool) {
	m.mu.Lock()
	terminable := m.armTermination(node, goesOn)
	m.mu.Unlock()
	if !terminable {
		res, err := run(ctx)
		return res, err, false
	}
	var res any
	var err error
	done := false
	workflow.Go(ctx, func(ctx workflow.Context) {
		res, err = run(ctx)
		done = true
	})
	fired := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.terminated(node)
	}
	// Never cut short: an abort cancels the node workflow itself, which ends on its own.
	waitCtx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(waitCtx, func() bool { return done || fired() })
	m.mu.Lock()
	defer m.mu.Unlock()
	if done {
		m.termination.armed = false
		return res, err, false
	}
	m.termination.lastRun = true
	*dead = true
	return nil, errTerminatedByOperator, true
}

// awaitTheRolloutsWord: a handed-over node's termination reaches its rollout only when the
// rollout finds the workflow ended (its busy-node recheck, an abort): until then the node's
// failure is not one the rollout's rules can know, and the model's checks count it from when
// the rollout writes it on the Node (rolloutLearns) (callers hold m.mu).
func (m *model) awaitTheRolloutsWord(node string) {
	if t := m.termination; t != nil && t.node == node && t.lastRun && t.handed {
		m.nodes[node].ended = m.start.Add(2 * modelHorizon)
	}
}

// terminatedAsHanded says whether the node's workflow was terminated at the instant its run
// continued as new and handed it over: the next run learns of it as of one terminated after
// (callers hold m.mu).
func (m *model) terminatedAsHanded(node string) bool {
	if !m.lastRunTerminated(node) {
		return false
	}
	m.termination.handed = true
	m.awaitTheRolloutsWord(node)
	return true
}

// rolloutLearns notes when the rollout writes a handed-over node's termination on the Node
// (callers hold m.mu).
func (m *model) rolloutLearns(in activities.FinalizeInput) {
	if t := m.termination; t != nil && t.node == in.Node && t.handed && t.lastRun && in.Job == nil && in.End.Reason == api.ReasonNodeWorkflowTerminated {
		m.nodes[in.Node].ended = m.now()
		m.note("%s: the rollout learns of its termination", in.Node)
	}
}

// checkTerminationEnd checks the invariants of a terminated node at the rollout's end
// (callers hold m.mu).
func (m *model) checkTerminationEnd(result api.RolloutResult) {
	t := m.termination
	if t == nil || !t.lastRun {
		return
	}
	n := m.nodes[t.node]
	if n.outcome != string(api.OutcomeFailed) {
		m.fail("%s: its terminated workflow was taken as %q", t.node, n.outcome)
	}
	reported := false
	for _, f := range result.Failures {
		reported = reported || (f.Node == t.node && f.Reason == api.ReasonNodeWorkflowTerminated)
	}
	if !reported && len(result.Failures) < api.MaxReportedFailures {
		m.fail("%s: the rollout does not report its workflow's termination (failures %+v)", t.node, result.Failures)
	}
	// A drift that wiped the marker after the node's end is the scenario's, as for any node.
	if n.marker != string(api.OutcomeFailed) && (n.driftAt == 0 || n.ended.After(m.start.Add(n.driftAt))) {
		m.fail("%s: its workflow was terminated and its marker says %q, not failed: a re-run (or a converging rollout) would not know", t.node, n.marker)
	}
	if n.cordonedOnce && !n.ourCordon {
		m.fail("%s: its workflow was terminated and our cordon was lifted", t.node)
	}
}

// deadCalls holds back every call of a node workflow once the model has terminated it: a
// terminated workflow schedules nothing more, so its coroutine, left running in the test
// environment, waits on a future nothing completes. Else it would go on to finalize, clean up
// and tell the rollout, as no terminated workflow can.
type deadCalls struct {
	interceptor.WorkflowOutboundInterceptorBase
	dead *bool
}

func (o *deadCalls) never(ctx workflow.Context) workflow.Future {
	f, _ := workflow.NewFuture(ctx)
	return f
}

func (o *deadCalls) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if *o.dead {
		return o.never(ctx)
	}
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *deadCalls) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	if *o.dead {
		return o.never(ctx)
	}
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *deadCalls) NewTimer(ctx workflow.Context, d time.Duration) workflow.Future {
	if *o.dead {
		return o.never(ctx)
	}
	return o.Next.NewTimer(ctx, d)
}

func (o *deadCalls) NewTimerWithOptions(ctx workflow.Context, d time.Duration, options workflow.TimerOptions) workflow.Future {
	if *o.dead {
		return o.never(ctx)
	}
	return o.Next.NewTimerWithOptions(ctx, d, options)
}

func (o *deadCalls) Sleep(ctx workflow.Context, d time.Duration) error {
	if *o.dead {
		return o.never(ctx).Get(ctx, nil)
	}
	return o.Next.Sleep(ctx, d)
}

func (o *deadCalls) SignalExternalWorkflow(ctx workflow.Context, workflowID, runID, signalName string, arg any) workflow.Future {
	if *o.dead {
		return o.never(ctx)
	}
	return o.Next.SignalExternalWorkflow(ctx, workflowID, runID, signalName, arg)
}
