package workflows

import (
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

// historyMeter gives the test environment a history length: the environment itself keeps
// none, so a run's continue-as-new decisions would never see its history grow. It counts what
// the root workflow does, each at a generous number of events (the command's own events and
// a workflow task to learn of its outcome), and reports the sum as the current history length.
type historyMeter struct {
	interceptor.WorkerInterceptorBase
	env  *testsuite.TestWorkflowEnvironment
	root string // the workflow type metered
	// events is the run's estimated length; peak the most it reached.
	events, peak int
	versions     map[string]bool
}

// Events per thing a workflow does, rounded up: a workflow task is three events.
const (
	meteredActivity = 3 + 3 // scheduled, started, completed; the task that reads it
	meteredChild    = 3 + 6 // initiated, started, completed; the tasks that read start and end
	meteredTimer    = 2 + 3 // started, fired (or cancelled); a task
	meteredSignal   = 2 + 3 // initiated, signalled; a task
	meteredReceived = 1 + 3 // a signal or update received; its task
	meteredMarker   = 1     // local activity, side effect, version, memo
	meteredStart    = 3     // started, the first task's scheduled and started
)

func newHistoryMeter(env *testsuite.TestWorkflowEnvironment, root string) *historyMeter {
	return &historyMeter{env: env, root: root, events: meteredStart, versions: map[string]bool{}}
}

func (m *historyMeter) add(n int) {
	m.events += n
	m.peak = max(m.peak, m.events)
	m.env.SetCurrentHistoryLength(m.events)
}

func (m *historyMeter) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != m.root {
		return next
	}
	return &meteredInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, m: m}
}

type meteredInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	m *historyMeter
}

func (i *meteredInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&meteredOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, m: i.m})
}

func (i *meteredInbound) HandleSignal(ctx workflow.Context, in *interceptor.HandleSignalInput) error {
	i.m.add(meteredReceived)
	return i.Next.HandleSignal(ctx, in)
}

func (i *meteredInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	i.m.add(meteredReceived + 1)
	return i.Next.ExecuteUpdate(ctx, in)
}

type meteredOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	m *historyMeter
}

func (o *meteredOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.m.add(meteredActivity)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *meteredOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	o.m.add(meteredMarker)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *meteredOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	o.m.add(meteredChild)
	return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}

func (o *meteredOutbound) NewTimer(ctx workflow.Context, d time.Duration) workflow.Future {
	o.m.add(meteredTimer)
	return o.Next.NewTimer(ctx, d)
}

func (o *meteredOutbound) NewTimerWithOptions(ctx workflow.Context, d time.Duration, options workflow.TimerOptions) workflow.Future {
	o.m.add(meteredTimer)
	return o.Next.NewTimerWithOptions(ctx, d, options)
}

func (o *meteredOutbound) SignalExternalWorkflow(ctx workflow.Context, workflowID, runID, signalName string, arg any) workflow.Future {
	o.m.add(meteredSignal)
	return o.Next.SignalExternalWorkflow(ctx, workflowID, runID, signalName, arg)
}

func (o *meteredOutbound) SignalChildWorkflow(ctx workflow.Context, workflowID, signalName string, arg any) workflow.Future {
	o.m.add(meteredSignal)
	return o.Next.SignalChildWorkflow(ctx, workflowID, signalName, arg)
}

func (o *meteredOutbound) SideEffect(ctx workflow.Context, f func(ctx workflow.Context) any) converter.EncodedValue {
	o.m.add(meteredMarker)
	return o.Next.SideEffect(ctx, f)
}

func (o *meteredOutbound) GetVersion(ctx workflow.Context, changeID string, minSupported, maxSupported workflow.Version) workflow.Version {
	if !o.m.versions[changeID] {
		o.m.versions[changeID] = true
		o.m.add(meteredMarker)
	}
	return o.Next.GetVersion(ctx, changeID, minSupported, maxSupported)
}

func (o *meteredOutbound) UpsertMemo(ctx workflow.Context, memo map[string]any) error {
	o.m.add(meteredMarker)
	return o.Next.UpsertMemo(ctx, memo)
}
