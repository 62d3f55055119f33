package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/api/didyoumean"
)

// invalidRequest is a request file that cannot run, with one line per problem.
type invalidRequest struct {
	path     string
	what     string // "rollout request" when empty
	problems []string
}

func (e *invalidRequest) Error() string {
	what := e.what
	if what == "" {
		what = "rollout request"
	}
	return fmt.Sprintf("%s is not a valid %s:\n  %s", e.path, what, strings.Join(e.problems, "\n  "))
}

// asUsageError makes an invalid request a usage error (exit 2); other errors pass unchanged.
func asUsageError(err error) error {
	var inv *invalidRequest
	if errors.As(err, &inv) {
		return usageError{inv.Error()}
	}
	return err
}

// refuseInvalid is what validate does with a request that cannot run: a usage error (exit 2).
// Machines (-o json|yaml) first get the problems on stdout, as the document record makes of
// them, in the format asked for. Other errors pass unchanged.
func (a *app) refuseInvalid(path string, err error, record func(problems []string) any) error {
	var inv *invalidRequest
	if errors.As(err, &inv) && a.forMachines() {
		if perr := a.print(record(inv.problems), nil); perr != nil {
			return perr
		}
		return usageError{fmt.Sprintf("%s: %d problem(s)", path, len(inv.problems))}
	}
	return asUsageError(err)
}

// maxRequestBytes is the largest request file the starter reads. Temporal refuses a workflow
// input over 2 MB by default (its blob size limit), so a larger file could never start; it is
// refused before it is parsed, which would cost seconds and memory for nothing.
const maxRequestBytes = 2 << 20

// readInput reads -f: a file, or standard input for "-" (as kubectl -f - does). name is how
// messages call it.
func readInput(path string, stdin io.Reader) (name string, data []byte, err error) {
	name = path
	var r io.Reader
	if path == "-" {
		name = "stdin"
		if stdin == nil {
			stdin = os.Stdin
		}
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return name, nil, usageError{err.Error()}
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > maxRequestBytes {
			return name, nil, tooLarge(name)
		}
		r = f
	}
	data, err = io.ReadAll(io.LimitReader(r, maxRequestBytes+1))
	if err != nil {
		return name, nil, usageError{fmt.Sprintf("reading %s: %v", name, err)}
	}
	if len(data) > maxRequestBytes {
		return name, nil, tooLarge(name)
	}
	return name, data, nil
}

func tooLarge(name string) error {
	return usageError{fmt.Sprintf("%s is larger than %d MiB, the most a request file may be (Temporal refuses a workflow input over 2 MB by default); not read. Select many nodes with nodeSelector rather than listing them", name, maxRequestBytes>>20)}
}

// language is the file's language by its extension, or for stdin by its first character.
func language(name string, data []byte) string {
	if strings.EqualFold(filepath.Ext(name), ".json") {
		return "JSON"
	}
	if name == "stdin" && strings.HasPrefix(strings.TrimSpace(string(data)), "{") {
		return "JSON"
	}
	return "YAML"
}

// toJSON converts a YAML or JSON request to JSON, strictly: a key given twice at any depth is
// an error naming it (plain YAML decoding keeps the last and says nothing). A YAML error gets
// a hint where the usual cause is known.
func toJSON(name string, data []byte) ([]byte, string, error) {
	lang := language(name, data)
	asJSON, err := yaml.YAMLToJSONStrict(data)
	if err == nil {
		return asJSON, lang, nil
	}
	msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
	if dup := duplicateKey.FindAllStringSubmatch(msg, -1); len(dup) > 0 {
		lines := make([]string, len(dup))
		for i, d := range dup {
			lines[i] = fmt.Sprintf("line %s: key %s is given twice in one object; keep one (otherwise the last would silently win)", d[1], d[2])
		}
		return nil, lang, errors.New(strings.Join(lines, "\n  "))
	}
	msg = strings.ReplaceAll(strings.TrimPrefix(msg, "yaml: "), "\n", " ")
	if line, ok := tabIndented(data); ok {
		return nil, lang, fmt.Errorf("not %s: %s; YAML is indented with spaces, never tabs: line %d starts with a tab", lang, msg, line)
	}
	return nil, lang, fmt.Errorf("not %s: %s; correct the %s where the message points", lang, msg, lang)
}

var duplicateKey = regexp.MustCompile(`line (\d+): key ("(?:[^"\\]|\\.)*"|\S+) already set in map`)

// tabIndented is the first line indented with a tab.
func tabIndented(data []byte) (int, bool) {
	for i, line := range strings.Split(string(data), "\n") {
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		if strings.Contains(indent, "\t") {
			return i + 1, true
		}
	}
	return 0, false
}

// loadRequest reads a rollout request from a YAML or JSON file; see parseRequest.
func loadRequest(path string) (api.RolloutRequest, error) {
	name, data, err := readInput(path, nil)
	if err != nil {
		return api.RolloutRequest{}, err
	}
	return parseRequest(name, data)
}

// objectFields turns a YAML or JSON request into JSON and reads its top-level fields (lang
// is the file's language, for messages). A file that is not one object is told it must hold
// one with the fields expected, e.g. "the request's fields (name, ...)".
func objectFields(name string, data []byte, expected string) (asJSON []byte, lang string, fields map[string]json.RawMessage, err error) {
	asJSON, lang, err = toJSON(name, data)
	if err != nil {
		return nil, "", nil, err
	}
	if err := json.Unmarshal(asJSON, &fields); err != nil {
		return nil, "", nil, fmt.Errorf("the file must hold one %s object with %s; correct the %s", lang, expected, lang)
	}
	return asJSON, lang, fields, nil
}

// parseRequest checks a rollout request as fully as can be done without a server: the
// workflow's own validation and the decoding of an inline Job template that the worker does,
// with the same functions. In YAML, jobTemplate may be written as the Job object itself; it is
// turned into the string the workflow takes.
func parseRequest(name string, data []byte) (api.RolloutRequest, error) {
	var req api.RolloutRequest
	bad := func(problems ...string) (api.RolloutRequest, error) {
		return req, &invalidRequest{path: name, problems: problems}
	}
	asJSON, lang, fields, err := objectFields(name, data, "the request's fields (name, nodeSelector, jobTemplate, ...)")
	if err != nil {
		return bad(err.Error())
	}
	if fleetFile(asJSON) {
		return bad(fmt.Sprintf("this is a fleet rollout request (it has waves and rollout): check it with 'starter fleet validate -f %s', start it with 'starter fleet start'", name))
	}
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
	var problems []string
	if err := json.Unmarshal(asJSON, &req); err != nil {
		problems = append(problems, err.Error())
	}
	problems = append(problems, readableProblems(req.Problems(), req.UnknownFields(), fields, lang)...)
	if p := api.CheckTimeZone(req); p != "" {
		problems = append(problems, p)
	}
	if req.JobTemplate != "" && len(req.JobTemplate) <= api.MaxTemplateBytes {
		// The worker checks the template the same way before the first Job; here it is the
		// same check before anything starts.
		if _, err := jobspec.ParseTemplate(req.JobTemplate); err != nil {
			for _, p := range templateProblems(err) {
				problems = append(problems, suggestJobField(p))
			}
		}
	}
	problems = append(problems, stepTemplateProblems(req)...)
	if u := req.Undo; u != nil && u.JobTemplate != "" && len(u.JobTemplate) <= api.MaxTemplateBytes {
		if _, err := jobspec.ParseTemplate(u.JobTemplate); err != nil {
			for _, p := range templateProblems(err) {
				problems = append(problems, "undo: "+suggestJobField(p))
			}
		}
	}
	if len(problems) > 0 {
		return bad(problems...)
	}
	return req, nil
}

// stepTemplateProblems checks the inline templates of the reboot Job and the check Job as the
// worker will before the first node, each problem under its own field.
func stepTemplateProblems(req api.RolloutRequest) []string {
	var problems []string
	check := func(field, text string) {
		if text == "" || len(text) > api.MaxTemplateBytes {
			return
		}
		if _, err := jobspec.ParseTemplate(text); err != nil {
			for _, p := range templateProblems(err) {
				problems = append(problems, field+"."+p)
			}
		}
	}
	if m := req.Maintenance; m != nil && m.Reboot != nil {
		check("maintenance.reboot", m.Reboot.JobTemplate)
	}
	if g := req.Gates; g != nil && g.CheckJob != nil {
		check("gates.checkJob", g.CheckJob.JobTemplate)
	}
	return problems
}

// readableProblems are a request's problems for a person reading a file: unknown fields each
// once, with the field that was probably meant (the consequences of a typo, such as the field
// it was meant to be left at its default, left out), a value of the wrong type with how to
// write it, in the file's language.
func readableProblems(problems []*api.FieldError, unknown []didyoumean.UnknownField, fields map[string]json.RawMessage, lang string) []string {
	out := unknownFields(unknown)
	for _, fe := range problems {
		p := fe.Error()
		if strings.Contains(p, "unknown field") && len(unknown) > 0 {
			continue // already named above, with a suggestion
		}
		if followsFromTypo(p, unknown) {
			continue // the typo's consequence (a field left at its default): the typo says it all
		}
		p = withTypeHint(p, fields)
		out = append(out, strings.ReplaceAll(p, "correct the JSON", "correct the "+lang))
	}
	return out
}

// fleetFile tells a fleet request (waves and a rollout) given where a rollout request belongs.
func fleetFile(asJSON []byte) bool {
	var f struct {
		Waves   json.RawMessage `json:"waves"`
		Rollout json.RawMessage `json:"rollout"`
	}
	return json.Unmarshal(asJSON, &f) == nil && f.Waves != nil && f.Rollout != nil
}

// followsFromTypo tells a problem that a misspelt field causes: the field it was meant to be
// is then missing or at its default, and validation says so ("batch.initial: ... got 0", "no
// nodes are selected ... nodeSelector"). Only the typo is worth reading.
func followsFromTypo(problem string, unknown []didyoumean.UnknownField) bool {
	path, _, _ := strings.Cut(problem, ": ")
	for _, u := range unknown {
		meant := suggested(u.Hint)
		if meant == "" {
			continue
		}
		if path == meant || strings.HasPrefix(path, meant+".") {
			return true
		}
		last := meant[strings.LastIndex(meant, ".")+1:]
		if regexp.MustCompile(`\b` + regexp.QuoteMeta(last) + `\b`).MatchString(problem) {
			return true
		}
	}
	return false
}

// suggested is the field a did-you-mean hint names.
func suggested(hint string) string {
	_, rest, ok := strings.Cut(hint, `did you mean "`)
	if !ok {
		return ""
	}
	meant, _, _ := strings.Cut(rest, `"`)
	return meant
}

var typeProblem = regexp.MustCompile(`^(\S+): must be a JSON (integer|string), got (\w+)`)

// withTypeHint says how to write a value of the wrong type: a count as a number, a duration
// with its unit. The decoder's own words ("must be a JSON string, got number") leave the reader
// to guess that jobTimeout: 10 lacks a unit.
func withTypeHint(problem string, fields map[string]json.RawMessage) string {
	m := typeProblem.FindStringSubmatch(problem)
	if m == nil {
		return problem
	}
	path, want, got := m[1], m[2], m[3]
	value, _ := valueAt(fields, path)
	switch {
	case want == "integer" && got == "string":
		return fmt.Sprintf("%s: %s is not a number; write a whole number such as 10, without quotes", path, orSomething(value, "the text"))
	case want == "integer":
		return fmt.Sprintf("%s: %s is not a number; write a whole number such as 10", path, orSomething(value, "the value"))
	case want == "string" && got == "number" && isDuration(fields, path):
		return fmt.Sprintf("%s: %s has no unit; write a duration such as 10m (or 90s, 2h)", path, orSomething(value, "the number"))
	case want == "string" && (got == "bool" || got == "number") && value != "":
		// YAML reads an unquoted true, yes, on or 10 as a boolean or a number, not as text.
		return fmt.Sprintf("%s: %s reads as a %s, not text; put it in quotes, e.g. %q", path, value, yamlKind(got), capitalized(value))
	}
	return problem
}

func yamlKind(got string) string {
	if got == "bool" {
		return "boolean"
	}
	return got
}

// capitalized is a boolean as Kubernetes writes condition statuses ("True"), other values as
// they are.
func capitalized(value string) string {
	switch value {
	case "true":
		return "True"
	case "false":
		return "False"
	}
	return value
}

func orSomething(value, something string) string {
	if value == "" {
		return something
	}
	return value
}

// valueAt is the raw JSON at a dotted path of objects.
func valueAt(fields map[string]json.RawMessage, path string) (string, bool) {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		v, ok := fields[p]
		if !ok {
			return "", false
		}
		if i == len(parts)-1 {
			return string(v), true
		}
		fields = nil
		if json.Unmarshal(v, &fields) != nil {
			return "", false
		}
	}
	return "", false
}

// isDuration tells whether the string field at path is read as a duration: the workflow's
// validation, given a value without a unit there, says so.
func isDuration(fields map[string]json.RawMessage, path string) bool {
	var probe any
	b, _ := json.Marshal(fields)
	if json.Unmarshal(b, &probe) != nil {
		return false
	}
	obj, ok := probe.(map[string]any)
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		if !ok {
			return false
		}
		obj, ok = obj[p].(map[string]any)
	}
	if !ok {
		return false
	}
	obj[parts[len(parts)-1]] = "1"
	b, _ = json.Marshal(probe)
	var req api.RolloutRequest
	if json.Unmarshal(b, &req) != nil {
		return false
	}
	for _, p := range req.Problems() {
		if p.Field == path && strings.Contains(p.Problem, "is not a duration") {
			return true
		}
	}
	return false
}

// templateProblems splits the template check's error into its problems (jobspec joins them).
func templateProblems(err error) []string {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range joined.Unwrap() {
			out = append(out, templateProblems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

// unknownFields is one problem per field of the file its request type does not have (from
// didyoumean.UnknownFields), with the known field it was probably meant to be.
func unknownFields(unknown []didyoumean.UnknownField) []string {
	var problems []string
	for _, f := range unknown {
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
