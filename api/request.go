package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/noderollout/noderollout/api/didyoumean"
)

const (
	MaxTemplateBytes = 256 * 1024
)

// Defaults and limits of RolloutRequest, documented in README's request table.
const (
	DefaultNamespace          = "default"
	DefaultParallelism        = 10
	MaxParallelism            = 1000
	DefaultJobTimeout         = 30 * time.Minute
	MaxJobTimeout             = 7 * 24 * time.Hour
	DefaultJobTTL             = 24 * time.Hour
	DefaultKeepJobs           = KeepFailed
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
	JobTemplate    string       `json:"jobTemplate,omitempty"`
	JobTemplateRef *TemplateRef `json:"jobTemplateRef,omitempty"`

	Parallelism int          `json:"parallelism,omitempty"`
	MaxFailures IntOrPercent `json:"maxFailures,omitempty"`
	Batch       *Batch       `json:"batch,omitempty"`
	// Pacing within the rollout (workflows/pacing.go): when nodes may start, how many of one
	// domain at once, which go first, and in what order the rest follow.
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
	Topology          *Topology          `json:"topology,omitempty"`
	Canary            *Canary            `json:"canary,omitempty"`
	Order             *Order             `json:"order,omitempty"`
	DelayBetweenNodes string             `json:"delayBetweenNodes,omitempty"`
	JobTimeout        string             `json:"jobTimeout,omitempty"`
	JobTTL            string             `json:"jobTTL,omitempty"`
	Rerun             bool               `json:"rerun,omitempty"`
	KeepJobs          string             `json:"keepJobs,omitempty"`
	Owner             *OwnerRef          `json:"owner,omitempty"`
	DryRun            bool               `json:"dryRun,omitempty"`
	Maintenance       *Maintenance       `json:"maintenance,omitempty"`
	// ContinueAsNewAfter bounds how many nodes one workflow run launches before it continues
	// as new, keeping every history short. Rarely worth changing.
	ContinueAsNewAfter int `json:"continueAsNewAfter,omitempty"`

	// legacyProgress is the continue-as-new state that runs before the "field-guarantees"
	// version carried inside the request as "progress". Only a continued run may hold it: a
	// caller who sets it is refused (see Rollout), so it can never skip the template check.
	legacyProgress *Progress
	// parallelismSetToZero tells an explicit 0 (an error) from an omitted field (the default).
	parallelismSetToZero bool

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

// CarriedProgress is the continue-as-new state of a run from before versionFieldGuarantees,
// which carried it inside the request as "progress"; nil in any other request.
func (r RolloutRequest) CarriedProgress() *Progress { return r.legacyProgress }

// UnmarshalJSON decodes leniently and remembers what was wrong for validation to report:
// type mismatches, and unknown fields at any depth (a misspelt batch.inital would otherwise
// silently fall back to a default).
func (r *RolloutRequest) UnmarshalJSON(b []byte) error {
	*r = decodeRolloutRequest(b, "")
	return nil
}

// decodeRolloutRequest is UnmarshalJSON for a request at path prefix: "" on its own,
// "rollout." inside a fleet's request, so that each problem names its field's full path.
func decodeRolloutRequest(b []byte, prefix string) RolloutRequest {
	raw, problems := jsonObject(b, prefix)
	var legacy *Progress
	// Only the Rollout workflow's own continued runs carry progress: inside another request
	// it is an unknown field like any other.
	if p, ok := raw["progress"]; ok && prefix == "" {
		if err := json.Unmarshal(p, &legacy); err != nil || legacy == nil {
			problems = append(problems, "progress: is internal state that only the workflow itself sets; remove it")
		}
		delete(raw, "progress")
	}
	if t, ok := raw["jobTemplate"]; ok && isJSONObject(t) {
		// A Job pasted as an object (as the Temporal UI's input box invites) is the same
		// template: JSON is YAML.
		text, _ := json.Marshal(string(t))
		raw["jobTemplate"] = text
	}
	explicitZeroParallelism := false
	if p, ok := raw["parallelism"]; ok && strings.TrimSpace(string(p)) == "0" {
		explicitZeroParallelism = true
	}
	var fields rolloutRequestFields
	problems = append(problems, decodeFields(raw, &fields, prefix)...)
	fields.parallelismSetToZero = explicitZeroParallelism
	fields.decodeProblems = problems
	fields.legacyProgress = legacy
	return RolloutRequest(fields)
}

// jsonObject is the JSON object b by key, or a problem naming it (by prefix) if b is not one.
// JSON null is an empty object, as encoding/json treats it.
func jsonObject(b []byte, prefix string) (map[string]json.RawMessage, []string) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, []string{objectName(prefix) + " is not a JSON object: " + err.Error()}
	}
	return raw, nil
}

// decodeFields decodes raw into fields (a pointer to a struct without an UnmarshalJSON of its
// own) and names, by their path from prefix, the keys that did not fit: type mismatches and
// unknown fields at any depth.
func decodeFields(raw map[string]json.RawMessage, fields any, prefix string) []string {
	if raw == nil {
		return nil
	}
	var problems []string
	cleaned, _ := json.Marshal(raw)
	if err := json.Unmarshal(cleaned, fields); err != nil {
		problems = append(problems, describeDecodeError(err, prefix))
	}
	for _, f := range didyoumean.UnknownFields(raw, reflect.TypeOf(fields).Elem(), prefix) {
		problems = append(problems, unknownFieldProblem(f))
	}
	return problems
}

// unknownFieldProblem names one unknown field with the known field it was probably meant to
// be: a request typed into the Temporal UI gets the same hint as one the starter checks.
func unknownFieldProblem(f didyoumean.UnknownField) string {
	fix := ": remove it"
	if f.Hint != "" {
		fix = f.Hint
	}
	return f.Path + ": unknown field" + fix + " (field names are case-sensitive, see README)"
}

// objectName is how problems name the object at prefix: "request" at the top.
func objectName(prefix string) string {
	if prefix == "" {
		return "request"
	}
	return strings.TrimSuffix(prefix, ".")
}

func isJSONObject(b json.RawMessage) bool {
	t := strings.TrimSpace(string(b))
	return strings.HasPrefix(t, "{")
}

func describeDecodeError(err error, prefix string) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return prefix + typeErr.Field + ": must be a JSON " + jsonKind(typeErr.Type) + ", got " + typeErr.Value
	}
	return objectName(prefix) + " is not valid JSON: " + err.Error()
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
