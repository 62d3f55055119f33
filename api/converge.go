package api

import (
	"fmt"
	"time"
)

// Converge mode: a rollout that keeps every node its selector matches at its template, until
// it is aborted or replaced (workflows/converge.go; the worker's Node watch tells it of
// changes).

// Modes of a rollout.
const (
	ModeOnce     = "once"     // the default: one pass over the selected nodes, then the rollout ends
	ModeConverge = "converge" // after the first pass, nodes that join or drift are run again
)

// Names the worker and the Rollout workflow share for converge mode.
const (
	// SignalNodesChanged tells a converging rollout which nodes changed (NodesChanged).
	SignalNodesChanged = "nodes-changed"
	// UpdateReplace hands a converging rollout over to a new request of the same name.
	UpdateReplace = "replace"
	// MemoMode is the memo key that marks a converging rollout for the worker's Node watch.
	MemoMode = "mode"
)

// DeselectJob is the Job a converging rollout runs once on a node that stops matching its
// selector (an uninstall).
type DeselectJob struct {
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`
}

// NodesChanged is the payload of SignalNodesChanged: the nodes whose state may now differ from
// what the rollout wants, or Resync to look at every selected node (the worker's first list
// after it started, which catches whatever it missed while it was down).
type NodesChanged struct {
	Nodes  []string `json:"nodes,omitempty"`
	Resync bool     `json:"resync,omitempty"`
}

// ReplaceResult answers UpdateReplace.
type ReplaceResult struct {
	PreviousTemplateHash string `json:"previousTemplateHash"`
}

// ConvergeProgress is a converging rollout's state, carried across continue-as-new.
type ConvergeProgress struct {
	// DeselectHash is the stored onDeselect template's hash ("" without onDeselect).
	DeselectHash string `json:"deselectHash,omitempty"`
	// Changed are the nodes told of and not yet checked; Resync asks for a look at every one.
	Changed []string `json:"changed,omitempty"`
	Resync  bool     `json:"resync,omitempty"`
	// AtTemplate is how many selected nodes were at the template when last counted.
	AtTemplate int       `json:"atTemplate"`
	LastChange time.Time `json:"lastChange,omitempty"`
	// RetryAt are the failed nodes to run again (retryFailedAfter), by when.
	RetryAt map[string]time.Time `json:"retryAt,omitempty"`
	// Replacement is the request this rollout hands over to once its nodes in flight end.
	Replacement *RolloutRequest `json:"replacement,omitempty"`
}

// ConvergeStatus is what the status query says of a converging rollout.
type ConvergeStatus struct {
	AtTemplate int       `json:"atTemplate"`
	Pending    int       `json:"pending"`
	LastChange time.Time `json:"lastChange,omitempty"`
	Replacing  bool      `json:"replacing,omitempty"`
}

// retryFailedAfterField bounds retryFailedAfter: at least a minute, at most 30 days.
var retryFailedAfterField = durationField{"retryFailedAfter", 0, time.Minute, 30 * 24 * time.Hour}

// RetryFailedAfterDuration is retryFailedAfter's duration; 0 when unset (never retry).
func (r RolloutRequest) RetryFailedAfterDuration() time.Duration {
	return retryFailedAfterField.read(r.RetryFailedAfter)
}

// Converging says the request asks for converge mode.
func (r RolloutRequest) Converging() bool { return r.Mode == ModeConverge }

// RetriedByConverge says a converging rollout with retryFailedAfter runs a node again after
// this outcome: a failure of its Job or of a step around it (a node that has not come back
// from its reboot is run again only once it is Ready), and a node its blocking Pods kept from
// starting. The node must still be selected and Ready then, and its marker must still record
// this outcome of this template.
func RetriedByConverge(o Outcome) bool {
	switch o {
	case OutcomeFailed, OutcomeTimedOut, OutcomeDrainTimedOut, OutcomeUnhealthy,
		OutcomeRebootTimedOut, OutcomeCheckFailed, OutcomeBlocked:
		return true
	}
	return false
}

// checkConverge checks mode and onDeselect.
func (r RolloutRequest) checkConverge(ps *problems) {
	switch r.Mode {
	case "", ModeOnce, ModeConverge:
	default:
		ps.add("mode", fmt.Sprintf("%q is not a mode", r.Mode), "use once (the default) or converge")
	}
	if r.Converging() {
		if len(r.Nodes) > 0 {
			ps.add("mode", "converge keeps the nodes a selector matches, and nodes lists names", "select the nodes with nodeSelector (label them), or omit mode for one pass over the named nodes")
		} else if r.NodeSelector == "" {
			ps.add("mode", "converge needs a nodeSelector: it watches which nodes the labels select", "set nodeSelector to a label selector such as \"pool=gpu\"")
		}
		if r.DryRun {
			ps.add("mode", "converge with dryRun: a dry run lists the nodes once", "omit mode for a dry run")
		}
	}
	if r.RetryFailedAfter != "" {
		retryFailedAfterField.check(ps, r.RetryFailedAfter)
		if !r.Converging() {
			ps.add("retryFailedAfter", "is set without mode: converge; a rollout that runs once retries nothing", "set mode: converge, or remove retryFailedAfter")
		}
	}
	d := r.OnDeselect
	if d == nil {
		return
	}
	if !r.Converging() {
		ps.add("onDeselect", "is set without mode: converge; only a converging rollout sees nodes leave its selector", "set mode: converge, or remove onDeselect")
	}
	checkJobSource(ps, d.JobTemplate, d.JobTemplateRef, jobSourceWords{
		prefix: "onDeselect.", job: "uninstall Job", refHolds: "uninstall Job",
		noneField: "onDeselect", none: "names no Job",
		noneHint: "set onDeselect.jobTemplate to a batch/v1 Job YAML, or onDeselect.jobTemplateRef to its ConfigMap",
	})
}
