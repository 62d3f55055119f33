package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// NodeWatch is the worker's watch on Nodes for converging rollouts (mode: converge): when a
// node joins, becomes Ready, is replaced by a new machine under its name (new UID), changes
// labels or has its marker changed, and a running converging rollout of this task queue owes it
// a run or onDeselect's Job, it signals that rollout with the node's name. Nothing polls: a
// rollout hears only of changes. When the watch starts (the worker starts) it signals every
// converging rollout once to look at all its nodes, which catches what changed while no
// worker watched; it does so again once Temporal answers after an outage that kept a change
// from a rollout.
type NodeWatch struct {
	Kube      kubernetes.Interface
	Temporal  client.Client
	TaskQueue string
	Logger    *slog.Logger
	// Gather is how long events are gathered into one signal per rollout (default 200 ms).
	Gather time.Duration
	// ListEvery spaces the lists of converging rollouts (default 1 s): a batch that would list
	// sooner after the last one gathers on. While nodes finish Jobs by the dozen a second, each
	// writing its marker, this bounds the visibility queries to one a second, and the signal to a
	// converging rollout comes at most that much later.
	ListEvery time.Duration
	// RetryEvery is how often a resync that Temporal's outage kept from every converging
	// rollout is tried again (default 30 s).
	RetryEvery time.Duration

	events   chan nodeChange
	lastList time.Time
}

// nodeChange is one Node event: old is nil for an added Node.
type nodeChange struct{ old, new *corev1.Node }

// convergingRollout is what the watch knows of a running converging rollout, from its memo.
type convergingRollout struct {
	workflowID, name   string
	selector           labels.Selector
	fieldSelector      fields.Selector
	hash, deselectHash string
}

// Run watches Nodes until ctx ends. It returns once the informer's first list has synced and
// the resync signals are sent; the watch goes on in the background.
func (w *NodeWatch) Run(ctx context.Context) error {
	if w.Gather <= 0 {
		w.Gather = 200 * time.Millisecond
	}
	if w.ListEvery <= 0 {
		w.ListEvery = time.Second
	}
	if w.RetryEvery <= 0 {
		w.RetryEvery = 30 * time.Second
	}
	w.events = make(chan nodeChange, 1024)
	informer := coreinformers.NewNodeInformer(w.Kube, 0, cache.Indexers{})
	_ = informer.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Node); ok {
			return keptOfNode(n), nil
		}
		return obj, nil
	})
	var synced atomic.Bool
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if n, ok := obj.(*corev1.Node); ok && synced.Load() {
				w.events <- nodeChange{new: n}
			}
		},
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := obj.(*corev1.Node)
			// Most updates are status heartbeats: they stop here, not in a batch.
			if ok1 && ok2 && mayMatter(o, n) {
				w.events <- nodeChange{old: o, new: n}
			}
		},
	})
	if err != nil {
		return err
	}
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return fmt.Errorf("the Node informer did not sync: can the worker list and watch Nodes (RBAC)?")
	}
	// The initial list's adds are not signalled one by one: one resync per rollout covers them.
	synced.Store(true)
	told := w.resync(ctx)
	go w.loop(ctx, !told)
	return nil
}

// resync tells every converging rollout to look at all its nodes. It says false when
// Temporal's outage kept that from any of them.
func (w *NodeWatch) resync(ctx context.Context) (told bool) {
	rollouts, err := w.converging(ctx)
	if err != nil {
		w.Logger.Warn("node watch: could not list converging rollouts to resync them", "error", err)
		return !temporalOutage(err)
	}
	told = true
	for _, r := range rollouts {
		told = w.signal(ctx, r, api.NodesChanged{Resync: true}) && told
	}
	return told
}

// loop gathers events for a moment and signals each rollout that owes something to a node.
// A change that an outage of Temporal kept from a rollout (the list or the signal failed) is
// not dropped: a resync is owed, and tried every RetryEvery until it reaches every converging
// rollout, so a node that joined during an outage of minutes still runs soon after it.
func (w *NodeWatch) loop(ctx context.Context, resyncOwed bool) {
	retry := time.NewTicker(w.RetryEvery)
	defer retry.Stop()
	for {
		var batch []nodeChange
		select {
		case <-ctx.Done():
			return
		case <-retry.C:
			if resyncOwed {
				resyncOwed = !w.resync(ctx)
			}
			continue
		case ev := <-w.events:
			batch = append(batch, ev)
		}
		timer := time.NewTimer(w.gatherFor(time.Now()))
	gather:
		for {
			select {
			case ev := <-w.events:
				batch = append(batch, ev)
			case <-timer.C:
				break gather
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
		if !w.dispatch(ctx, batch) {
			resyncOwed = true
		}
	}
}

// gatherFor is how long a batch whose first event came at now gathers: Gather, and at least
// until ListEvery has passed since the last list. Every event of a batch comes before the list
// it is judged by, so a rollout that started before the event is on that list.
func (w *NodeWatch) gatherFor(now time.Time) time.Duration {
	return max(w.Gather, w.lastList.Add(w.ListEvery).Sub(now))
}

// dispatch signals, per converging rollout, the nodes of the batch it must look at. It says
// false when Temporal's outage kept the batch from any of them.
func (w *NodeWatch) dispatch(ctx context.Context, batch []nodeChange) (told bool) {
	rollouts, told := w.listFor(ctx, batch)
	for _, r := range rollouts {
		var names []string
		for _, ev := range batch {
			if r.owes(ev) && !slices.Contains(names, ev.new.Name) {
				names = append(names, ev.new.Name)
			}
		}
		if len(names) > 0 {
			told = w.signal(ctx, r, api.NodesChanged{Nodes: names}) && told
		}
	}
	return told
}

// listFor lists the converging rollouts once a batch holds an event that may matter to one
// (a cheap visibility call, no Temporal action); a batch of status heartbeats lists nothing.
// It says false when Temporal's outage kept it from listing.
func (w *NodeWatch) listFor(ctx context.Context, batch []nodeChange) ([]convergingRollout, bool) {
	relevant := slices.ContainsFunc(batch, func(ev nodeChange) bool { return ev.old == nil || mayMatter(ev.old, ev.new) })
	if !relevant {
		return nil, true
	}
	w.lastList = time.Now()
	rs, err := w.converging(ctx)
	if err != nil {
		w.Logger.Warn("node watch: could not list converging rollouts; every one is told to look at all its nodes once Temporal answers", "error", err)
		return nil, !temporalOutage(err)
	}
	return rs, true
}

// mayMatter says an update changed what a converging rollout judges a node by: its UID, its
// labels, its Ready condition, an annotation (the markers), whether it is cordoned (a field
// selector may name spec.unschedulable) or its taints (a lifted taint may let the Job's Pod on).
// keptOfNode keeps exactly these.
func mayMatter(old, n *corev1.Node) bool {
	return old.UID != n.UID || nodeReady(old) != nodeReady(n) ||
		!labels.Equals(old.Labels, n.Labels) || !labels.Equals(old.Annotations, n.Annotations) ||
		old.Spec.Unschedulable != n.Spec.Unschedulable || !sameTaints(old, n)
}

// keptOfNode is what the watch's cache keeps of a Node: what mayMatter and owes read, and the
// name and version the informer files it by. A real node's status (images, conditions,
// capacity, addresses) is most of its size, and the cache holds every Node of the cluster.
func keptOfNode(n *corev1.Node) *corev1.Node {
	kept := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
		Labels: n.Labels, Annotations: n.Annotations,
	}}
	kept.Spec.Unschedulable = n.Spec.Unschedulable
	kept.Spec.Taints = n.Spec.Taints
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			kept.Status.Conditions = []corev1.NodeCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return kept
}

// sameTaints says two versions of a Node carry the same taints, whenever added.
func sameTaints(old, n *corev1.Node) bool {
	return slices.EqualFunc(old.Spec.Taints, n.Spec.Taints, func(a, b corev1.Taint) bool {
		return a.Key == b.Key && a.Value == b.Value && a.Effect == b.Effect
	})
}

// owes says the event changed something this rollout judges the node by, and the rollout now
// owes the node a run or onDeselect's Job.
func (r convergingRollout) owes(ev nodeChange) bool {
	n := ev.new
	selected := func(n *corev1.Node) bool {
		return r.selector.Matches(labels.Set(n.Labels)) && r.fieldSelector.Matches(nodeFields(n))
	}
	need := ConvergeVerdict(n, selected(n), r.name, r.hash, r.deselectHash)
	if !need.NeedsRun() && !need.NeedsDeselect() {
		return false
	}
	o := ev.old
	key := jobspec.NodeMarkerKey(r.name)
	return o == nil || o.UID != n.UID || nodeReady(o) != nodeReady(n) || selected(o) != selected(n) ||
		o.Annotations[key] != n.Annotations[key] || !sameTaints(o, n)
}

// converging lists the running converging rollouts of this task queue, from their memos.
func (w *NodeWatch) converging(ctx context.Context) ([]convergingRollout, error) {
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'", api.RolloutWorkflow, w.TaskQueue)
	var out []convergingRollout
	var token []byte
	for {
		resp, err := w.Temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			memo := map[string]string{}
			for k, p := range e.GetMemo().GetFields() {
				var v string
				if json.Unmarshal(p.GetData(), &v) == nil {
					memo[k] = v
				}
			}
			if memo[api.MemoMode] != api.ModeConverge || memo["templateHash"] == "" || memo["name"] == "" {
				continue
			}
			sel, err := labels.Parse(memo["nodeSelector"])
			if err != nil {
				continue
			}
			fsel, err := fields.ParseSelector(memo["fieldSelector"])
			if err != nil {
				continue
			}
			id := e.GetExecution().GetWorkflowId()
			out = append(out, convergingRollout{workflowID: id, name: memo["name"], selector: sel, fieldSelector: fsel,
				hash: memo["templateHash"], deselectHash: memo["deselectHash"]})
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return out, nil
		}
	}
}

// signal tells a rollout's current run which nodes changed. It says false when Temporal's
// outage kept the word from it (not when the rollout has ended meanwhile).
func (w *NodeWatch) signal(ctx context.Context, r convergingRollout, in api.NodesChanged) bool {
	if err := w.Temporal.SignalWorkflow(ctx, r.workflowID, "", api.SignalNodesChanged, in); err != nil {
		w.Logger.Warn("node watch: could not signal a converging rollout", "workflowID", r.workflowID, "nodes", in.Nodes, "resync", in.Resync, "error", err)
		return !temporalOutage(err)
	}
	w.Logger.Debug("node watch: signalled a converging rollout", "workflowID", r.workflowID, "nodes", in.Nodes, "resync", in.Resync)
	return true
}
