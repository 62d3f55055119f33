package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
)

// Maintenance is the request's per-node maintenance: the node is taken out of service before
// its Job (cordon, drain), and its slot frees only once it is healthy again (health, soak).
type Maintenance struct {
	// Cordon marks the node unschedulable before the Job and, if we cordoned it, schedulable
	// again after the node succeeded.
	Cordon bool `json:"cordon,omitempty"`
	// Drain evicts the node's Pods before the Job (and implies cordon).
	Drain *Drain `json:"drain,omitempty"`
	// Health must hold after the Job succeeded; soak alone checks Ready=True.
	Health *HealthGate `json:"health,omitempty"`
	// Soak is how long the node must stay healthy before its slot frees ("2m").
	Soak string `json:"soak,omitempty"`
	// OnFailure is what a node that did not succeed (or was aborted) is left as:
	// keepCordoned (default) or uncordon. Either way only our own cordon is ever undone.
	OnFailure string `json:"onFailure,omitempty"`
}

// Drain evicts through the Eviction API, so PodDisruptionBudgets are honoured.
type Drain struct {
	Timeout            string `json:"timeout,omitempty"`     // default 10m; then the node is drainTimedOut
	PodSelector        string `json:"podSelector,omitempty"` // only these Pods
	DeleteEmptyDirData bool   `json:"deleteEmptyDirData,omitempty"`
	// Force evicts Pods that no controller manages too (kubectl drain --force): nothing makes
	// them again elsewhere. Without it such a Pod stops the drain before any eviction.
	Force       bool   `json:"force,omitempty"`
	GracePeriod string `json:"gracePeriod,omitempty"` // overrides the Pods' own
}

// HealthGate names the Node conditions that must hold, and how long they may take to.
type HealthGate struct {
	Timeout    string            `json:"timeout,omitempty"`    // default 10m
	Conditions map[string]string `json:"conditions,omitempty"` // default {"Ready": "True"}
}

// Defaults and limits of the maintenance section.
const (
	OnFailureKeepCordoned       = "keepCordoned"
	OnFailureUncordon           = "uncordon"
	DefaultDrainTimeout         = 10 * time.Minute
	DefaultHealthTimeout        = 10 * time.Minute
	maxMaintenanceStep          = 24 * time.Hour
	maxGracePeriod              = time.Hour
	maintenanceHeartbeatTimeout = waitHeartbeatTimeout
)

// NodeMaintenance is the validated maintenance section as a child receives it.
type NodeMaintenance struct {
	Cordon               bool              `json:"cordon,omitempty"`
	Drain                bool              `json:"drain,omitempty"`
	DrainTimeoutSeconds  int64             `json:"drainTimeoutSeconds,omitempty"`
	PodSelector          string            `json:"podSelector,omitempty"`
	DeleteEmptyDirData   bool              `json:"deleteEmptyDirData,omitempty"`
	Force                bool              `json:"force,omitempty"`
	GracePeriodSeconds   *int64            `json:"gracePeriodSeconds,omitempty"`
	Health               bool              `json:"health,omitempty"`
	HealthTimeoutSeconds int64             `json:"healthTimeoutSeconds,omitempty"`
	Conditions           map[string]string `json:"conditions,omitempty"`
	SoakSeconds          int64             `json:"soakSeconds,omitempty"`
	UncordonOnFailure    bool              `json:"uncordonOnFailure,omitempty"`
}

// checkMaintenance validates the section; nodeMaintenance reads it with defaults applied.
func checkMaintenance(m *Maintenance) []*jobspec.FieldError {
	_, ps := readMaintenance(m)
	return ps
}

// nodeMaintenance is the section as children get it; nil when the request has none. Call it on
// a validated request.
func nodeMaintenance(m *Maintenance) *NodeMaintenance {
	nm, _ := readMaintenance(m)
	return nm
}

func readMaintenance(m *Maintenance) (*NodeMaintenance, []*jobspec.FieldError) {
	if m == nil {
		return nil, nil
	}
	var ps []*jobspec.FieldError
	add := func(field, what, fix string) { ps = append(ps, problem(field, what, fix)) }
	nm := &NodeMaintenance{Cordon: m.Cordon || m.Drain != nil}
	if d := m.Drain; d != nil {
		nm.Drain = true
		nm.DrainTimeoutSeconds = seconds(parseDuration(d.Timeout, DefaultDrainTimeout, time.Second, maxMaintenanceStep, "maintenance.drain.timeout", add))
		if d.PodSelector != "" {
			//workflowcheck:ignore
			if _, err := labels.Parse(d.PodSelector); err != nil {
				add("maintenance.drain.podSelector", fmt.Sprintf("%q does not parse: %v", d.PodSelector, err), "write a label selector such as \"app=web\", or omit it to evict every Pod")
			}
		}
		nm.PodSelector = d.PodSelector
		nm.DeleteEmptyDirData = d.DeleteEmptyDirData
		nm.Force = d.Force
		if d.GracePeriod != "" {
			g := seconds(parseDuration(d.GracePeriod, 0, 0, maxGracePeriod, "maintenance.drain.gracePeriod", add))
			nm.GracePeriodSeconds = &g
		}
	}
	soak := parseDuration(m.Soak, 0, 0, maxMaintenanceStep, "maintenance.soak", add)
	nm.SoakSeconds = seconds(soak)
	if m.Health != nil || soak > 0 {
		nm.Health = true
		nm.Conditions = map[string]string{"Ready": "True"}
		timeout := DefaultHealthTimeout
		if h := m.Health; h != nil {
			timeout = parseDuration(h.Timeout, DefaultHealthTimeout, time.Second, maxMaintenanceStep, "maintenance.health.timeout", add)
			if len(h.Conditions) > 0 {
				nm.Conditions = h.Conditions
			}
			for _, k := range workflow.DeterministicKeys(h.Conditions) {
				switch v := h.Conditions[k]; {
				case k == "":
					add("maintenance.health.conditions", "has an empty condition type", "name Node conditions such as Ready")
				case v != "True" && v != "False" && v != "Unknown":
					add("maintenance.health.conditions."+k, fmt.Sprintf("%q is not a condition status", v), "use \"True\", \"False\" or \"Unknown\"")
				}
			}
		}
		nm.HealthTimeoutSeconds = seconds(timeout)
	}
	switch m.OnFailure {
	case "", OnFailureKeepCordoned:
	case OnFailureUncordon:
		nm.UncordonOnFailure = true
	default:
		add("maintenance.onFailure", fmt.Sprintf("%q is not allowed", m.OnFailure), "use keepCordoned or uncordon")
	}
	if !nm.Cordon && !nm.Health {
		add("maintenance", "asks for nothing", "set cordon, drain, health or soak, or remove the section")
	}
	return nm, ps
}

func seconds(d time.Duration) int64 { return int64(d / time.Second) }

// maintenanceCordons says whether the section cordons nodes (a drain implies it).
func maintenanceCordons(m *Maintenance) bool {
	return m != nil && (m.Cordon || m.Drain != nil)
}

// runMaintained is the node's rollout with maintenance around the Job: cordon → drain → Job →
// health → soak → uncordon. A node that does not succeed, or is aborted, is left as onFailure
// says: keepCordoned keeps our cordon (a half-drained or half-updated node stays out of
// service for someone to look at), uncordon lifts it. A cordon someone else made is never
// lifted.
func (n *nodeSteps) runMaintained(ctx workflow.Context) (NodeResult, error) {
	var a *activities.Activities
	m, in := n.in.Maintenance, n.in
	result := NodeResult{Node: in.Node, StartedAt: workflow.Now(ctx)}
	// The namespace is the rollout's: its policy rules judge the cordon and the drain, and the
	// cordon knows the drain that follows, so the policy can refuse it before anything is written.
	node := activities.NodeInput{Rollout: in.Rollout, Node: in.Node, Namespace: in.Namespace,
		Drain: m.Drain, PodSelector: m.PodSelector, DeleteEmptyDirData: m.DeleteEmptyDirData, Force: m.Force}
	if m.Cordon {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("cordoning node `%s`", in.Node))
		setStep(ctx, NodeStepCordon, 0, "")
		// Until the cordon answers, it may have gone through: UncordonNode reads our annotation.
		n.mayHaveCordoned = true
		var c activities.CordonResult
		err := workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "cordon node "+in.Node), a.CordonNode, node).Get(ctx, &c)
		if err != nil {
			return n.maintenanceFailed(ctx, err, result)
		}
		n.mayHaveCordoned = c.WeCordoned
		if !c.WeCordoned {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` was already cordoned by someone else; it stays cordoned", in.Node))
		}
	}
	if m.Drain {
		timeout := time.Duration(m.DrainTimeoutSeconds) * time.Second
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("draining node `%s` (timeout %v)", in.Node, timeout))
		setStep(ctx, NodeStepDrain, m.DrainTimeoutSeconds, "")
		drain := activities.DrainInput{Node: in.Node, Namespace: in.Namespace, PodSelector: m.PodSelector, DeleteEmptyDirData: m.DeleteEmptyDirData,
			Force: m.Force, GracePeriodSeconds: m.GracePeriodSeconds, Deadline: workflow.Now(ctx).Add(timeout)}
		err := workflow.ExecuteActivity(withMaintenanceActivity(ctx, timeout, "drain node "+in.Node), a.DrainNode, drain).Get(ctx, nil)
		if err != nil {
			return n.maintenanceFailed(ctx, err, result)
		}
	}
	done, err := n.runJob(ctx)
	done.StartedAt = result.StartedAt
	if err != nil {
		n.leave(ctx)
		return done, err
	}
	if m.Health {
		timeout := time.Duration(m.HealthTimeoutSeconds) * time.Second
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting for node `%s` to be healthy (%s, timeout %v)", in.Node, conditionList(m.Conditions), timeout))
		setStep(ctx, NodeStepHealth, m.HealthTimeoutSeconds, "")
		health := activities.HealthInput{Node: in.Node, Conditions: m.Conditions, HealthyBy: workflow.Now(ctx).Add(timeout)}
		err := workflow.ExecuteActivity(withHealthActivity(ctx, timeout, "health gate on node "+in.Node), a.CheckNodeHealth, health).Get(ctx, nil)
		if err == nil && m.SoakSeconds > 0 {
			soak := time.Duration(m.SoakSeconds) * time.Second
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("soaking node `%s` for %v", in.Node, soak))
			setStep(ctx, NodeStepSoak, m.SoakSeconds, "")
			health.HealthyBy, health.HoldSeconds = workflow.Now(ctx), m.SoakSeconds
			err = workflow.ExecuteActivity(withHealthActivity(ctx, soak, "soak node "+in.Node), a.CheckNodeHealth, health).Get(ctx, nil)
		}
		if err != nil {
			return n.maintenanceFailed(ctx, err, done)
		}
	}
	if n.mayHaveCordoned {
		if err := n.uncordon(ctx); err != nil {
			if isCancel(ctx, err) && workflow.GetVersion(ctx, versionAbortDuringUncordon, workflow.DefaultVersion, 1) == 1 {
				// An abort, not an API error: the node ends aborted, uncharged, its cordon left
				// as onFailure says and the abort recorded over the Job's success.
				return n.maintenanceFailed(ctx, err, done)
			}
			end := endFromError(err)
			end.Message = "the Job succeeded but the node could not be uncordoned: " + end.Message
			return n.finalize(ctx, nil, end, done)
		}
	}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s`: **%s**", in.Node, done.Outcome))
	return done, nil
}

// maintenanceFailed ends a node whose maintenance step failed or was aborted: the node is
// left as onFailure says and the outcome recorded on it (replacing the Job's, when health
// failed after it).
func (n *nodeSteps) maintenanceFailed(ctx workflow.Context, err error, result NodeResult) (NodeResult, error) {
	n.leave(ctx)
	if isCancel(ctx, err) {
		jobRecorded := result.Outcome == activities.OutcomeSucceeded
		result.Outcome = activities.OutcomeAborted
		result.Reason = activities.ReasonAborted
		result.FinishedAt = workflow.Now(ctx)
		if jobRecorded && workflow.GetVersion(ctx, versionRecordAbortAfterJob, workflow.DefaultVersion, 1) == 1 {
			n.recordAbort(ctx)
		}
		return result, temporal.NewCanceledError(result)
	}
	end := endFromError(err)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		switch appErr.Type() {
		case activities.ErrDrainTimedOut:
			end.Outcome = activities.OutcomeDrainTimedOut
		case activities.ErrUnhealthy:
			end.Outcome = activities.OutcomeUnhealthy
		}
	}
	return n.finalize(ctx, nil, end, result)
}

// versionAbortDuringUncordon marks nodes aborted while their cordon was being lifted after a
// success, which end aborted (onFailure, the abort recorded) instead of failing with the
// cancelled uncordon as an API error. It is asked only on that path.
const versionAbortDuringUncordon = "abort-during-uncordon"

// versionRecordAbortAfterJob marks nodes that, aborted in their health gate or soak after the
// Job's success was recorded on the Node, record the abort over it. It is asked only on that
// path, so no other node's history carries its marker.
const versionRecordAbortAfterJob = "record-abort-after-job"

// recordAbort replaces the succeeded marker the Job left on the Node with aborted, so a re-run
// covers the node again (it skips only nodes marked succeeded). It runs on a context the abort
// cannot cancel; should it fail for good, the node's result still says aborted.
func (n *nodeSteps) recordAbort(ctx workflow.Context) {
	var a *activities.Activities
	in := n.in
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	end := activities.JobEnd{Outcome: activities.OutcomeAborted, Reason: activities.ReasonAborted,
		Message: "aborted after the Job succeeded, before the node's rollout finished (health, soak or uncordon)"}
	err := workflow.ExecuteLocalActivity(withLocalAPIActivity(cleanup, n.writeDeadline(), "record aborted"), a.FinalizeJob, activities.FinalizeInput{
		Rollout:      in.Rollout,
		Node:         in.Node,
		TemplateHash: in.TemplateHash,
		End:          end,
		KeepJobs:     in.KeepJobs,
		Requester:    in.Requester,
		RunID:        workflow.GetInfo(ctx).WorkflowExecution.RunID,
	}).Get(cleanup, nil)
	if err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s`: the abort could not be recorded on the Node: %v", in.Node, err))
	}
}

// leave undoes our cordon of a node that did not succeed, when onFailure says so. It runs on a
// context an abort cannot cancel.
func (n *nodeSteps) leave(ctx workflow.Context) {
	m := n.in.Maintenance
	if !n.mayHaveCordoned {
		return
	}
	if !m.UncordonOnFailure {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` is kept cordoned (maintenance.onFailure: keepCordoned)", n.in.Node))
		return
	}
	cleanup, _ := workflow.NewDisconnectedContext(ctx)
	if err := n.uncordon(cleanup); err != nil {
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("node `%s` could not be uncordoned: %v", n.in.Node, err))
	}
}

// uncordon lifts our cordon; a cordon that is not ours stays.
func (n *nodeSteps) uncordon(ctx workflow.Context) error {
	var a *activities.Activities
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("uncordoning node `%s` if we cordoned it", n.in.Node))
	setStep(ctx, NodeStepUncordon, 0, "")
	return workflow.ExecuteLocalActivity(withLocalAPIActivity(ctx, n.writeDeadline(), "uncordon node "+n.in.Node), a.UncordonNode,
		activities.NodeInput{Rollout: n.in.Rollout, Node: n.in.Node}).Get(ctx, nil)
}

// withMaintenanceActivity is for the drain and the health checks: they heartbeat, so a crashed
// worker's attempt is noticed within the heartbeat timeout and the next resumes (each enforces
// its own deadline, fixed in its input); an abort waits until the attempt has stopped.
// Heartbeating activities rather than timers: three history events per step however long it
// takes, where polling by timers would add events for every check.
func withMaintenanceActivity(ctx workflow.Context, step time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    step + 5*time.Minute,
		ScheduleToCloseTimeout: step + writeDeadlineMargin,
		HeartbeatTimeout:       maintenanceHeartbeatTimeout,
		RetryPolicy:            apiRetry,
		WaitForCancellation:    true,
		Summary:                summary,
	})
}

// withHealthActivity is withMaintenanceActivity without a ScheduleToClose: the health gate and
// the soak enforce their own deadlines, moved by the time the node could not be read, so an
// API-server outage of any length only delays the node; each attempt resumes from the last's
// heartbeat. (Timeouts are no part of what replay compares, so running histories replay.)
func withHealthActivity(ctx workflow.Context, step time.Duration, summary string) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: step + 5*time.Minute,
		HeartbeatTimeout:    maintenanceHeartbeatTimeout,
		RetryPolicy:         apiRetry,
		WaitForCancellation: true,
		Summary:             summary,
	})
}

func conditionList(c map[string]string) string {
	s := ""
	for _, k := range workflow.DeterministicKeys(c) {
		if s != "" {
			s += ", "
		}
		s += k + "=" + c[k]
	}
	return s
}

// maxDrainPlanNodes bounds the nodes one PlanDrain call looks at.
const maxDrainPlanNodes = 100

// planDrains fills in, for a dry run with a drain, the Pods each node's drain would evict and
// the PodDisruptionBudgets that would block it.
func planDrains(ctx workflow.Context, m *Maintenance, planned []PlannedNode) error {
	nm := nodeMaintenance(m)
	if nm == nil || !nm.Drain {
		return nil
	}
	var a *activities.Activities
	var names []string
	at := map[string]int{}
	for i, p := range planned {
		if p.Skip == "" {
			names = append(names, p.Node)
			at[p.Node] = i
		}
	}
	for len(names) > 0 {
		batch := names[:min(len(names), maxDrainPlanNodes)]
		names = names[len(batch):]
		var plans []activities.DrainPlan
		err := workflow.ExecuteActivity(withAPIActivity(ctx, fmt.Sprintf("plan the drain of %d nodes", len(batch))), a.PlanDrain,
			activities.DrainPlanInput{Nodes: batch, PodSelector: nm.PodSelector, DeleteEmptyDirData: nm.DeleteEmptyDirData, Force: nm.Force}).Get(ctx, &plans)
		if err != nil {
			return asWorkflowError(err)
		}
		for _, p := range plans {
			plan := p
			planned[at[p.Node]].Drain = &plan
		}
	}
	return nil
}
