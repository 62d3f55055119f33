package api

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Reboot makes a reboot a step of the node's maintenance: after the node's Job succeeded, a
// second Job (the reboot Job) reboots the node, and the node counts as back when its boot ID
// changed and its health conditions hold.
type Reboot struct {
	// When: always (default), or ifRequested: only when the node's Job asked for it by ending
	// with the termination message RebootRequiredMessage.
	When string `json:"when,omitempty"`
	// The reboot Job's template, exactly one of inline YAML and a ConfigMap; {{node}} is the
	// node. Its Pod dying with the node is expected; it is run once (backoffLimit 0).
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`
	// Timeout is how long the node may take to come back, from the reboot Job's creation
	// (default 15m); then the node is rebootTimedOut.
	Timeout string `json:"timeout,omitempty"`
}

// OnSuccess marks a node done after its soak, before its slot frees: only the keys named here
// are touched.
type OnSuccess struct {
	Labels       map[string]string `json:"labels,omitempty"`
	RemoveTaints []string          `json:"removeTaints,omitempty"`
	AddTaints    []Taint           `json:"addTaints,omitempty"`
}

// Taint is a Node taint onSuccess adds (replacing one of the same key and effect).
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// Values of maintenance.reboot.when and the message a Job ends with to ask for a reboot.
const (
	RebootAlways      = "always"
	RebootIfRequested = "ifRequested"
	// RebootRequiredMessage, as a container's termination message (written to
	// /dev/termination-log, or its last log line with terminationMessagePolicy
	// FallbackToLogsOnError), asks for the reboot when maintenance.reboot.when is ifRequested.
	RebootRequiredMessage = "reboot-required"
	DefaultRebootTimeout  = 15 * time.Minute
)

// NodeReboot is maintenance.reboot as a node receives it. TemplateHash names the reboot Job's
// template, stored by the rollout when it started.
type NodeReboot struct {
	When           string `json:"when"`
	TimeoutSeconds int64  `json:"timeoutSeconds"`
	TemplateHash   string `json:"templateHash,omitempty"`
}

// Always says whether the node reboots whatever its Job said.
func (r *NodeReboot) Always() bool { return r.When != RebootIfRequested }

var rebootTimeoutField = durationField{"maintenance.reboot.timeout", DefaultRebootTimeout, time.Second, maxMaintenanceStep}

func (r *Reboot) resolve() *NodeReboot {
	if r == nil {
		return nil
	}
	when := r.When
	if when == "" {
		when = RebootAlways
	}
	return &NodeReboot{When: when, TimeoutSeconds: seconds(rebootTimeoutField.read(r.Timeout))}
}

func (r *Reboot) check(ps *problems) {
	if r == nil {
		return
	}
	switch r.When {
	case "", RebootAlways, RebootIfRequested:
	default:
		ps.add("maintenance.reboot.when", fmt.Sprintf("%q is not allowed", r.When), "use always, or ifRequested (the node's Job ends with the termination message \"reboot-required\")")
	}
	checkStepTemplate(ps, "maintenance.reboot", r.JobTemplate, r.JobTemplateRef, "the Job that reboots the node (e.g. a privileged Pod running `systemctl reboot` through nsenter)")
	rebootTimeoutField.check(ps, r.Timeout)
}

// checkStepTemplate checks a second Job's template: exactly one of inline and by reference.
func checkStepTemplate(ps *problems, field, inline string, ref *TemplateRef, what string) {
	switch {
	case inline != "" && ref != nil:
		ps.add(field+".jobTemplate", "is set together with "+field+".jobTemplateRef", "give the template inline or by ConfigMap reference, not both")
	case inline == "" && ref == nil:
		ps.add(field+".jobTemplate", "is required", "set "+field+".jobTemplate to "+what+" as batch/v1 Job YAML, or "+field+".jobTemplateRef to the ConfigMap holding it")
	case len(inline) > MaxTemplateBytes:
		ps.add(field+".jobTemplate", fmt.Sprintf("is %d bytes, more than %d", len(inline), MaxTemplateBytes), "shrink the template")
	case ref != nil && ref.Name == "":
		ps.add(field+".jobTemplateRef.name", "is required", "name the ConfigMap that holds the Job template")
	}
}

func (o *OnSuccess) check(ps *problems) {
	if o == nil {
		return
	}
	if len(o.Labels) == 0 && len(o.RemoveTaints) == 0 && len(o.AddTaints) == 0 {
		ps.add("maintenance.onSuccess", "asks for nothing", "set labels, removeTaints or addTaints, or remove the section")
	}
	// Sorted, so in the keys' order, never the map's.
	//workflowcheck:ignore
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			ps.add("maintenance.onSuccess.labels", fmt.Sprintf("%q is not a label key (%s)", k, strings.Join(errs, ", ")), "use a key such as \"example.com/gpu-driver\"")
		}
		if errs := validation.IsValidLabelValue(o.Labels[k]); len(errs) > 0 {
			ps.add("maintenance.onSuccess.labels."+k, fmt.Sprintf("%q is not a label value (%s)", o.Labels[k], strings.Join(errs, ", ")), "use at most 63 letters, digits, '-', '_' and '.'")
		}
	}
	for i, k := range o.RemoveTaints {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			ps.add(fmt.Sprintf("maintenance.onSuccess.removeTaints[%d]", i), fmt.Sprintf("%q is not a taint key", k), "name the key of the taint to lift, such as \"example.com/driver-not-ready\"")
		}
	}
	for i, t := range o.AddTaints {
		field := fmt.Sprintf("maintenance.onSuccess.addTaints[%d]", i)
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			ps.add(field+".key", fmt.Sprintf("%q is not a taint key", t.Key), "use a key such as \"example.com/maintenance\"")
		}
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			ps.add(field+".value", fmt.Sprintf("%q is not a taint value", t.Value), "use at most 63 letters, digits, '-', '_' and '.'")
		}
		switch t.Effect {
		case "NoSchedule", "PreferNoSchedule", "NoExecute":
		default:
			ps.add(field+".effect", fmt.Sprintf("%q is not a taint effect", t.Effect), "use NoSchedule, PreferNoSchedule or NoExecute")
		}
		if slices.Contains(o.RemoveTaints, t.Key) {
			ps.add(field+".key", fmt.Sprintf("%q is both added and removed", t.Key), "name each taint key in addTaints or removeTaints, not both")
		}
	}
}

// BlockingPodsGate: a label selector of Pods that must not be running on the node when it starts.
type BlockingPodsGate struct {
	Selector string `json:"selector"`
	// Timeout is how long the node waits (default 1h); then it is blocked.
	Timeout string `json:"timeout,omitempty"`
}

// CheckJobGate: a Job template run on the node after its Job; its failure fails the node
// (checkFailed).
type CheckJobGate struct {
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`
	// Timeout bounds the check Job (default 30m); a check that runs longer fails the node.
	Timeout string `json:"timeout,omitempty"`
}

// Defaults of the gates.
const (
	DefaultBlockingPodsTimeout = time.Hour
	DefaultCheckJobTimeout     = 30 * time.Minute
)

var (
	blockingPodsTimeoutField = durationField{"gates.blockingPods.timeout", DefaultBlockingPodsTimeout, time.Second, maxMaintenanceStep}
	checkJobTimeoutField     = durationField{"gates.checkJob.timeout", DefaultCheckJobTimeout, time.Second, MaxJobTimeout}
)

// NodeBlockingPods is gates.blockingPods as a node receives it.
type NodeBlockingPods struct {
	Selector       string `json:"selector"`
	TimeoutSeconds int64  `json:"timeoutSeconds"`
}

// NodeCheckJob is gates.checkJob as a node receives it; TemplateHash names its stored template.
type NodeCheckJob struct {
	TimeoutSeconds int64  `json:"timeoutSeconds"`
	TemplateHash   string `json:"templateHash,omitempty"`
}

func (g *Gates) check(ps *problems) {
	if g == nil {
		return
	}
	g.checkPrometheus(ps)
	if b := g.BlockingPods; b != nil {
		//workflowcheck:ignore
		if sel, err := labels.Parse(b.Selector); err != nil {
			ps.add("gates.blockingPods.selector", fmt.Sprintf("%q does not parse: %v", b.Selector, err), "write a label selector such as \"app=training\"")
		} else if sel.Empty() {
			ps.add("gates.blockingPods.selector", "is empty: every Pod would block the node", "write a label selector such as \"app=training\"")
		}
		blockingPodsTimeoutField.check(ps, b.Timeout)
	}
	if c := g.CheckJob; c != nil {
		checkStepTemplate(ps, "gates.checkJob", c.JobTemplate, c.JobTemplateRef, "the check (e.g. a GPU burn-in)")
		checkJobTimeoutField.check(ps, c.Timeout)
	}
}

// withGates adds the node gates to the maintenance a node receives; a request with gates and
// no maintenance section gets a section with the gates alone.
func (g *Gates) withGates(nm *NodeMaintenance) *NodeMaintenance {
	if g == nil || (g.BlockingPods == nil && g.CheckJob == nil) {
		return nm
	}
	if nm == nil {
		nm = &NodeMaintenance{}
	}
	if b := g.BlockingPods; b != nil {
		nm.BlockingPods = &NodeBlockingPods{Selector: b.Selector, TimeoutSeconds: seconds(blockingPodsTimeoutField.read(b.Timeout))}
	}
	if c := g.CheckJob; c != nil {
		nm.CheckJob = &NodeCheckJob{TimeoutSeconds: seconds(checkJobTimeoutField.read(c.Timeout))}
	}
	return nm
}

// RebootConditions are the conditions a rebooted node must meet to count as back: the health
// gate's, or Ready=True.
func (nm *NodeMaintenance) RebootConditions() map[string]string {
	if len(nm.Conditions) > 0 {
		return nm.Conditions
	}
	return map[string]string{"Ready": "True"}
}
