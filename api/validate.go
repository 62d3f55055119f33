package api

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Problems is everything wrong with the request, each problem naming its field and how to fix
// it; none means the request is valid. It checks only what needs no cluster: the template's
// content, the namespace's existence, the worker's policy and the window's time zone are
// checked where the workflow loads them. It is deterministic: workflows call it.
//
// A request carrying continue-as-new state (progress) is a problem here: only a run that the
// workflow itself continued may carry it, and it takes it out first (TakeCarriedProgress).
func (r RolloutRequest) Problems() []*FieldError {
	ps := decodeFieldErrors(r.decodeProblems)
	if r.legacyProgress != nil {
		ps.add("progress", "is internal state that only the workflow itself sets when it continues as new", "remove it")
	}
	r.checkName(&ps)
	r.checkNodes(&ps)
	r.checkTemplate(&ps)
	s := r.Settings() // the defaults the checks below compare against
	if r.parallelismSetToZero {
		ps.add("parallelism", fmt.Sprintf("must be between 1 and %d, got 0", MaxParallelism), "omit it for the default of 10")
	}
	if s.Parallelism < 1 || s.Parallelism > MaxParallelism {
		ps.add("parallelism", fmt.Sprintf("must be between 1 and %d, got %d", MaxParallelism, r.Parallelism), "omit it for the default of 10")
	}
	if _, err := parseFailureBudget(string(r.MaxFailures)); err != nil {
		ps.add("maxFailures", err.Error(), "give a count such as 3 or a share such as \"10%\" (0-100%)")
	}
	r.checkBatch(&ps, s)
	delayBetweenNodesField.check(&ps, r.DelayBetweenNodes)
	jobTimeoutField.check(&ps, r.JobTimeout)
	jobTTLField.check(&ps, r.JobTTL)
	switch s.KeepJobs {
	case KeepNever, KeepFailed, KeepAlways:
	default:
		ps.add("keepJobs", fmt.Sprintf("%q is not allowed", r.KeepJobs), "use never, failed or always")
	}
	if o := r.Owner; o != nil && (o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.UID == "") {
		ps.add("owner", "needs apiVersion, kind, name and uid", "copy them from the owning object, or omit owner")
	}
	r.Maintenance.check(&ps)
	r.checkTaints(&ps)
	r.Gates.check(&ps)
	if s.ContinueAsNewAfter < 1 {
		ps.add("continueAsNewAfter", "must be positive", "omit it for the default")
	}
	r.checkPacing(&ps)
	r.checkConverge(&ps)
	r.checkUndo(&ps)
	return ps.withoutConsequences()
}

func (r RolloutRequest) checkName(ps *problems) {
	if r.Name == "" {
		ps.add("name", "is required", "give the rollout a DNS-1123 label name such as \"kata-deploy\"")
	} else if errs := validation.IsDNS1123Label(r.Name); len(errs) > 0 {
		ps.add("name", fmt.Sprintf("%q is not a DNS-1123 label (%s)", r.Name, strings.Join(errs, ", ")),
			"use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
	if r.Namespace != "" {
		if errs := validation.IsDNS1123Label(r.Namespace); len(errs) > 0 {
			ps.add("namespace", fmt.Sprintf("%q is not a valid namespace name", r.Namespace), "use an existing namespace's name")
		}
	}
}

func (r RolloutRequest) checkNodes(ps *problems) {
	bySelector := r.NodeSelector != "" || r.FieldSelector != ""
	switch {
	case len(r.Nodes) > 0 && bySelector:
		ps.add("nodes", "is set together with nodeSelector/fieldSelector", "choose nodes either by name (nodes) or by selector, not both")
	case len(r.Nodes) == 0 && !bySelector && r.UndoOf == nil:
		ps.add("nodes", "no nodes are selected", "set nodes to a list of node names, or nodeSelector to a label selector such as \"pool=gpu\"")
	}
	if len(r.Nodes) > MaxExplicitNodes {
		ps.add("nodes", fmt.Sprintf("lists %d names, more than %d", len(r.Nodes), MaxExplicitNodes),
			"label the nodes and select them with nodeSelector, which is paged")
	} else {
		for i, n := range r.Nodes {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				ps.add(fmt.Sprintf("nodes[%d]", i), fmt.Sprintf("%q is not a valid node name", n), "node names are DNS-1123 subdomains: lowercase letters, digits, '-' and '.'")
			}
		}
	}
	if r.NodeSelector != "" {
		// Parsing is pure; workflowcheck only sees fmt's pointer printing deep in its errors.
		//workflowcheck:ignore
		if _, err := labels.Parse(r.NodeSelector); err != nil {
			ps.add("nodeSelector", fmt.Sprintf("%q does not parse: %v", r.NodeSelector, err), "write a label selector such as \"pool=gpu,zone in (a,b)\"")
		}
	}
	if r.FieldSelector != "" {
		//workflowcheck:ignore
		if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
			ps.add("fieldSelector", fmt.Sprintf("%q does not parse: %v", r.FieldSelector, err), "write a field selector such as \"metadata.name!=control-1\"")
		}
	}
}

func (r RolloutRequest) checkTemplate(ps *problems) {
	checkJobSource(ps, r.JobTemplate, r.JobTemplateRef, jobSourceWords{
		job: "Job template", refHolds: "Job template",
		noneField: "jobTemplate", none: "is required",
		noneHint: "set jobTemplate to a batch/v1 Job YAML, or jobTemplateRef to the ConfigMap holding it",
	})
}

// jobSourceWords are the words in which checkJobSource tells one field's problems.
type jobSourceWords struct {
	prefix   string // the path before jobTemplate and jobTemplateRef: "", "undo.", "onDeselect."
	job      string // the Job, in "give the … inline or by ConfigMap reference, not both"
	refHolds string // what the ConfigMap holds, in "name the ConfigMap that holds the …"
	// The problem when neither is given.
	noneField, none, noneHint string
}

// checkJobSource checks a Job given inline (jobTemplate) or by ConfigMap (jobTemplateRef), as
// the rollout's own Job, its undo and its onDeselect all are: exactly one of them, an inline
// template within MaxTemplateBytes, a reference with a name.
func checkJobSource(ps *problems, inline string, ref *TemplateRef, w jobSourceWords) {
	switch {
	case inline != "" && ref != nil:
		ps.add(w.prefix+"jobTemplate", "is set together with "+w.prefix+"jobTemplateRef", "give the "+w.job+" inline or by ConfigMap reference, not both")
	case inline == "" && ref == nil:
		ps.add(w.noneField, w.none, w.noneHint)
	case len(inline) > MaxTemplateBytes:
		ps.add(w.prefix+"jobTemplate", fmt.Sprintf("is %d bytes, more than %d", len(inline), MaxTemplateBytes), "shrink the template")
	case ref != nil && ref.Name == "":
		ps.add(w.prefix+"jobTemplateRef.name", "is required", "name the ConfigMap that holds the "+w.refHolds)
	}
}

// checkBatch checks the request's batch against the settings' (its defaults applied).
func (r RolloutRequest) checkBatch(ps *problems, s Settings) {
	b := r.Batch
	if b == nil {
		return
	}
	if b.Initial < 1 || b.Initial > s.Parallelism {
		ps.add("batch.initial", fmt.Sprintf("must be between 1 and parallelism (%d), got %d", s.Parallelism, b.Initial), "start with a small window such as 1")
	}
	switch s.Batch.Growth {
	case GrowthFixed, GrowthLinear:
	case GrowthExponential:
		if s.Batch.Step < 2 {
			ps.add("batch.step", "must be at least 2 for exponential growth", "use 2 to double the window")
		}
	default:
		ps.add("batch.growth", fmt.Sprintf("%q is not a growth rule", b.Growth), "use fixed, linear or exponential")
	}
	if s.Batch.Step < 0 {
		ps.add("batch.step", "must not be negative", "omit it for the default")
	}
}
