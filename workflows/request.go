package workflows

import (
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/noderollout/noderollout/activities"
)

// Defaults and limits of RolloutRequest, documented in README's request table.
const (
	DefaultNamespace          = "default"
	DefaultParallelism        = 10
	MaxParallelism            = 1000
	DefaultJobTimeout         = 30 * time.Minute
	MaxJobTimeout             = 7 * 24 * time.Hour
	DefaultJobTTL             = 24 * time.Hour
	DefaultKeepJobs           = activities.KeepFailed
	DefaultContinueAsNewAfter = 2000
	MaxDelayBetweenNodes      = time.Hour
	// MaxExplicitNodes keeps the request well under Temporal's payload limit; larger fleets
	// are selected by label, which is paged.
	MaxExplicitNodes = 5000
)

// Growth rules of the launch window.
const (
	GrowthFixed       = "fixed"
	GrowthLinear      = "linear"
	GrowthExponential = "exponential"
)

// RolloutRequest is the input of the Rollout workflow: the public API typed as JSON in the
// Temporal UI, `temporal workflow start --input`, Schedules and `starter start -f`.
type RolloutRequest struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`

	// Exactly one way of choosing nodes: an explicit list, or label and/or field selectors.
	Nodes         []string `json:"nodes,omitempty"`
	NodeSelector  string   `json:"nodeSelector,omitempty"`
	FieldSelector string   `json:"fieldSelector,omitempty"`

	// Exactly one of an inline batch/v1 Job YAML or a ConfigMap holding it.
	JobTemplate    string                  `json:"jobTemplate,omitempty"`
	JobTemplateRef *activities.TemplateRef `json:"jobTemplateRef,omitempty"`

	Parallelism       int                  `json:"parallelism,omitempty"`
	MaxFailures       IntOrPercent         `json:"maxFailures,omitempty"`
	Batch             *Batch               `json:"batch,omitempty"`
	DelayBetweenNodes string               `json:"delayBetweenNodes,omitempty"`
	JobTimeout        string               `json:"jobTimeout,omitempty"`
	JobTTL            string               `json:"jobTTL,omitempty"`
	Rerun             bool                 `json:"rerun,omitempty"`
	KeepJobs          string               `json:"keepJobs,omitempty"`
	Owner             *activities.OwnerRef `json:"owner,omitempty"`
	DryRun            bool                 `json:"dryRun,omitempty"`
	// ContinueAsNewAfter bounds how many nodes one workflow run launches before it continues
	// as new, keeping every history short. Rarely worth changing.
	ContinueAsNewAfter int `json:"continueAsNewAfter,omitempty"`

	// Progress is set only by the workflow itself when it continues as new.
	Progress *Progress `json:"progress,omitempty"`

	// decodeProblems collects unknown fields and type mismatches found while decoding: a
	// decoding error would fail the workflow task again and again, so they are reported by
	// validation as a non-retryable InvalidRequest instead.
	decodeProblems []string
}

// Batch paces the start: the window of nodes in flight starts at Initial and grows, each time
// a whole window of nodes has succeeded, up to Parallelism.
type Batch struct {
	Initial int    `json:"initial"`
	Growth  string `json:"growth,omitempty"` // fixed (default) | linear | exponential
	// Step is what linear growth adds (default Initial) or exponential growth multiplies by (default 2).
	Step int `json:"step,omitempty"`
}

// IntOrPercent is a count ("3" or 3) or a share of the selected nodes ("10%").
type IntOrPercent string

// UnmarshalJSON accepts a JSON number or string and never fails, so validation can name the field.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*v = IntOrPercent(s)
		return nil
	}
	*v = IntOrPercent(strings.TrimSpace(string(b)))
	return nil
}

type rolloutRequestFields RolloutRequest

// UnmarshalJSON decodes leniently and remembers what was wrong for validation to report.
func (r *RolloutRequest) UnmarshalJSON(b []byte) error {
	var fields rolloutRequestFields
	if err := json.Unmarshal(b, &fields); err != nil {
		fields.decodeProblems = append(fields.decodeProblems, describeDecodeError(err))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		fields.decodeProblems = append(fields.decodeProblems, "request is not a JSON object: "+err.Error())
	}
	if unknown := unknownFields(raw, reflect.TypeOf(fields)); len(unknown) > 0 {
		fields.decodeProblems = append(fields.decodeProblems,
			"unknown field(s) "+strings.Join(unknown, ", ")+": remove them (field names are case-sensitive, see README)")
	}
	*r = RolloutRequest(fields)
	return nil
}

func describeDecodeError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return typeErr.Field + ": must be a JSON " + jsonKind(typeErr.Type) + ", got " + typeErr.Value
	}
	return "request is not valid JSON: " + err.Error()
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "integer"
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.Slice:
		return "array"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "object"
	default:
		return t.Kind().String()
	}
}

func unknownFields(raw map[string]json.RawMessage, t reflect.Type) []string {
	known := map[string]bool{}
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			known[name] = true
		}
	}
	var unknown []string
	for k := range raw {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return unknown
}
