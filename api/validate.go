package api

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// FieldError names what is wrong and how to fix it. Field is a path like "jobTemplate.spec.template.spec.restartPolicy".
type FieldError struct{ Field, Problem, Fix string }

func (e *FieldError) Error() string {
	return e.Field + ": " + e.Problem + "; " + e.Fix
}

// settings are a validated request with defaults applied and durations parsed.
type Settings struct {
	Parallelism        int
	FailureBudget      FailureBudget
	Batch              Batch
	DelayBetweenNodes  time.Duration
	JobTimeout         time.Duration
	JobTTL             time.Duration
	KeepJobs           KeepJobs
	ContinueAsNewAfter int
	Pacing             Pacing
}

// budget is maxFailures: a count, or a percentage of the selected nodes.
type FailureBudget struct {
	count   int
	percent int
	isShare bool
}

// allows reports whether failures stay within the budget for this many selected nodes.
func (b FailureBudget) Allows(failures, selected int) bool {
	if b.isShare {
		return failures*100 <= b.percent*selected
	}
	return failures <= b.count
}

func (b FailureBudget) String() string {
	if b.isShare {
		return fmt.Sprintf("%d%%", b.percent)
	}
	return strconv.Itoa(b.count)
}

func Problem(field, what, fix string) *FieldError {
	return &FieldError{Field: field, Problem: what, Fix: fix}
}

// decodeFieldErrors are the problems a request's decoding recorded ("field: what"), each
// naming its field.
func DecodeFieldErrors(problems []string) []*FieldError {
	var ps []*FieldError
	for _, d := range problems {
		field, what, _ := strings.Cut(d, ": ")
		ps = append(ps, Problem(field, what, "correct the JSON"))
	}
	return ps
}

func Check(req RolloutRequest, continued bool) (Settings, []*FieldError) {
	ps := DecodeFieldErrors(req.decodeProblems)
	add := func(field, what, fix string) { ps = append(ps, Problem(field, what, fix)) }
	if req.legacyProgress != nil && !continued {
		add("progress", "is internal state that only the workflow itself sets when it continues as new", "remove it")
	}

	if req.Name == "" {
		add("name", "is required", "give the rollout a DNS-1123 label name such as \"kata-deploy\"")
	} else if errs := validation.IsDNS1123Label(req.Name); len(errs) > 0 {
		add("name", fmt.Sprintf("%q is not a DNS-1123 label (%s)", req.Name, strings.Join(errs, ", ")),
			"use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit")
	}
	if req.Namespace != "" {
		if errs := validation.IsDNS1123Label(req.Namespace); len(errs) > 0 {
			add("namespace", fmt.Sprintf("%q is not a valid namespace name", req.Namespace), "use an existing namespace's name")
		}
	}

	bySelector := req.NodeSelector != "" || req.FieldSelector != ""
	switch {
	case len(req.Nodes) > 0 && bySelector:
		add("nodes", "is set together with nodeSelector/fieldSelector", "choose nodes either by name (nodes) or by selector, not both")
	case len(req.Nodes) == 0 && !bySelector:
		add("nodes", "no nodes are selected", "set nodes to a list of node names, or nodeSelector to a label selector such as \"pool=gpu\"")
	}
	if len(req.Nodes) > MaxExplicitNodes {
		add("nodes", fmt.Sprintf("lists %d names, more than %d", len(req.Nodes), MaxExplicitNodes),
			"label the nodes and select them with nodeSelector, which is paged")
	} else {
		for i, n := range req.Nodes {
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				add(fmt.Sprintf("nodes[%d]", i), fmt.Sprintf("%q is not a valid node name", n), "node names are DNS-1123 subdomains: lowercase letters, digits, '-' and '.'")
			}
		}
	}
	if req.NodeSelector != "" {
		// Parsing is pure; workflowcheck only sees fmt's pointer printing deep in its errors.
		//workflowcheck:ignore
		if _, err := labels.Parse(req.NodeSelector); err != nil {
			add("nodeSelector", fmt.Sprintf("%q does not parse: %v", req.NodeSelector, err), "write a label selector such as \"pool=gpu,zone in (a,b)\"")
		}
	}
	if req.FieldSelector != "" {
		//workflowcheck:ignore
		if _, err := fields.ParseSelector(req.FieldSelector); err != nil {
			add("fieldSelector", fmt.Sprintf("%q does not parse: %v", req.FieldSelector, err), "write a field selector such as \"metadata.name!=control-1\"")
		}
	}

	switch {
	case req.JobTemplate != "" && req.JobTemplateRef != nil:
		add("jobTemplate", "is set together with jobTemplateRef", "give the Job template inline or by ConfigMap reference, not both")
	case req.JobTemplate == "" && req.JobTemplateRef == nil:
		add("jobTemplate", "is required", "set jobTemplate to a batch/v1 Job YAML, or jobTemplateRef to the ConfigMap holding it")
	case len(req.JobTemplate) > MaxTemplateBytes:
		add("jobTemplate", fmt.Sprintf("is %d bytes, more than %d", len(req.JobTemplate), MaxTemplateBytes), "shrink the template")
	case req.JobTemplateRef != nil && req.JobTemplateRef.Name == "":
		add("jobTemplateRef.name", "is required", "name the ConfigMap that holds the Job template")
	}

	s := Settings{Parallelism: req.Parallelism, KeepJobs: KeepJobs(req.KeepJobs), ContinueAsNewAfter: req.ContinueAsNewAfter}
	if req.parallelismSetToZero {
		add("parallelism", fmt.Sprintf("must be between 1 and %d, got 0", MaxParallelism), "omit it for the default of 10")
	}
	if s.Parallelism == 0 {
		s.Parallelism = DefaultParallelism
	}
	if s.Parallelism < 1 || s.Parallelism > MaxParallelism {
		add("parallelism", fmt.Sprintf("must be between 1 and %d, got %d", MaxParallelism, req.Parallelism), "omit it for the default of 10")
	}

	var err error
	if s.FailureBudget, err = parseBudget(string(req.MaxFailures)); err != nil {
		add("maxFailures", err.Error(), "give a count such as 3 or a share such as \"10%\" (0-100%)")
	}

	s.Batch = Batch{Initial: s.Parallelism, Growth: GrowthFixed}
	if b := req.Batch; b != nil {
		s.Batch = *b
		if s.Batch.Growth == "" {
			s.Batch.Growth = GrowthFixed
		}
		if b.Initial < 1 || b.Initial > s.Parallelism {
			add("batch.initial", fmt.Sprintf("must be between 1 and parallelism (%d), got %d", s.Parallelism, b.Initial), "start with a small window such as 1")
		}
		switch s.Batch.Growth {
		case GrowthFixed:
		case GrowthLinear:
			if s.Batch.Step == 0 {
				s.Batch.Step = s.Batch.Initial
			}
		case GrowthExponential:
			if s.Batch.Step == 0 {
				s.Batch.Step = 2
			}
			if s.Batch.Step < 2 {
				add("batch.step", "must be at least 2 for exponential growth", "use 2 to double the window")
			}
		default:
			add("batch.growth", fmt.Sprintf("%q is not a growth rule", b.Growth), "use fixed, linear or exponential")
		}
		if s.Batch.Step < 0 {
			add("batch.step", "must not be negative", "omit it for the default")
		}
	}

	s.DelayBetweenNodes = parseDuration(req.DelayBetweenNodes, 0, 0, MaxDelayBetweenNodes, "delayBetweenNodes", add)
	s.JobTimeout = parseDuration(req.JobTimeout, DefaultJobTimeout, time.Second, MaxJobTimeout, "jobTimeout", add)
	s.JobTTL = parseDuration(req.JobTTL, DefaultJobTTL, 0, 365*24*time.Hour, "jobTTL", add)

	switch s.KeepJobs {
	case "":
		s.KeepJobs = DefaultKeepJobs
	case KeepNever, KeepFailed, KeepAlways:
	default:
		add("keepJobs", fmt.Sprintf("%q is not allowed", req.KeepJobs), "use never, failed or always")
	}
	if o := req.Owner; o != nil && (o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.UID == "") {
		add("owner", "needs apiVersion, kind, name and uid", "copy them from the owning object, or omit owner")
	}
	ps = append(ps, checkMaintenance(req.Maintenance)...)
	if s.ContinueAsNewAfter == 0 {
		s.ContinueAsNewAfter = DefaultContinueAsNewAfter
	}
	if s.ContinueAsNewAfter < 1 {
		add("continueAsNewAfter", "must be positive", "omit it for the default")
	}
	s.Pacing = checkPacing(req, add)
	return s, ps
}

func parseBudget(v string) (FailureBudget, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return FailureBudget{}, nil
	}
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || n < 0 || n > 100 {
			return FailureBudget{}, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return FailureBudget{percent: n, isShare: true}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return FailureBudget{}, fmt.Errorf("%q is not a non-negative count", v)
	}
	return FailureBudget{count: n}, nil
}

func parseDuration(v string, def, min, max time.Duration, field string, add func(field, what, fix string)) time.Duration {
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < min || d > max {
		add(field, fmt.Sprintf("%q is not a duration between %v and %v", v, min, max), "write it like \"90s\", \"30m\" or \"2h\"")
		return def
	}
	return d
}
