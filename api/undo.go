package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Undo: a request's `undo` template is the Job that takes a node back from what the request's
// own template did (an uninstall, a downgrade). `starter undo NAME` runs it, as a rollout of
// its own, on every node the rollout NAME changed; `maintenance.onFailure: undo` runs it on a
// node whose Job or health gate failed, before the node is released.

// UndoTemplate is the request's undo Job: inline or by ConfigMap, like jobTemplate.
type UndoTemplate struct {
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`
}

// UndoOf makes a request the undo of another rollout: its nodes are those the rollout Rollout
// changed, read from their markers, failed ones first, then in reverse order of completion.
// `starter undo` sets it; the request's own template is the undone rollout's undo template.
type UndoOf struct {
	Rollout string `json:"rollout"`
	// To keeps only the nodes whose template before Rollout's was this hash (or its prefix).
	To string `json:"to,omitempty"`
}

// OnFailureUndo is maintenance.onFailure's third choice: the node runs the undo template
// before it is released, and stays cordoned if the undo fails too.
const OnFailureUndo = "undo"

// OrderGiven starts the nodes in the order the request's nodes list names them.
const OrderGiven = "given"

// OutcomeUndone is the marker outcome `starter undo` leaves for the undone rollout on a node
// whose undo Job succeeded: the node no longer holds that rollout's template, so a re-run of
// it covers the node again. It is a marker value only, never a node's outcome in a rollout.
const OutcomeUndone Outcome = "undone"

// UndoNamePrefix + the undone rollout's name is the undo rollout's name.
const UndoNamePrefix = "undo-"

// UndoName is the name of the rollout that undoes rollout: "undo-<rollout>", cut to a
// DNS-1123 label with a short hash of the full name when it would be longer.
func UndoName(rollout string) string {
	name := UndoNamePrefix + rollout
	if len(name) <= validation.DNS1123LabelMaxLength {
		return name
	}
	sum := fnv32(rollout)
	head := strings.TrimRight(name[:validation.DNS1123LabelMaxLength-9], "-")
	return fmt.Sprintf("%s-%08x", head, sum)
}

// fnv32 is FNV-1a: a short, stable hash for names.
func fnv32(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

// UndoNode is one node an undo rollout runs on, as read from the undone rollout's marker.
type UndoNode struct {
	Node string `json:"node"`
	// Outcome is the undone rollout's outcome on the node; Template the hash it ran.
	Outcome  Outcome `json:"outcome"`
	Template string  `json:"template"`
	// Previous is the template hash the node held before (its marker's previous), "" when the
	// marker predates the record of it or the node had none.
	Previous   string    `json:"previous,omitempty"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// checkUndo checks undo, undoOf and maintenance.onFailure: undo together.
func (r RolloutRequest) checkUndo(ps *problems) {
	if u := r.Undo; u != nil {
		checkJobSource(ps, u.JobTemplate, u.JobTemplateRef, jobSourceWords{
			prefix: "undo.", job: "undo Job", refHolds: "undo Job template",
			noneField: "undo", none: "has no Job",
			noneHint: "set undo.jobTemplate to a batch/v1 Job YAML, or undo.jobTemplateRef to the ConfigMap holding it",
		})
	}
	if m := r.Maintenance; m != nil && m.OnFailure == OnFailureUndo && r.Undo == nil {
		ps.add("maintenance.onFailure", "is undo, but the request has no undo template",
			"set undo.jobTemplate (or undo.jobTemplateRef) to the Job that takes a node back, or use keepCordoned or uncordon")
	}
	if o := r.UndoOf; o != nil {
		if errs := validation.IsDNS1123Label(o.Rollout); len(errs) > 0 {
			ps.add("undoOf.rollout", fmt.Sprintf("%q is not a rollout name", o.Rollout), "name the rollout to undo")
		}
		if r.NodeSelector != "" || r.FieldSelector != "" {
			ps.add("undoOf", "is set together with nodeSelector/fieldSelector", "an undo runs on the nodes the undone rollout changed: remove the selectors")
		}
		if r.Order != nil && r.Order.By != OrderGiven {
			ps.add("order.by", fmt.Sprintf("is %q in an undo (undoOf)", r.Order.By), "omit order: an undo runs failed nodes first, then in reverse order of completion")
		}
		if r.Canary != nil {
			ps.add("canary", "is set in an undo (undoOf)", "remove it: an undo starts the likely broken nodes first")
		}
		if r.Undo != nil {
			ps.add("undo", "is set in an undo (undoOf)", "remove it: the undo's own Job is its jobTemplate")
		}
	}
	if r.Order != nil && r.Order.By == OrderGiven && len(r.Nodes) == 0 && r.UndoOf == nil {
		ps.add("order.by", "is given, but the request names no nodes", "list the nodes in the order to run them (nodes), or use name, label or spread")
	}
}

// undoObjectTemplate turns an undo.jobTemplate pasted as an object into its text, as
// jobTemplate is.
func undoObjectTemplate(raw map[string]json.RawMessage) {
	u, ok := raw["undo"]
	if !ok || !isJSONObject(u) {
		return
	}
	var inner map[string]json.RawMessage
	if json.Unmarshal(u, &inner) != nil {
		return
	}
	if t, ok := inner["jobTemplate"]; ok && isJSONObject(t) {
		text, _ := json.Marshal(string(t))
		inner["jobTemplate"] = text
		raw["undo"], _ = json.Marshal(inner)
	}
}
