package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/api"
)

// Signals between a cluster's budget coordinator (one ClusterBudget workflow per cluster, which
// grants slots to the nodes of every rollout on it) and the rollouts.
const (
	// SignalSlotAcquire (a SlotRequest) asks the coordinator for a slot; it answers with
	// SignalSlotGranted (a SlotGrant) to the asking rollout run once one is free.
	SignalSlotAcquire = "acquireSlot"
	SignalSlotGranted = "slotGranted"
	// SignalSlotRelease (a SlotRelease) gives a slot back, or withdraws a request not yet granted.
	SignalSlotRelease = "releaseSlot"
)

// Tuning of the coordinator, variables so tests can shorten them.
var (
	// reclaimInterval is how often a coordinator with requests waiting and no slot free looks
	// for holders that can no longer return their slot.
	reclaimInterval = time.Minute
	// maxReclaimInterval bounds the doubling of reclaimInterval while every look finds all
	// holders alive (long Jobs fill the budget): a handful of activities an hour, not sixty.
	maxReclaimInterval = 15 * time.Minute
	// budgetEventsBeforeContinue keeps the coordinator's history short: it runs for as long as
	// the cluster does.
	budgetEventsBeforeContinue = 5000
)

// SlotRequest asks for one slot of the cluster's budget. Budget is the asking worker's
// configured size; the coordinator applies the latest it has been told.
type SlotRequest struct {
	Holder api.SlotHolder `json:"holder"`
	Budget int            `json:"budget"`
}

// SlotGrant tells a rollout run that its node workflow may start.
type SlotGrant struct {
	Node string `json:"node"`
}

// SlotRelease returns the holder's slot (or drops its request).
type SlotRelease struct {
	Holder api.SlotHolder `json:"holder"`
}

// BudgetState is the coordinator's whole state, carried over continue-as-new.
type BudgetState struct {
	Budget  int              `json:"budget"`
	Holders []api.SlotHolder `json:"holders,omitempty"`
	Queue   []SlotRequest    `json:"queue,omitempty"`
	// Reclaimed counts slots taken back from holders that were gone.
	Reclaimed int `json:"reclaimed,omitempty"`
}

// ClusterBudget grants slots first come, first served, never more than the budget at once.
// Rollouts return their slots when their node workflow ends; a slot whose rollout was
// terminated is reclaimed once that rollout and its node workflow are closed (GoneHolders),
// looked for while requests wait and no slot is free.
//
// A coordinator started afresh (the first, or after one was terminated with its state) first
// takes every node workflow still running on the cluster as a holder (versionBudgetRebuild):
// their rollouts hold slots whatever state was lost, and would otherwise be granted again.
func ClusterBudget(ctx workflow.Context, state BudgetState) error {
	c := &budgetCoordinator{state: state, holders: map[string]api.SlotHolder{}, reclaimWait: reclaimInterval}
	for _, h := range state.Holders {
		c.holders[h.Key()] = h
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryBudget, func() (api.BudgetStatus, error) { return c.status(), nil }); err != nil {
		return err
	}
	if workflow.GetInfo(ctx).ContinuedExecutionRunID == "" &&
		workflow.GetVersion(ctx, versionBudgetRebuild, workflow.DefaultVersion, 1) == 1 {
		if err := c.rebuild(ctx); err != nil {
			return err
		}
	}
	acquire := workflow.GetSignalChannel(ctx, SignalSlotAcquire)
	release := workflow.GetSignalChannel(ctx, SignalSlotRelease)
	var reclaimTimer workflow.Future
	for {
		c.grant(ctx)
		c.showProgress(ctx)
		if c.dueToContinueAsNew(ctx) {
			// Signals already delivered to this run are taken in before handing over.
			for {
				var req SlotRequest
				var rel SlotRelease
				switch {
				case acquire.ReceiveAsync(&req):
					c.request(req)
				case release.ReceiveAsync(&rel):
					c.release(rel.Holder)
				default:
					return workflow.NewContinueAsNewError(ctx, api.ClusterBudgetWorkflow, c.carry())
				}
			}
		}
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.AddReceive(acquire, func(ch workflow.ReceiveChannel, _ bool) {
			var req SlotRequest
			ch.Receive(ctx, &req)
			c.request(req)
		})
		sel.AddReceive(release, func(ch workflow.ReceiveChannel, _ bool) {
			var rel SlotRelease
			ch.Receive(ctx, &rel)
			c.release(rel.Holder)
		})
		if c.blocked() {
			if reclaimTimer == nil {
				reclaimTimer = workflow.NewTimer(ctx, c.reclaimWait)
			}
			sel.AddFuture(reclaimTimer, func(workflow.Future) {
				reclaimTimer = nil
				c.reclaim(ctx)
			})
		}
		sel.Select(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

type budgetCoordinator struct {
	state       BudgetState
	holders     map[string]api.SlotHolder
	reclaimWait time.Duration
}

func (c *budgetCoordinator) request(req SlotRequest) {
	if req.Budget > 0 {
		c.state.Budget = req.Budget
	}
	if _, held := c.holders[req.Holder.Key()]; held {
		// A repeated request of a holder (its first grant was lost with a reset): grant again.
		c.state.Queue = append([]SlotRequest{req}, c.state.Queue...)
		delete(c.holders, req.Holder.Key())
		return
	}
	for _, q := range c.state.Queue {
		if q.Holder.Key() == req.Holder.Key() {
			return
		}
	}
	c.state.Queue = append(c.state.Queue, req)
}

func (c *budgetCoordinator) release(h api.SlotHolder) {
	if _, held := c.holders[h.Key()]; held {
		c.reclaimWait = reclaimInterval
	}
	delete(c.holders, h.Key())
	for i, q := range c.state.Queue {
		if q.Holder.Key() == h.Key() {
			c.state.Queue = append(c.state.Queue[:i:i], c.state.Queue[i+1:]...)
			return
		}
	}
}

func (c *budgetCoordinator) blocked() bool {
	return len(c.state.Queue) > 0 && len(c.holders) >= c.state.Budget
}

// grant hands free slots to the oldest requests. A rollout run that has closed meanwhile
// cannot be told, and its slot is free again at once.
func (c *budgetCoordinator) grant(ctx workflow.Context) {
	for len(c.state.Queue) > 0 && len(c.holders) < c.state.Budget {
		n := min(len(c.state.Queue), c.state.Budget-len(c.holders))
		batch := c.state.Queue[:n:n]
		c.state.Queue = c.state.Queue[n:]
		sent := make([]workflow.Future, len(batch))
		for i, req := range batch {
			c.holders[req.Holder.Key()] = req.Holder
			sent[i] = workflow.SignalExternalWorkflow(ctx, req.Holder.Rollout, req.Holder.RolloutRun, SignalSlotGranted, SlotGrant{Node: req.Holder.Node})
		}
		for i, f := range sent {
			if err := f.Get(ctx, nil); err != nil && ctx.Err() == nil {
				delete(c.holders, batch[i].Holder.Key())
			}
		}
	}
}

// rebuild takes the node workflows running on the coordinator's task queue as holders. It
// retries for as long as Temporal's visibility does not answer: granting before it knows who
// holds slots could put twice the budget in flight. Visibility lags a node started in the
// last second or so; such a node's rollout asks again if its grant was lost (request).
func (c *budgetCoordinator) rebuild(ctx workflow.Context) error {
	var co *activities.Coordination
	var running []api.SlotHolder
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         apiRetry,
		Summary:             "count the node workflows still running as holders",
	})
	err := workflow.ExecuteActivity(actx, co.NodeHolders, activities.NodeHoldersInput{
		TaskQueue:     workflow.GetInfo(ctx).TaskQueueName,
		WorkflowTypes: api.NodeWorkflowTypes,
	}).Get(ctx, &running)
	if err != nil {
		return err
	}
	for _, h := range running {
		c.holders[h.Key()] = h
	}
	return nil
}

// reclaim frees the slots of holders that are gone.
func (c *budgetCoordinator) reclaim(ctx workflow.Context) {
	var co *activities.Coordination
	held := make([]api.SlotHolder, 0, len(c.holders))
	for _, k := range workflow.DeterministicKeys(c.holders) {
		held = append(held, c.holders[k])
	}
	var gone []api.SlotHolder
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3},
		Summary:             "look for budget slots held by closed rollouts",
	})
	if err := workflow.ExecuteActivity(actx, co.GoneHolders, held).Get(ctx, &gone); err != nil {
		workflow.GetLogger(ctx).Warn("could not check the holders of budget slots; looking again later", "error", err)
		return
	}
	if len(gone) == 0 {
		c.reclaimWait = min(2*c.reclaimWait, maxReclaimInterval)
	}
	for _, h := range gone {
		if _, ok := c.holders[h.Key()]; ok {
			delete(c.holders, h.Key())
			c.state.Reclaimed++
			workflow.GetLogger(ctx).Info("reclaimed a budget slot whose rollout is closed", "rollout", h.Rollout, "node", h.Node)
		}
	}
}

func (c *budgetCoordinator) dueToContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetCurrentHistoryLength() >= budgetEventsBeforeContinue || info.GetContinueAsNewSuggested()
}

func (c *budgetCoordinator) carry() BudgetState {
	s := c.state
	s.Holders = make([]api.SlotHolder, 0, len(c.holders))
	for _, k := range workflow.DeterministicKeys(c.holders) {
		s.Holders = append(s.Holders, c.holders[k])
	}
	return s
}

func (c *budgetCoordinator) status() api.BudgetStatus {
	s := c.carry()
	queued := make([]api.SlotHolder, len(c.state.Queue))
	for i, q := range c.state.Queue {
		queued[i] = q.Holder
	}
	return api.BudgetStatus{Budget: s.Budget, InUse: len(s.Holders), Holders: s.Holders, Queued: queued, Reclaimed: s.Reclaimed}
}

func (c *budgetCoordinator) showProgress(ctx workflow.Context) {
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%d of %d** slots in use, %d waiting, %d reclaimed",
		len(c.holders), c.state.Budget, len(c.state.Queue), c.state.Reclaimed))
}

// clusterSlots is a Rollout's side of the budget: it takes a slot before each node workflow
// starts and gives it back when that ends. nil when the worker has no budget, so such rollouts
// make exactly the commands they made before budgets existed.
type clusterSlots struct {
	cluster   api.Cluster
	taskQueue string
	self      workflow.Execution
	granted   map[string]bool // node workflow IDs granted and not yet taken
	waiting   map[string]bool // nodes waiting for a slot, for status
	held      map[string]bool // nodes holding a slot
	grants    workflow.ReceiveChannel
}

func newClusterSlots(ctx workflow.Context, c api.Cluster) *clusterSlots {
	if c.Budget <= 0 || workflow.GetVersion(ctx, versionClusterBudget, workflow.DefaultVersion, 1) != 1 {
		return nil
	}
	info := workflow.GetInfo(ctx)
	s := &clusterSlots{
		cluster:   c,
		taskQueue: info.TaskQueueName,
		self:      info.WorkflowExecution,
		granted:   map[string]bool{},
		waiting:   map[string]bool{},
		held:      map[string]bool{},
		grants:    workflow.GetSignalChannel(ctx, SignalSlotGranted),
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var g SlotGrant
			if !s.grants.Receive(ctx, &g) {
				return
			}
			s.granted[g.Node] = true
		}
	})
	return s
}

func (s *clusterSlots) holder(node string) api.SlotHolder {
	return api.SlotHolder{Rollout: s.self.ID, RolloutRun: s.self.RunID, Node: s.cluster.NodeWorkflowID(node)}
}

// acquire waits for a slot for node; progress shows the wait. On an error (the rollout was
// cancelled), or when stop (if not nil) says the node will not start any more, the request is
// withdrawn and no slot is held.
func (s *clusterSlots) acquire(ctx workflow.Context, node string, progress func(), stop func() bool) error {
	if s == nil {
		return nil
	}
	h := s.holder(node)
	delete(s.granted, h.Node)
	req := SlotRequest{Holder: h, Budget: s.cluster.Budget}
	if workflow.SignalExternalWorkflow(ctx, s.cluster.BudgetWorkflowID(), "", SignalSlotAcquire, req).Get(ctx, nil) != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// No coordinator yet (or it was terminated): start one with this request.
		var co *activities.Coordination
		err := workflow.ExecuteActivity(withAPIActivity(ctx, "start the cluster's budget coordinator"), co.SignalWithStart, activities.SignalWithStartInput{
			WorkflowID:  s.cluster.BudgetWorkflowID(),
			Workflow:    api.ClusterBudgetWorkflow,
			TaskQueue:   s.taskQueue,
			Signal:      SignalSlotAcquire,
			SignalArg:   req,
			WorkflowArg: BudgetState{Budget: s.cluster.Budget},
		}).Get(ctx, nil)
		if err != nil {
			s.release(ctx, node)
			return err
		}
	}
	s.waiting[node] = true
	progress()
	err := workflow.Await(ctx, func() bool { return s.granted[h.Node] || (stop != nil && stop()) })
	delete(s.waiting, node)
	granted := s.granted[h.Node]
	delete(s.granted, h.Node)
	if err != nil || !granted {
		s.release(ctx, node)
		return err
	}
	s.held[node] = true
	return nil
}

// holds says whether node holds a slot (nil: there is no budget, nothing to hold).
func (s *clusterSlots) holds(node string) bool { return s == nil || s.held[node] }

// giveBack returns node's slot if it holds one.
func (s *clusterSlots) giveBack(ctx workflow.Context, node string) {
	if s != nil && s.held[node] {
		s.release(ctx, node)
	}
}

// release gives node's slot back (or withdraws its request), even from a cancelled rollout.
func (s *clusterSlots) release(ctx workflow.Context, node string) {
	if s == nil {
		return
	}
	if ctx.Err() != nil {
		ctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	delete(s.held, node)
	// An error means the coordinator is closed: there is no slot to give back.
	_ = workflow.SignalExternalWorkflow(ctx, s.cluster.BudgetWorkflowID(), "", SignalSlotRelease, SlotRelease{Holder: s.holder(node)}).Get(ctx, nil)
}

// waitingNodes lists the nodes waiting for a cluster slot.
func (s *clusterSlots) waitingNodes() []string {
	if s == nil {
		return nil
	}
	return workflow.DeterministicKeys(s.waiting)
}

// describeWaits adds the nodes waiting for a cluster slot to the rollout's current details.
func (s *clusterSlots) describeWaits() string {
	if s == nil || len(s.waiting) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d waiting for a slot of the cluster-wide budget of %d", len(s.waiting), s.cluster.Budget)
}
