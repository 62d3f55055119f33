package api

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/noderollout/noderollout/api/didyoumean"
)

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

// TakeCarriedProgress takes the continue-as-new state of a run from before
// versionFieldGuarantees out of the request, which carried it as "progress"; nil in any other
// request.
func (r *RolloutRequest) TakeCarriedProgress() *Progress {
	p := r.legacyProgress
	r.legacyProgress = nil
	return p
}

// UnknownFields are the request's JSON fields that it has no field for, at any depth, each
// with the known field it was probably meant to be. The decoding walks the fields once, and
// every entry point reads what it found: the workflow as problems (Problems), the starter to
// say which field was meant.
func (r RolloutRequest) UnknownFields() []didyoumean.UnknownField { return r.unknown }

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
	undoObjectTemplate(raw)
	explicitZeroParallelism := false
	if p, ok := raw["parallelism"]; ok && strings.TrimSpace(string(p)) == "0" {
		explicitZeroParallelism = true
	}
	var fields rolloutRequestFields
	decoded, unknown := decodeFields(raw, &fields, prefix)
	fields.unknown = unknown
	problems = append(problems, decoded...)
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
// unknown fields at any depth, which it also returns as they are.
func decodeFields(raw map[string]json.RawMessage, fields any, prefix string) ([]string, []didyoumean.UnknownField) {
	if raw == nil {
		return nil, nil
	}
	var problems []string
	cleaned, _ := json.Marshal(raw)
	if err := json.Unmarshal(cleaned, fields); err != nil {
		problems = append(problems, everyTypeProblem(raw, reflect.TypeOf(fields).Elem(), prefix, err)...)
	}
	unknown := didyoumean.UnknownFields(raw, reflect.TypeOf(fields).Elem(), prefix)
	for _, f := range unknown {
		problems = append(problems, unknownFieldProblem(f))
	}
	return problems, unknown
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

// everyTypeProblem names the type mismatch of each top-level field of raw (encoding/json
// reports only the first of a request's, so a second would show only once the first was fixed),
// decoding each alone into a fresh t; err, the whole decode's error, when none does alone.
func everyTypeProblem(raw map[string]json.RawMessage, t reflect.Type, prefix string, err error) []string {
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(raw)) {
		one, _ := json.Marshal(map[string]json.RawMessage{key: raw[key]})
		if keyErr := json.Unmarshal(one, reflect.New(t).Interface()); keyErr != nil {
			problems = append(problems, describeDecodeError(keyErr, prefix))
		}
	}
	if len(problems) == 0 {
		problems = append(problems, describeDecodeError(err, prefix))
	}
	return problems
}

// typeMismatch begins the problem of a value of the wrong JSON type.
const typeMismatch = "must be a JSON "

func describeDecodeError(err error, prefix string) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return prefix + typeErr.Field + ": " + typeMismatch + jsonKind(typeErr.Type) + ", got " + typeErr.Value
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
