package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.temporal.io/sdk/temporal"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/internal/didyoumean"
	"github.com/noderollout/noderollout/workflows"
)

// invalidRequest is a request file that cannot run, with one line per problem.
type invalidRequest struct {
	path     string
	problems []string
}

func (e *invalidRequest) Error() string {
	return fmt.Sprintf("%s is not a valid rollout request:\n  %s", e.path, strings.Join(e.problems, "\n  "))
}

// loadRequest reads a rollout request from a YAML or JSON file and checks it as fully as can
// be done without a server: the workflow's own validation and the decoding of an inline Job
// template that the worker does, with the same functions. In YAML, jobTemplate may be
// written as the Job object itself; it is turned into the string the workflow takes.
func loadRequest(path string) (workflows.RolloutRequest, error) {
	var req workflows.RolloutRequest
	data, err := os.ReadFile(path)
	if err != nil {
		return req, usageError{err.Error()}
	}
	lang := "YAML"
	if strings.EqualFold(filepath.Ext(path), ".json") {
		lang = "JSON"
	}
	bad := func(problems ...string) (workflows.RolloutRequest, error) {
		return req, &invalidRequest{path: path, problems: problems}
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		return bad(fmt.Sprintf("not %s: %s; correct the %s where the message points", lang, strings.TrimPrefix(err.Error(), "error converting YAML to JSON: "), lang))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(asJSON, &fields); err != nil {
		return bad(fmt.Sprintf("the file must hold one %s object with the request's fields (name, nodeSelector, jobTemplate, ...); correct the %s", lang, lang))
	}
	problems := unknownFields(fields, reflect.TypeOf(req), "")
	if tpl, ok := fields["jobTemplate"]; ok && len(tpl) > 0 && tpl[0] == '{' {
		text, err := yaml.JSONToYAML(tpl)
		if err != nil {
			return bad("jobTemplate: " + err.Error())
		}
		fields["jobTemplate"], _ = json.Marshal(string(text))
		if asJSON, err = json.Marshal(fields); err != nil {
			return req, err
		}
	}
	if err := json.Unmarshal(asJSON, &req); err != nil {
		problems = append(problems, err.Error())
	}
	if _, err := workflows.Validate(req); err != nil {
		for _, p := range validationProblems(err) {
			if strings.Contains(p, "unknown field") && len(problems) > 0 {
				continue // already named above, with a suggestion
			}
			problems = append(problems, strings.ReplaceAll(p, "correct the JSON", "correct the "+lang))
		}
	}
	if p := workflows.CheckTimeZone(req); p != "" {
		problems = append(problems, p)
	}
	if req.JobTemplate != "" && len(req.JobTemplate) <= jobspec.MaxTemplateBytes {
		// The worker checks the template the same way before the first Job; here it is the
		// same check before anything starts.
		if _, err := jobspec.ParseTemplate(req.JobTemplate); err != nil {
			for _, p := range validationProblems(err) {
				problems = append(problems, suggestJobField(p))
			}
		}
	}
	if len(problems) > 0 {
		return bad(problems...)
	}
	return req, nil
}

// validationProblems splits a validation error into its problems: the field errors a
// workflow's InvalidRequest carries in its details, or the errors a join holds.
func validationProblems(err error) []string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() {
		var fes []*jobspec.FieldError
		if appErr.Details(&fes) == nil && len(fes) > 0 {
			out := make([]string, len(fes))
			for i, fe := range fes {
				out[i] = fe.Error()
			}
			return out
		}
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range joined.Unwrap() {
			out = append(out, validationProblems(e)...)
		}
		return out
	}
	if appErr != nil {
		return []string{strings.TrimPrefix(appErr.Message(), "invalid rollout request: ")}
	}
	return []string{err.Error()}
}

// unknownFields names each field of the file the request type does not have, at any depth,
// by its path after prefix, with the known field it was probably meant to be. progress is the
// workflow's own, set when it continues as new.
func unknownFields(fields map[string]json.RawMessage, t reflect.Type, prefix string) []string {
	var problems []string
	for _, f := range didyoumean.UnknownFields(fields, t, prefix, "progress") {
		problems = append(problems, fmt.Sprintf("%s: unknown field%s (names are case-sensitive; see README)", f.Path, f.Hint))
	}
	return problems
}

// suggestJobField adds a did-you-mean to the template decoder's "is not a field" problem,
// from the fields the Job's type has at that path.
func suggestJobField(problem string) string {
	path, rest, ok := strings.Cut(problem, ": ")
	if !ok || !strings.HasPrefix(rest, "is not a field") || !strings.HasPrefix(path, "jobTemplate.") {
		return problem
	}
	parts := strings.Split(strings.TrimPrefix(path, "jobTemplate."), ".")
	t := reflect.TypeOf(batchv1.Job{})
	for _, part := range parts[:len(parts)-1] {
		name, _, _ := strings.Cut(part, "[")
		next, ok := jsonField(t, name)
		if !ok {
			return problem
		}
		t = next
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return problem
	}
	hint := didyoumean.Hint(parts[len(parts)-1], jsonFieldNames(t))
	if hint == "" {
		return problem
	}
	return problem + hint
}

// jsonField is the type of t's field with that JSON name, looking into embedded structs.
func jsonField(t reflect.Type, name string) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return f.Type, true
		}
		if f.Anonymous && (tag == "" || strings.Contains(f.Tag.Get("json"), "inline")) {
			if ft, ok := jsonField(f.Type, name); ok {
				return ft, true
			}
		}
	}
	return nil, false
}

func jsonFieldNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && (tag == "" || strings.Contains(f.Tag.Get("json"), "inline")):
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				names = append(names, jsonFieldNames(ft)...)
			}
		case tag != "" && tag != "-":
			names = append(names, tag)
		}
	}
	return names
}
