package jobspec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/noderollout/noderollout/api"
	yamlv2 "go.yaml.in/yaml/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// JobParams is everything besides the template that shapes one node's Job.
type JobParams struct {
	Rollout, Namespace, Node, RunID, TemplateHash string
	Owner                                         *metav1.OwnerReference // optional, added to OwnerReferences (no controller/blockOwnerDeletion)
	ActiveDeadlineSeconds                         int64                  // set when the template has none and this is > 0
	TTLSecondsAfterFinished                       int32                  // set when the template has none and this is > 0
}

const templateField = "jobTemplate"

// maxRenderedBytes bounds the template after the node name is spliced in, which can multiply
// its size; it stays well below etcd's 1.5 MiB object limit so the Job can be stored at all.
const maxRenderedBytes = 4 * api.MaxTemplateBytes

// sampleNodes stand in for the node while a template is checked without one. There are several
// because the template might happen to contain one of them. None begins with a string it also
// ends with, so in rendered text a sample occurs exactly where the placeholder was.
var sampleNodes = []string{"sample-node.example", "sample-node-2.example", "sample-node-3.example"}

// ParseTemplate checks the un-rendered template (with the placeholder replaced by a sample
// node name): YAML parses into exactly one object (strict: unknown fields rejected), apiVersion
// batch/v1 and kind Job, no metadata.generateName, size <= MaxTemplateBytes, restartPolicy not
// Always (must be Never or OnFailure; empty is rejected because the Job API requires one),
// spec.template.spec.nodeName empty or equal to the placeholder, no spec.template.spec.nodeSelector
// key kubernetes.io/hostname, no spec.template.spec.affinity.nodeAffinity (they would conflict
// with pinning), metadata.namespace empty (the request names it), at least one container.
// Every error is a *FieldError.
func ParseTemplate(template string) (*batchv1.Job, error) {
	if err := checkSize(template); err != nil {
		return nil, err
	}
	sample, _ := pickSample(template)
	job, _, err := render(template, sample)
	return job, err
}

// Build renders the template for the node (placeholder replaced), validates it like ParseTemplate,
// then sets name=JobName, namespace, the finalizer FinalizerOutcome, labels LabelRollout/LabelNode (also on the Pod template, so
// Pods can be found), annotations AnnotationNode/AnnotationTemplateHash/AnnotationRunID,
// spec.template.spec.nodeName, the defaults and the owner. It adds nothing else: no privileges,
// volumes or service-account token. Template labels/annotations are kept (ours win on key clash).
//
// Rollout, Namespace and Node must be valid Kubernetes names: they become label values, the
// Job's namespace and text spliced into YAML, where anything else could change the Job's shape.
func Build(template string, p JobParams) (*batchv1.Job, error) {
	if err := checkParams(p); err != nil {
		return nil, err
	}
	if err := checkSize(template); err != nil {
		return nil, err
	}
	if err := checkRenderedSize(template, p.Node); err != nil {
		return nil, err
	}
	job, err := renderFor(template, p.Node)
	if err != nil {
		return nil, err
	}

	ours := map[string]string{LabelRollout: p.Rollout, LabelNode: NodeLabelValue(p.Node)}
	job.Name = JobName(p.Rollout, p.Node, p.RunID)
	job.Namespace = p.Namespace
	job.Labels = merge(job.Labels, ours)
	job.Spec.Template.Labels = merge(job.Spec.Template.Labels, ours)
	job.Annotations = merge(job.Annotations, map[string]string{
		AnnotationNode:         p.Node,
		AnnotationTemplateHash: p.TemplateHash,
		AnnotationRunID:        p.RunID,
	})
	if !slices.Contains(job.Finalizers, FinalizerOutcome) {
		job.Finalizers = append(job.Finalizers, FinalizerOutcome)
	}
	job.Spec.Template.Spec.NodeName = p.Node
	if job.Spec.ActiveDeadlineSeconds == nil && p.ActiveDeadlineSeconds > 0 {
		v := p.ActiveDeadlineSeconds
		job.Spec.ActiveDeadlineSeconds = &v
	}
	if job.Spec.TTLSecondsAfterFinished == nil && p.TTLSecondsAfterFinished > 0 {
		v := p.TTLSecondsAfterFinished
		job.Spec.TTLSecondsAfterFinished = &v
	}
	if p.Owner != nil && !hasOwner(job.OwnerReferences, p.Owner.UID) {
		// Not a controller reference: the Job controller owns the Job's Pods, and
		// blockOwnerDeletion would need delete permission on the owner.
		ref := *p.Owner
		ref.Controller = nil
		ref.BlockOwnerDeletion = nil
		job.OwnerReferences = append(job.OwnerReferences, ref)
	}
	return job, nil
}

func checkParams(p JobParams) error {
	const dnsLabelFix = "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit"
	switch {
	case !isDNSLabel(p.Rollout):
		return &api.FieldError{Field: "rollout", Problem: fmt.Sprintf("%q is not a DNS-1123 label", p.Rollout), Fix: dnsLabelFix}
	case !isDNSLabel(p.Namespace):
		return &api.FieldError{Field: "namespace", Problem: fmt.Sprintf("%q is not a DNS-1123 label", p.Namespace), Fix: dnsLabelFix}
	case !isDNSSubdomain(p.Node):
		return &api.FieldError{
			Field:   "node",
			Problem: fmt.Sprintf("%q is not a node name (a DNS-1123 subdomain)", p.Node),
			Fix:     "pass the name of an existing Node",
		}
	case p.Owner != nil && (p.Owner.APIVersion == "" || p.Owner.Kind == "" || p.Owner.Name == "" || p.Owner.UID == ""):
		return &api.FieldError{
			Field:   "owner",
			Problem: "lacks one of apiVersion, kind, name and uid",
			Fix:     "give all four, copied from the owning object, or no owner at all",
		}
	}
	return nil
}

func checkSize(template string) error {
	if len(template) <= api.MaxTemplateBytes {
		return nil
	}
	return &api.FieldError{
		Field:   templateField,
		Problem: fmt.Sprintf("is %d bytes, more than the limit of %d", len(template), api.MaxTemplateBytes),
		Fix:     "move large scripts or data into a ConfigMap and mount it as a volume",
	}
}

// checkRenderedSize runs before rendering, so that a node whose Job is too big is not mistaken
// for one whose name YAML misreads.
func checkRenderedSize(template, node string) error {
	n := len(template) + strings.Count(template, NodePlaceholder)*(len(node)-len(NodePlaceholder))
	if n <= maxRenderedBytes {
		return nil
	}
	return &api.FieldError{
		Field:   templateField,
		Problem: fmt.Sprintf("grows to %d bytes with %s replaced by node %q, more than the limit of %d", n, NodePlaceholder, node, maxRenderedBytes),
		Fix:     fmt.Sprintf("use %s less often, e.g. once in an environment variable that the rest of the Job reads", NodePlaceholder),
	}
}

// pickSample returns a sample node name the template does not already contain; ok is false when
// it contains them all and comparisons against a sample would be unreliable.
func pickSample(template string) (sample string, ok bool) {
	for _, s := range sampleNodes {
		if !strings.Contains(template, s) {
			return s, true
		}
	}
	return sampleNodes[0], false
}

// render replaces the placeholder with node, then decodes and checks the result. It also returns
// the JSON the YAML read as, which a sample node's reading is kept as.
func render(template, node string) (*batchv1.Job, []byte, error) {
	job, data, err := decodeJob(strings.ReplaceAll(template, NodePlaceholder, node))
	if err != nil {
		return nil, nil, err
	}
	if err := checkJob(job, node); err != nil {
		return nil, nil, err
	}
	return job, data, nil
}

// renderFor renders the template for node and makes sure the placeholder's replacement in the
// text read as node's name wherever it stands: unquoted, YAML reads a node named "null", "yes",
// "017" or "1e5" as something other than that name. The template's reading for a sample name is
// the reference; node's must be the same with the name swapped. Checked against it, the text
// needs one YAML read per node, not the two a full render makes.
func renderFor(template, node string) (*batchv1.Job, error) {
	sample, ok := pickSample(template)
	if !ok || node == sample || !strings.Contains(template, NodePlaceholder) {
		job, _, err := render(template, node)
		return job, err
	}
	ref := sampleReadings.get(template, sample)
	if ref == nil {
		// The template is broken for every node; node's own error says why.
		job, _, err := render(template, node)
		return job, err
	}
	// The sample's text held one document, and a node name (no line break, no leading '-' or
	// '.') cannot start another: the documents are not counted again.
	data, err := yaml.YAMLToJSONStrict([]byte(strings.ReplaceAll(template, NodePlaceholder, node)))
	if err != nil || !sameReading(data, bytes.ReplaceAll(ref, []byte(sample), []byte(node))) {
		return nil, misreadError(node)
	}
	job, err := decodeJSON(data)
	if err != nil {
		return nil, misreadError(node)
	}
	if err := checkJob(job, node); err != nil {
		return nil, misreadError(node)
	}
	return job, nil
}

// sameReading compares two readings of a template. The JSON has its mapping keys sorted, so
// where the placeholder is a key, a node name can sort elsewhere than the sample did: such
// readings are compared as values.
func sameReading(got, want []byte) bool {
	if bytes.Equal(got, want) {
		return true
	}
	var g, w any
	if json.Unmarshal(got, &g) != nil || json.Unmarshal(want, &w) != nil {
		return false
	}
	return reflect.DeepEqual(g, w)
}

func misreadError(node string) error {
	return &api.FieldError{
		Field: templateField,
		Problem: fmt.Sprintf("reads differently for node %q: where %s stands unquoted, YAML takes that name for a number, boolean or null",
			node, NodePlaceholder),
		Fix: fmt.Sprintf(`put the placeholder in quotes, e.g. value: "%s"`, NodePlaceholder),
	}
}

// decodeJob reads text as Kubernetes would, case-sensitively and strictly, but with errors
// that point at the template field.
func decodeJob(text string) (*batchv1.Job, []byte, error) {
	if err := checkOneDocument(text); err != nil {
		return nil, nil, err
	}
	data, err := yaml.YAMLToJSONStrict([]byte(text))
	if err != nil {
		return nil, nil, yamlError(err)
	}
	job, err := decodeJSON(data)
	if err != nil {
		return nil, nil, err
	}
	return job, data, nil
}

// decodeJSON reads the template's JSON into a Job, strictly and case-sensitively.
func decodeJSON(data []byte) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	strictErrs, err := kjson.UnmarshalStrict(data, job)
	if err != nil {
		return nil, decodeError(data, err)
	}
	if len(strictErrs) > 0 {
		return nil, strictError(strictErrs[0])
	}
	return job, nil
}

// checkOneDocument rejects streams of several documents, which sigs.k8s.io/yaml would silently
// cut to the first. Empty documents after the Job (a trailing "---") are harmless and allowed.
func checkOneDocument(text string) error {
	dec := yamlv2.NewDecoder(strings.NewReader(text))
	dec.SetStrict(true)
	firstEmpty := true
	for i := 0; ; i++ {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return yamlError(err)
		}
		if doc == nil {
			continue
		}
		if i > 0 {
			return &api.FieldError{
				Field:   templateField,
				Problem: "holds more than one YAML document",
				Fix:     "keep exactly one Job: remove the other documents and the --- lines that separate them",
			}
		}
		firstEmpty = false
	}
	if firstEmpty {
		return &api.FieldError{Field: templateField, Problem: "is empty", Fix: "give a batch/v1 Job manifest"}
	}
	return nil
}

func yamlError(err error) error {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	msg = strings.TrimPrefix(strings.TrimPrefix(msg, "yaml: "), "unmarshal errors: ")
	return &api.FieldError{
		Field:   templateField,
		Problem: "is not valid YAML: " + msg,
		Fix:     "correct the YAML where the message points (indent with spaces, and quote values that contain ': ' or start with '{', '[', '*' or '&')",
	}
}

// decodeError explains a value of the wrong type. The Kubernetes decoder does not expose the
// field it failed on, so the standard library, which does, reads the same JSON once more.
func decodeError(data []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	if !errors.As(json.Unmarshal(data, &batchv1.Job{}), &typeErr) {
		return &api.FieldError{
			Field:   templateField,
			Problem: "cannot be read as a Job: " + strings.TrimPrefix(err.Error(), "json: "),
			Fix:     "correct the value the message names",
		}
	}
	field := templateField
	if typeErr.Field != "" {
		field += "." + bracketIndexes(typeErr.Field)
	}
	got, want := jsonValueName(typeErr.Value), kindName(typeErr.Type)
	fix := "write " + want + " there"
	switch {
	case typeErr.Field == "":
		fix = "write the template as one Job: a mapping with apiVersion, kind, metadata and spec"
	case strings.HasPrefix(typeErr.Value, "number") && strings.HasPrefix(want, "a whole number"):
		return &api.FieldError{
			Field:   field,
			Problem: fmt.Sprintf("is the %s, which is not %s", typeErr.Value, want),
			Fix:     fix,
		}
	case want == "text":
		fix = "quote it: YAML reads unquoted numbers and words like yes, no, on and null as other types"
	}
	return &api.FieldError{Field: field, Problem: fmt.Sprintf("is %s where %s is expected", got, want), Fix: fix}
}

// bracketIndexes writes the list indexes in encoding/json's dotted path ("containers.0.env")
// the way the strict decoder's paths have them ("containers[0].env").
func bracketIndexes(path string) string {
	var b strings.Builder
	for i, part := range strings.Split(path, ".") {
		switch {
		case part != "" && strings.Trim(part, "0123456789") == "":
			b.WriteString("[" + part + "]")
		case i > 0:
			b.WriteString("." + part)
		default:
			b.WriteString(part)
		}
	}
	return b.String()
}

func strictError(err error) error {
	path := ""
	var fieldErr kjson.FieldError
	if errors.As(err, &fieldErr) {
		path = fieldErr.FieldPath()
	}
	field := templateField
	if path != "" {
		field += "." + path
	}
	if strings.HasPrefix(err.Error(), "duplicate field") {
		return &api.FieldError{Field: field, Problem: "is given twice", Fix: "keep only one of them"}
	}
	explain := "job"
	if i := strings.LastIndex(path, "."); i >= 0 {
		explain += "." + stripIndexes(path[:i])
	}
	return &api.FieldError{
		Field:   field,
		Problem: "is not a field of a batch/v1 Job (names are case-sensitive)",
		Fix:     fmt.Sprintf("remove it or correct its spelling; `kubectl explain %s` lists the fields", explain),
	}
}

// stripIndexes turns "a.b[0].c" into "a.b.c", the form kubectl explain takes.
func stripIndexes(path string) string {
	var b strings.Builder
	depth := 0
	for _, r := range path {
		switch {
		case r == '[':
			depth++
		case r == ']' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func jsonValueName(v string) string {
	switch {
	case v == "array":
		return "a list"
	case v == "object":
		return "a mapping"
	case v == "bool":
		return "a boolean"
	case v == "string":
		return "text"
	case strings.HasPrefix(v, "number"):
		return "a number"
	}
	return v
}

func kindName(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "text"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number of type " + t.Kind().String()
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a " + t.String()
}

// checkJob enforces what noderollout needs of a Job: that it can be created as-is in the
// request's namespace and that nothing in it fights pinning the Pod to node.
func checkJob(job *batchv1.Job, node string) error {
	pod := job.Spec.Template.Spec
	const podField = templateField + ".spec.template.spec"
	switch {
	case job.APIVersion != "batch/v1":
		return &api.FieldError{Field: templateField + ".apiVersion", Problem: describe(job.APIVersion), Fix: "set apiVersion: batch/v1"}
	case job.Kind != "Job":
		return &api.FieldError{Field: templateField + ".kind", Problem: describe(job.Kind), Fix: "set kind: Job"}
	case job.GenerateName != "":
		return &api.FieldError{
			Field:   templateField + ".metadata.generateName",
			Problem: "is set, but noderollout names every Job itself",
			Fix:     "remove it",
		}
	case job.Namespace != "":
		return &api.FieldError{
			Field:   templateField + ".metadata.namespace",
			Problem: fmt.Sprintf("is %q, but the rollout request names the namespace", job.Namespace),
			Fix:     "remove it and give the namespace in the request",
		}
	case pod.RestartPolicy != corev1.RestartPolicyNever && pod.RestartPolicy != corev1.RestartPolicyOnFailure:
		return &api.FieldError{
			Field:   podField + ".restartPolicy",
			Problem: describe(string(pod.RestartPolicy)) + ", but a Job's Pods need Never or OnFailure",
			Fix:     "set restartPolicy: Never (or OnFailure to retry in place)",
		}
	case pod.NodeName != "" && pod.NodeName != node:
		return &api.FieldError{
			Field:   podField + ".nodeName",
			Problem: fmt.Sprintf("is %q, but noderollout puts each Job on its own node", pod.NodeName),
			Fix:     fmt.Sprintf("remove it, or set it to %q", NodePlaceholder),
		}
	case hasKey(pod.NodeSelector, corev1.LabelHostname):
		return &api.FieldError{
			Field:   podField + ".nodeSelector[" + corev1.LabelHostname + "]",
			Problem: "is set, but noderollout already pins each Job to its node",
			Fix:     "remove this key; keep other nodeSelector keys if you need them",
		}
	case pod.Affinity != nil && pod.Affinity.NodeAffinity != nil:
		return &api.FieldError{
			Field:   podField + ".affinity.nodeAffinity",
			Problem: "is set, but noderollout already pins each Job to its node",
			Fix:     "remove it; choose nodes with the rollout's node selector instead",
		}
	case len(pod.Containers) == 0:
		return &api.FieldError{Field: podField + ".containers", Problem: "is empty", Fix: "add at least one container"}
	}
	return nil
}

func describe(v string) string {
	if v == "" {
		return "is missing"
	}
	return fmt.Sprintf("is %q", v)
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

func hasOwner(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}

// merge returns base with ours laid over it, leaving base itself untouched.
func merge(base, ours map[string]string) map[string]string {
	out := make(map[string]string, len(base)+len(ours))
	maps.Copy(out, base)
	maps.Copy(out, ours)
	return out
}
