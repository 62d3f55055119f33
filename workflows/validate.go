package workflows

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
)

// settings are a validated request with defaults applied and durations parsed.
type settings struct {
	parallelism        int
	failureBudget      budget
	batch              Batch
	delayBetweenNodes  time.Duration
	jobTimeout         time.Duration
	jobTTL             time.Duration
	keepJobs           activities.KeepJobs
	continueAsNewAfter int
	pace               pacing
}

// budget is maxFailures: a count, or a percentage of the selected nodes.
type budget struct {
	count   int
	percent int
	isShare bool
}

// allows reports whether failures stay within the budget for this many selected nodes.
func (b budget) allows(failures, selected int) bool {
	if b.isShare {
		return failures*100 <= b.percent*selected
	}
	return failures <= b.count
}

func (b budget) String() string {
	if b.isShare {
		return fmt.Sprintf("%d%%", b.percent)
	}
	return strconv.Itoa(b.count)
}

// Validate checks the request and returns its settings, or a non-retryable InvalidRequest
// error naming every bad field and how to fix it. It is deterministic: workflows call it.
func Validate(req RolloutRequest) (settings, error) {
	return validate(req, false)
}

// validate is Validate for the workflow, which also knows whether this run was continued as
// new: only such a run may carry the internal state of runs from before it had its own type.
func validate(req RolloutRequest, continued bool) (settings, error) {
	s, problems := check(req, continued)
	if len(problems) == 0 {
		return s, nil
	}
	return s, invalidRequestError("invalid rollout request: ", problems)
}

// invalidRequestError is the non-retryable InvalidRequest naming every problem, which it
// carries as details.
func invalidRequestError(what string, problems []*jobspec.FieldError) error {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	return temporal.NewNonRetryableApplicationError(what+strings.Join(msgs, "; "), activities.ErrInvalidRequest, nil, problems)
}

func problem(field, what, fix string) *jobspec.FieldError {
	return &jobspec.FieldError{Field: field, Problem: what, Fix: fix}
}

// decodeFieldErrors are the problems a request's decoding recorded ("field: what"), each
// naming its field.
func decodeFieldErrors(problems []string) []*jobspec.FieldError {
	var ps []*jobspec.FieldError
	for _, d := range problems {
		field, what, _ := strings.Cut(d, ": ")
		ps = append(ps, problem(field, what, "correct the JSON"))
	}
	return ps
}

func check(req RolloutRequest, continued bool) (settings, []*jobspec.FieldError) {
	ps := decodeFieldErrors(req.decodeProblems)
	add := func(field, what, fix string) { ps = append(ps, problem(field, what, fix)) }
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
	case len(req.JobTemplate) > jobspec.MaxTemplateBytes:
		add("jobTemplate", fmt.Sprintf("is %d bytes, more than %d", len(req.JobTemplate), jobspec.MaxTemplateBytes), "shrink the template")
	case req.JobTemplateRef != nil && req.JobTemplateRef.Name == "":
		add("jobTemplateRef.name", "is required", "name the ConfigMap that holds the Job template")
	}

	s := settings{parallelism: req.Parallelism, keepJobs: activities.KeepJobs(req.KeepJobs), continueAsNewAfter: req.ContinueAsNewAfter}
	if req.parallelismSetToZero {
		add("parallelism", fmt.Sprintf("must be between 1 and %d, got 0", MaxParallelism), "omit it for the default of 10")
	}
	if s.parallelism == 0 {
		s.parallelism = DefaultParallelism
	}
	if s.parallelism < 1 || s.parallelism > MaxParallelism {
		add("parallelism", fmt.Sprintf("must be between 1 and %d, got %d", MaxParallelism, req.Parallelism), "omit it for the default of 10")
	}

	var err error
	if s.failureBudget, err = parseBudget(string(req.MaxFailures)); err != nil {
		add("maxFailures", err.Error(), "give a count such as 3 or a share such as \"10%\" (0-100%)")
	}

	s.batch = Batch{Initial: s.parallelism, Growth: GrowthFixed}
	if b := req.Batch; b != nil {
		s.batch = *b
		if s.batch.Growth == "" {
			s.batch.Growth = GrowthFixed
		}
		if b.Initial < 1 || b.Initial > s.parallelism {
			add("batch.initial", fmt.Sprintf("must be between 1 and parallelism (%d), got %d", s.parallelism, b.Initial), "start with a small window such as 1")
		}
		switch s.batch.Growth {
		case GrowthFixed:
		case GrowthLinear:
			if s.batch.Step == 0 {
				s.batch.Step = s.batch.Initial
			}
		case GrowthExponential:
			if s.batch.Step == 0 {
				s.batch.Step = 2
			}
			if s.batch.Step < 2 {
				add("batch.step", "must be at least 2 for exponential growth", "use 2 to double the window")
			}
		default:
			add("batch.growth", fmt.Sprintf("%q is not a growth rule", b.Growth), "use fixed, linear or exponential")
		}
		if s.batch.Step < 0 {
			add("batch.step", "must not be negative", "omit it for the default")
		}
	}

	s.delayBetweenNodes = parseDuration(req.DelayBetweenNodes, 0, 0, MaxDelayBetweenNodes, "delayBetweenNodes", add)
	s.jobTimeout = parseDuration(req.JobTimeout, DefaultJobTimeout, time.Second, MaxJobTimeout, "jobTimeout", add)
	s.jobTTL = parseDuration(req.JobTTL, DefaultJobTTL, 0, 365*24*time.Hour, "jobTTL", add)

	switch s.keepJobs {
	case "":
		s.keepJobs = DefaultKeepJobs
	case activities.KeepNever, activities.KeepFailed, activities.KeepAlways:
	default:
		add("keepJobs", fmt.Sprintf("%q is not allowed", req.KeepJobs), "use never, failed or always")
	}
	if o := req.Owner; o != nil && (o.APIVersion == "" || o.Kind == "" || o.Name == "" || o.UID == "") {
		add("owner", "needs apiVersion, kind, name and uid", "copy them from the owning object, or omit owner")
	}
	ps = append(ps, checkMaintenance(req.Maintenance)...)
	if s.continueAsNewAfter == 0 {
		s.continueAsNewAfter = DefaultContinueAsNewAfter
	}
	if s.continueAsNewAfter < 1 {
		add("continueAsNewAfter", "must be positive", "omit it for the default")
	}
	s.pace = checkPacing(req, add)
	return s, ps
}

func parseBudget(v string) (budget, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return budget{}, nil
	}
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(strings.TrimSpace(pct))
		if err != nil || n < 0 || n > 100 {
			return budget{}, fmt.Errorf("%q is not a percentage between 0%% and 100%%", v)
		}
		return budget{percent: n, isShare: true}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return budget{}, fmt.Errorf("%q is not a non-negative count", v)
	}
	return budget{count: n}, nil
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
