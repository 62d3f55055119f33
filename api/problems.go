package api

import (
	"fmt"
	"strings"
	"time"
)

// FieldError names what is wrong and how to fix it. Field is a path like "jobTemplate.spec.template.spec.restartPolicy".
type FieldError struct{ Field, Problem, Fix string }

func (e *FieldError) Error() string {
	return e.Field + ": " + e.Problem + "; " + e.Fix
}

// problems collects a request's FieldErrors in the order its fields are checked.
type problems []*FieldError

func (ps *problems) add(field, what, fix string) {
	*ps = append(*ps, &FieldError{Field: field, Problem: what, Fix: fix})
}

// withoutConsequences drops the later problems of a field whose value decoding found of the
// wrong type: validation saw the zero value, not what was written (`Ready: true` also read as
// `"" is not a condition status`).
func (ps problems) withoutConsequences() problems {
	mistyped := map[string]bool{}
	var out problems
	for _, p := range ps {
		if mistyped[p.Field] {
			continue
		}
		if strings.HasPrefix(p.Problem, typeMismatch) {
			mistyped[p.Field] = true
		}
		out = append(out, p)
	}
	return out
}

// decodeFieldErrors are the problems a request's decoding recorded ("field: what"), each
// naming its field.
func decodeFieldErrors(decoded []string) problems {
	var ps problems
	for _, d := range decoded {
		field, what, _ := strings.Cut(d, ": ")
		ps.add(field, what, "correct the JSON")
	}
	return ps
}

// durationField is a request field that holds a duration: its default and its bounds.
type durationField struct {
	name          string
	def, min, max time.Duration
}

// The request's duration fields.
var (
	delayBetweenNodesField = durationField{"delayBetweenNodes", 0, 0, MaxDelayBetweenNodes}
	jobTimeoutField        = durationField{"jobTimeout", DefaultJobTimeout, time.Second, MaxJobTimeout}
	jobTTLField            = durationField{"jobTTL", DefaultJobTTL, 0, 365 * 24 * time.Hour}
	canarySoakField        = durationField{"canary.soak", 0, 0, MaxSoak}
	windowDurationField    = durationField{"maintenanceWindow.duration", 0, time.Second, MaxWindowDuration}
	drainTimeoutField      = durationField{"maintenance.drain.timeout", DefaultDrainTimeout, time.Second, maxMaintenanceStep}
	gracePeriodField       = durationField{"maintenance.drain.gracePeriod", 0, 0, maxGracePeriod}
	maintenanceSoakField   = durationField{"maintenance.soak", 0, 0, maxMaintenanceStep}
	healthTimeoutField     = durationField{"maintenance.health.timeout", DefaultHealthTimeout, time.Second, maxMaintenanceStep}
)

// parse reads v: its duration and true when it is one within the field's bounds.
func (f durationField) parse(v string) (time.Duration, bool) {
	d, err := time.ParseDuration(v)
	return d, err == nil && d >= f.min && d <= f.max
}

// read is v's duration, or the field's default when v is empty or not a duration within
// bounds (a problem that check reports).
func (f durationField) read(v string) time.Duration {
	if d, ok := f.parse(v); ok && v != "" {
		return d
	}
	return f.def
}

// check adds the problem of a value that is set and not a duration within the bounds.
func (f durationField) check(ps *problems, v string) {
	if _, ok := f.parse(v); v != "" && !ok {
		ps.add(f.name, fmt.Sprintf("%q is not a duration between %v and %v", v, f.min, f.max), "write it like \"90s\", \"30m\" or \"2h\"")
	}
}
