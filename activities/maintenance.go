package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noderollout/noderollout/activities/evictable"
	"github.com/noderollout/noderollout/api"
)

// CordonedByKey is the Node annotation saying that noderollout (the rollout named in the value)
// made the node unschedulable: only then does a rollout make it schedulable again, so a node an
// admin cordoned stays cordoned.
const CordonedByKey = "noderollout.io/cordoned-by"

// NodeInput names the node a maintenance step works on.
type NodeInput struct {
	Rollout string `json:"rollout"`
	Node    string `json:"node"`
	// Namespace is the rollout's (its Jobs'), whose policy rules judge the cordon. Empty in
	// histories from before the policy judged cordons.
	Namespace string `json:"namespace,omitempty"`
	// Drain says a drain follows the cordon: the cordon asks the policy about the drain, and
	// the Pods it would evict (PodSelector, DeleteEmptyDirData, Force as in DrainInput), before
	// it writes anything, so a drain the policy refuses leaves no cordon behind.
	Drain              bool   `json:"drain,omitempty"`
	PodSelector        string `json:"podSelector,omitempty"`
	DeleteEmptyDirData bool   `json:"deleteEmptyDirData,omitempty"`
	Force              bool   `json:"force,omitempty"`
	// Job is the node's Job that follows the cordon: the cordon asks the policy about it as
	// CreateJob will, so a Job that a policy tightened since the rollout's start refuses leaves
	// no cordon and no drain behind. Nil in histories from before.
	Job *JobRequest `json:"job,omitempty"`
}

// CordonResult says whether this cordon is ours to undo.
type CordonResult struct {
	// WeCordoned: the node carries CordonedByKey (set now or by an earlier attempt or rollout
	// of ours); false when someone else had already cordoned it.
	WeCordoned bool `json:"weCordoned"`
}

// UncordonResult says whether the node was made schedulable again.
type UncordonResult struct {
	Uncordoned bool `json:"uncordoned"`
}

// DrainInput is one node's drain. Deadline is fixed by the workflow, so a retried attempt after
// a worker crash keeps the first attempt's deadline.
type DrainInput struct {
	Node string `json:"node"`
	// Namespace is the rollout's (its Jobs'), whose policy rules judge the drain. Empty in
	// histories from before the policy judged drains.
	Namespace          string `json:"namespace,omitempty"`
	PodSelector        string `json:"podSelector,omitempty"`
	DeleteEmptyDirData bool   `json:"deleteEmptyDirData,omitempty"`
	// Force evicts Pods no controller manages (kubectl drain --force): nothing makes them
	// again elsewhere. Without it the drain refuses them before evicting anything.
	Force              bool      `json:"force,omitempty"`
	GracePeriodSeconds *int64    `json:"gracePeriodSeconds,omitempty"`
	Deadline           time.Time `json:"deadline"`
}

// DrainResult is what a finished drain did.
type DrainResult struct {
	Evicted []string `json:"evicted,omitempty"` // namespace/name, by this attempt
}

// HealthInput asks for the node's conditions to hold: met by HealthyBy, then held for
// HoldSeconds without a break.
type HealthInput struct {
	Node        string            `json:"node"`
	Conditions  map[string]string `json:"conditions"`
	HealthyBy   time.Time         `json:"healthyBy"`
	HoldSeconds int64             `json:"holdSeconds,omitempty"`
}

// DrainPlanInput asks which Pods a drain of each node would evict.
type DrainPlanInput struct {
	Nodes              []string `json:"nodes"`
	PodSelector        string   `json:"podSelector,omitempty"`
	DeleteEmptyDirData bool     `json:"deleteEmptyDirData,omitempty"`
	Force              bool     `json:"force,omitempty"`
}

// CordonNode marks the node unschedulable and records on it that we did. A node already
// unschedulable without our annotation was cordoned by someone else: it is left as it is and
// not ours to uncordon. The write carries the resourceVersion read, so a cordon by someone
// else in between is never mistaken for ours.
func (a *Activities) CordonNode(ctx context.Context, in NodeInput) (CordonResult, error) {
	if err := a.Lineage.check(ctx, ""); err != nil {
		return CordonResult{}, err
	}
	for {
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return CordonResult{}, errNodeGone(in.Node)
		}
		if err != nil {
			return CordonResult{}, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
		}
		if err := a.mayCordon(ctx, in, node); err != nil {
			return CordonResult{}, err
		}
		ours := ourCordon(node)
		if node.Spec.Unschedulable && !ours {
			return CordonResult{WeCordoned: false}, nil
		}
		if node.Spec.Unschedulable && node.Annotations[CordonedByKey] == in.Rollout {
			return CordonResult{WeCordoned: true}, nil
		}
		// Ours from an earlier rollout that kept it cordoned after a failure is taken over.
		err = a.patchNode(ctx, node, map[string]any{CordonedByKey: in.Rollout}, true)
		if apierrors.IsConflict(err) {
			continue
		}
		if apierrors.IsNotFound(err) {
			return CordonResult{}, errNodeGone(in.Node)
		}
		if err != nil {
			return CordonResult{}, kubeError(err, "patch", fmt.Sprintf("node %q", in.Node))
		}
		return CordonResult{WeCordoned: true}, nil
	}
}

// mayCordon asks the policy about the Job that follows, the cordon and, when a drain follows,
// about the drain and the Pods it would evict now, so that a Job or a drain the policy refuses
// leaves no cordon behind.
func (a *Activities) mayCordon(ctx context.Context, in NodeInput, node *corev1.Node) error {
	if a.Policy == nil {
		return nil
	}
	if in.Job != nil {
		job, err := a.renderJob(ctx, in.Job)
		if err != nil {
			return err
		}
		if err := policyDenied(a.Policy.CheckJob(job)); err != nil {
			return err
		}
	}
	w := nodeWrite{namespace: in.Namespace, node: node, cordon: true, drain: in.Drain}
	if in.Drain {
		rules, err := drainRules(in.PodSelector, in.DeleteEmptyDirData, in.Force)
		if err != nil {
			return err
		}
		pods, err := a.podsOnNode(ctx, in.Node)
		if err != nil {
			return err
		}
		evict, _ := judgePods(pods, rules)
		w.evict = toEvict(evict)
	}
	return a.mayWriteNode(w)
}

// UncordonNode makes the node schedulable again only if our annotation says this rollout
// cordoned it, and removes the annotation. A node that is gone has nothing left to undo.
func (a *Activities) UncordonNode(ctx context.Context, in NodeInput) (UncordonResult, error) {
	for {
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return UncordonResult{}, nil
		}
		if err != nil {
			return UncordonResult{}, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
		}
		by, marked := node.Annotations[CordonedByKey]
		if !marked {
			return UncordonResult{}, nil
		}
		if in.Rollout != "" && by != in.Rollout {
			// Another rollout's cordon, kept after its failure: this rollout's cordon never took
			// it over (the policy refused it, or an abort cut it short), so it is not ours to lift.
			return UncordonResult{}, nil
		}
		if node.Spec.Unschedulable && !ourCordon(node) {
			// Someone cordoned the node again after our cordon was lifted: theirs stays, and
			// only our stale annotation goes.
			err = a.patchNodeAnnotations(ctx, node, map[string]any{CordonedByKey: nil})
			if apierrors.IsConflict(err) {
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return UncordonResult{}, kubeError(err, "patch", fmt.Sprintf("node %q", in.Node))
			}
			return UncordonResult{}, nil
		}
		err = a.patchNode(ctx, node, map[string]any{CordonedByKey: nil}, false)
		if apierrors.IsConflict(err) {
			continue
		}
		if apierrors.IsNotFound(err) {
			return UncordonResult{}, nil
		}
		if err != nil {
			return UncordonResult{}, kubeError(err, "patch", fmt.Sprintf("node %q", in.Node))
		}
		return UncordonResult{Uncordoned: true}, nil
	}
}

// ourCordon says whether the node's cordon is ours: our annotation is on it, and the API
// server's record of who set spec.unschedulable (managedFields) names our field manager. An
// admin who ran kubectl uncordon and then kubectl cordon owns the field now, though our
// annotation stayed; so does anyone who cordoned it by any client. When no manager is recorded
// for the field (managedFields stripped), the annotation decides, as it did before.
func ourCordon(node *corev1.Node) bool {
	if _, marked := node.Annotations[CordonedByKey]; !marked {
		return false
	}
	owners := unschedulableOwners(node)
	return len(owners) == 0 || slices.Contains(owners, FieldManager)
}

// unschedulableOwners lists the field managers that own spec.unschedulable.
func unschedulableOwners(node *corev1.Node) []string {
	var owners []string
	for _, mf := range node.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok := fields.Spec["f:unschedulable"]; ok {
			owners = append(owners, mf.Manager)
		}
	}
	return owners
}

// patchNodeAnnotations changes only annotations, conditional on the node's resourceVersion.
func (a *Activities) patchNodeAnnotations(ctx context.Context, node *corev1.Node, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations, "resourceVersion": node.ResourceVersion},
	})
	if err != nil {
		return err
	}
	_, err = a.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

// patchNode sets spec.unschedulable and the annotations in one merge patch, conditional on the
// node's resourceVersion.
func (a *Activities) patchNode(ctx context.Context, node *corev1.Node, annotations map[string]any, unschedulable bool) error {
	var spec any = map[string]any{"unschedulable": nil}
	if unschedulable {
		spec = map[string]any{"unschedulable": true}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": annotations, "resourceVersion": node.ResourceVersion},
		"spec":     spec,
	})
	if err != nil {
		return err
	}
	_, err = a.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

// DrainNode evicts the node's Pods through the Eviction API, so PodDisruptionBudgets are
// honoured, and returns once none that it must evict is left on the node. An eviction that a
// budget refuses (429) is tried again, backing off, until the deadline; then the drain fails
// with DrainTimedOut naming what is left. It deletes nothing itself. It refuses, before
// evicting anything, when a Pod would lose local storage the request did not allow losing, or
// is managed by no controller and the request did not say force.
// It heartbeats; a retried attempt starts over from the Pods still there.
func (a *Activities) DrainNode(ctx context.Context, in DrainInput) (DrainResult, error) {
	if err := a.Lineage.check(ctx, ""); err != nil {
		return DrainResult{}, err
	}
	rules, err := drainRules(in.PodSelector, in.DeleteEmptyDirData, in.Force)
	if err != nil {
		return DrainResult{}, err
	}
	var node *corev1.Node
	if a.Policy != nil {
		// The policy judges the node (its labels) and the drain before the first eviction.
		if node, err = a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return DrainResult{}, errNodeGone(in.Node)
		} else if err != nil {
			return DrainResult{}, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
		}
		if err := a.mayWriteNode(nodeWrite{namespace: in.Namespace, node: node, cordon: true, drain: true}); err != nil {
			return DrainResult{}, err
		}
	}
	var res DrainResult
	blocked := map[string]string{} // pod -> why its last eviction was refused
	backoff := a.drainRetry()
	for rounds := 0; ; rounds++ {
		pods, err := a.podsOnNode(ctx, in.Node)
		if err != nil {
			return res, err
		}
		left, refused := judgePods(pods, rules)
		if node != nil {
			// Pods may have come since the last round (those tolerating the cordon), and the
			// node may have been marked protected while the drain waited on a budget: each
			// round's evictions are judged, against the node as it is now, before they go out.
			if rounds > 0 {
				if node, err = a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
					return res, errNodeGone(in.Node)
				} else if err != nil {
					return res, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
				}
			}
			if err := a.mayWriteNode(nodeWrite{namespace: in.Namespace, node: node, cordon: true, drain: true, evict: toEvict(left)}); err != nil {
				return res, err
			}
		}
		// Each round heartbeats the Pods evicted so far and those still on the node, which
		// starter status shows: "drain (2 Pods left)".
		activity.RecordHeartbeat(ctx, len(res.Evicted), len(left))
		if len(refused) > 0 {
			return res, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"drain of node %s refused: %s; set maintenance.drain.deleteEmptyDirData (local storage) or maintenance.drain.force (no controller) to allow it, or narrow maintenance.drain.podSelector",
				in.Node, strings.Join(refused, "; ")), api.ErrDrainRefused, nil)
		}
		if len(left) == 0 {
			return res, nil
		}
		if !a.Now().Before(in.Deadline) {
			return res, drainTimedOut(in.Node, left, blocked)
		}
		progressed := false
		for _, pod := range left {
			if pod.DeletionTimestamp != nil {
				continue // evicted, terminating within its grace
			}
			// The listed Pod's UID goes with the eviction: a Pod deleted and made again under
			// the same name (a StatefulSet's, on another node) is another Pod, not ours to evict.
			uid := pod.UID
			err := a.Kube.PolicyV1().Evictions(pod.Namespace).Evict(ctx, &policyv1.Eviction{
				ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
				DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: in.GracePeriodSeconds,
					Preconditions: &metav1.Preconditions{UID: &uid}},
			})
			switch {
			case err == nil:
				res.Evicted = append(res.Evicted, podName(pod))
				delete(blocked, podName(pod))
				progressed = true
			case apierrors.IsConflict(err):
				// The UID no longer matches: the listed Pod is gone, whatever has its name now.
				// (Any other conflict leaves the Pod for the next round's list.)
				gone, getErr := a.podReplaced(ctx, pod)
				if getErr != nil {
					return res, getErr
				}
				if !gone {
					blocked[podName(pod)] = err.Error()
				}
			case apierrors.IsNotFound(err):
			case apierrors.IsTooManyRequests(err):
				// A PodDisruptionBudget allows no disruption now (or the API server is busy).
				blocked[podName(pod)] = err.Error()
			case apierrors.IsForbidden(err) && apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
				// The Pod's namespace is being deleted, which refuses evictions; the namespace
				// controller deletes the Pod, and the next round sees it terminating or gone.
				blocked[podName(pod)] = err.Error()
			default:
				return res, kubeError(err, "create", "eviction of pod "+podName(pod))
			}
		}
		if progressed {
			backoff = a.drainRetry()
		}
		wait := min(backoff, in.Deadline.Sub(a.Now()))
		if err := sleep(ctx, max(wait, 0)); err != nil {
			return res, err
		}
		backoff = min(2*backoff, maxDrainRetry)
	}
}

// maxDrainRetry caps the wait between rounds of evictions a budget refused. Each round
// heartbeats, so it stays well under the activity's heartbeat timeout (30 s), and an abort
// reaches the drain within it.
const maxDrainRetry = 10 * time.Second

func (a *Activities) drainRetry() time.Duration {
	if a.DrainRetryInterval > 0 {
		return a.DrainRetryInterval
	}
	return time.Second
}

// judgePods sorts a node's Pods into those a drain evicts (or waits for, when terminating)
// and, named with why, those it refuses to.
func judgePods(pods []corev1.Pod, rules evictable.Rules) (evict []*corev1.Pod, refused []string) {
	for i := range pods {
		switch v, why := evictable.Judge(&pods[i], rules); v {
		case evictable.Evict:
			evict = append(evict, &pods[i])
		case evictable.Refuse:
			refused = append(refused, podName(&pods[i])+" "+why)
		}
	}
	return evict, refused
}

// toEvict leaves out the Pods already terminating: the drain only waits for them.
func toEvict(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func drainRules(podSelector string, deleteEmptyDirData, force bool) (evictable.Rules, error) {
	rules := evictable.Rules{DeleteEmptyDirData: deleteEmptyDirData, Force: force}
	if podSelector != "" {
		sel, err := labels.Parse(podSelector)
		if err != nil {
			return rules, invalidRequest("maintenance.drain.podSelector", "%q does not parse: %v", podSelector, err)
		}
		rules.Selector = sel
	}
	return rules, nil
}

func drainTimedOut(node string, left []*corev1.Pod, blocked map[string]string) error {
	names := make([]string, 0, len(left))
	for _, p := range left {
		n := podName(p)
		if why, ok := blocked[n]; ok {
			n += " (" + why + ")"
		} else if p.DeletionTimestamp != nil {
			n += " (still terminating)"
		}
		names = append(names, n)
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"drain of node %s timed out with %d Pod(s) left: %s; raise maintenance.drain.timeout or free the PodDisruptionBudgets",
		node, len(left), strings.Join(names, "; ")), api.ErrDrainTimedOut, nil)
}

// podsOnNode lists every Pod bound to the node. One node holds at most a few hundred Pods, so
// one list without paging suffices.
func (a *Activities) podsOnNode(ctx context.Context, node string) ([]corev1.Pod, error) {
	list, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, kubeError(err, "list", "pods on node "+node)
	}
	// The field selector is the API server's to apply; the fake clientset ignores it.
	pods := list.Items[:0]
	for _, p := range list.Items {
		if p.Spec.NodeName == node {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

func podName(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// podReplaced says whether the listed Pod no longer exists: its name is free or held by a Pod
// of another UID.
func (a *Activities) podReplaced(ctx context.Context, listed *corev1.Pod) (bool, error) {
	now, err := a.Kube.CoreV1().Pods(listed.Namespace).Get(ctx, listed.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, kubeError(err, "get", "pod "+podName(listed))
	}
	return now.UID != listed.UID, nil
}

// CheckNodeHealth waits until the node's conditions hold (HealthyBy at the latest), then
// requires them to hold for HoldSeconds; either failing is Unhealthy. An API-server outage only
// delays it: the time the node could not be read (and a grace after, while the control plane
// reports conditions it could not see) extends the deadline and counts nothing toward the
// soak. It heartbeats its progress, so an attempt retried after a worker crash resumes the soak
// where it was instead of starting it over, the gap counted as an outage.
func (a *Activities) CheckNodeHealth(ctx context.Context, in HealthInput) error {
	var p healthProgress
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &p); err != nil {
			// An attempt of a worker from before heartbeated the time alone.
			var since time.Time
			if activity.GetHeartbeatDetails(ctx, &since) == nil {
				p = healthProgress{Since: since}
			}
		}
	}
	hold := time.Duration(in.HoldSeconds) * time.Second
	// away is when the node was last seen before it could not be read (zero: it is seen);
	// back is when reads succeeded again, for the grace.
	away, back := p.Seen, time.Time{}
	for {
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		now := a.Now()
		if apierrors.IsNotFound(err) {
			return errNodeGone(in.Node)
		}
		if err != nil {
			err = kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && appErr.NonRetryable() {
				return err
			}
			if away.IsZero() {
				away = now
			}
			back = time.Time{}
			activity.GetLogger(ctx).Info("the node cannot be read; the health check waits for the API server", "node", in.Node, "error", err)
			if err := a.healthWait(ctx, p); err != nil {
				return err
			}
			continue
		}
		unmet := unmetConditions(node, in.Conditions)
		if !away.IsZero() {
			if back.IsZero() {
				back = now
			}
			if len(unmet) > 0 && now.Sub(back) < outageGrace {
				// Back from an outage: the node lifecycle controller may show Unknown for
				// nodes whose kubelets have not reported since; they do within the grace.
				if err := a.healthWait(ctx, p); err != nil {
					return err
				}
				continue
			}
			p.Blind += now.Sub(away)
			if !p.Since.IsZero() {
				p.BlindSince += now.Sub(away)
			}
			away, back = time.Time{}, time.Time{}
		}
		p.Seen = now
		deadline := in.HealthyBy.Add(p.Blind)
		switch {
		case len(unmet) == 0 && p.Since.IsZero():
			p.Since = now
		case len(unmet) > 0 && !p.Since.IsZero():
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"node %s stopped being healthy %s after it was: %s", in.Node, now.Sub(p.Since).Round(time.Second), strings.Join(unmet, "; ")),
				api.ErrUnhealthy, nil)
		case len(unmet) > 0 && !now.Before(deadline):
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"node %s was not healthy in time: %s; see maintenance.health", in.Node, strings.Join(unmet, "; ")),
				api.ErrUnhealthy, nil)
		}
		if !p.Since.IsZero() && now.Sub(p.Since)-p.BlindSince >= hold {
			return nil
		}
		if err := a.healthWait(ctx, p); err != nil {
			return err
		}
	}
}

// healthProgress is what CheckNodeHealth heartbeats, for a retried attempt to resume from.
type healthProgress struct {
	// Since is when the conditions were first seen holding; zero: not yet.
	Since time.Time `json:"since"`
	// Blind is how long the node could not be seen (outages, the grace after, the gaps between
	// attempts): the deadline moves by it. BlindSince is the part after Since, which the soak
	// does not count.
	Blind      time.Duration `json:"blind,omitempty"`
	BlindSince time.Duration `json:"blindSince,omitempty"`
	// Seen is the last time the node was read.
	Seen time.Time `json:"seen"`
}

// outageGrace is how long after an outage unmet conditions are taken for the control plane
// catching up (node-monitor-grace-period, 50 s, plus the kubelets' next status reports).
const outageGrace = 2 * time.Minute

// healthWait heartbeats the progress and waits for the next read.
func (a *Activities) healthWait(ctx context.Context, p healthProgress) error {
	activity.RecordHeartbeat(ctx, p)
	return sleep(ctx, a.healthPoll())
}

func (a *Activities) healthPoll() time.Duration {
	if a.HealthPollInterval > 0 {
		return a.HealthPollInterval
	}
	return 2 * time.Second
}

// unmetConditions names each wanted condition the node does not report with the wanted status;
// a condition it does not report at all is unmet.
func unmetConditions(node *corev1.Node, want map[string]string) []string {
	have := map[string]corev1.NodeCondition{}
	for _, c := range node.Status.Conditions {
		have[string(c.Type)] = c
	}
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unmet []string
	for _, k := range keys {
		c, ok := have[k]
		switch {
		case !ok:
			unmet = append(unmet, fmt.Sprintf("%s is not reported (want %s)", k, want[k]))
		case string(c.Status) != want[k]:
			unmet = append(unmet, fmt.Sprintf("%s=%s (want %s): %s %s", k, c.Status, want[k], c.Reason, c.Message))
		}
	}
	return unmet
}

// PlanDrain says, for a dry run, which Pods a drain of each node would evict or refuse, and
// which PodDisruptionBudgets allow no disruption now and cover one of them.
func (a *Activities) PlanDrain(ctx context.Context, in DrainPlanInput) ([]api.DrainPlan, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	rules, err := drainRules(in.PodSelector, in.DeleteEmptyDirData, in.Force)
	if err != nil {
		return nil, err
	}
	pdbs, err := a.Kube.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, kubeError(err, "list", "poddisruptionbudgets")
	}
	plans := make([]api.DrainPlan, 0, len(in.Nodes))
	for _, node := range in.Nodes {
		pods, err := a.podsOnNode(ctx, node)
		if err != nil {
			return nil, err
		}
		plan := api.DrainPlan{Node: node}
		blocking := map[string]bool{}
		for i := range pods {
			pod := &pods[i]
			switch v, why := evictable.Judge(pod, rules); v {
			case evictable.Refuse:
				plan.Refused = append(plan.Refused, podName(pod)+" "+why)
			case evictable.Evict:
				plan.Evict = append(plan.Evict, podName(pod))
				for _, pdb := range pdbs.Items {
					if pdb.Namespace != pod.Namespace || pdb.Status.DisruptionsAllowed > 0 {
						continue
					}
					// As the Eviction API matches: an empty selector ({}) covers the whole
					// namespace in policy/v1, a missing one nothing.
					sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
					if err == nil && sel.Matches(labels.Set(pod.Labels)) {
						blocking[pdb.Namespace+"/"+pdb.Name] = true
					}
				}
			}
		}
		for name := range blocking {
			plan.Blocking = append(plan.Blocking, name)
		}
		sort.Strings(plan.Blocking)
		plans = append(plans, plan)
		activity.RecordHeartbeat(ctx, node)
	}
	return plans, nil
}

func errNodeGone(node string) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("node %s no longer exists", node), api.ErrNodeGone, nil)
}

// sleep waits d or until the activity is cancelled.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
