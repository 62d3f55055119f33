package jobspec

import (
	"errors"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

const goodTemplate = `apiVersion: batch/v1
kind: Job
metadata:
  name: ignored
  labels:
    team: infra
    noderollout.io/rollout: not-ours
  annotations:
    note: keep me
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app: kernel-check
    spec:
      nodeName: "{{node}}"
      restartPolicy: Never
      containers:
      - name: check
        image: busybox:1.36
        args: ["--node={{node}}", "--verbose"]
        env:
        - name: NODE
          value: "{{node}}"
`

// edit returns goodTemplate with old replaced by new, failing loudly when old is not there, so
// that a case can never pass by testing the good template by accident.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	require.Contains(t, goodTemplate, old)
	return strings.Replace(goodTemplate, old, new, 1)
}

const testNode = "ip-10-0-0-1.ec2.internal"

func testParams() JobParams {
	return JobParams{
		Rollout:      "nightly",
		Namespace:    "maintenance",
		Node:         testNode,
		RunID:        "run-1",
		TemplateHash: TemplateHash(goodTemplate),
	}
}

func requireFieldError(t *testing.T, err error, field string) *api.FieldError {
	t.Helper()
	var fe *api.FieldError
	require.True(t, errors.As(err, &fe), "want *FieldError, got %T: %v", err, err)
	assert.Equal(t, field, fe.Field, "error: %v", fe)
	assert.NotEmpty(t, fe.Problem)
	assert.NotEmpty(t, fe.Fix)
	assert.Equal(t, fe.Field+": "+fe.Problem+"; "+fe.Fix, fe.Error())
	return fe
}

func TestTemplateErrors(t *testing.T) {
	const pod = "jobTemplate.spec.template.spec"
	tests := []struct {
		name     string
		template string
		field    string
		problem  string // a word the problem must mention
	}{
		{name: "too big", template: goodTemplate + "#" + strings.Repeat("x", api.MaxTemplateBytes), field: "jobTemplate", problem: "limit"},
		{name: "empty", template: "", field: "jobTemplate", problem: "empty"},
		{name: "only a comment", template: "# nothing\n", field: "jobTemplate", problem: "empty"},
		{name: "two documents", template: goodTemplate + "---\n" + goodTemplate, field: "jobTemplate", problem: "more than one"},
		{name: "empty document first", template: "---\n---\n" + goodTemplate, field: "jobTemplate", problem: "more than one"},
		{name: "broken second document", template: goodTemplate + "---\n: :\n  - [", field: "jobTemplate", problem: "YAML"},
		{name: "not YAML", template: "a: b: c", field: "jobTemplate", problem: "YAML"},
		{name: "tab indentation", template: edit(t, "  backoffLimit", "\tbackoffLimit"), field: "jobTemplate", problem: "YAML"},
		{name: "duplicate key", template: goodTemplate + "kind: Job\n", field: "jobTemplate", problem: "already set"},
		{name: "a list", template: "- a\n- b\n", field: "jobTemplate", problem: "list"},
		{name: "a string", template: "hello", field: "jobTemplate", problem: "text"},
		{name: "unknown top-level field", template: goodTemplate + "extra: 1\n", field: "jobTemplate.extra", problem: "not a field"},
		{
			name:     "misspelled container field",
			template: edit(t, "        image: busybox", "        imag: busybox"),
			field:    pod + ".containers[0].imag", problem: "not a field",
		},
		{
			name:     "field in the wrong case",
			template: edit(t, "restartPolicy: Never", "RestartPolicy: Never"),
			field:    pod + ".RestartPolicy", problem: "case-sensitive",
		},
		{
			name:     "number where text is needed",
			template: edit(t, `value: "{{node}}"`, "value: 123"),
			field:    pod + ".containers[0].env[0].value", problem: "number",
		},
		{
			name:     "text where a number is needed",
			template: edit(t, "backoffLimit: 0", "backoffLimit: many"),
			field:    "jobTemplate.spec.backoffLimit", problem: "whole number",
		},
		{
			name:     "number out of range",
			template: edit(t, "backoffLimit: 0", "backoffLimit: 1e100"),
			field:    "jobTemplate.spec.backoffLimit", problem: "int32",
		},
		{
			name:     "bad quantity",
			template: edit(t, "        env:", "        resources:\n          limits:\n            cpu: lots\n        env:"),
			field:    "jobTemplate", problem: "quantities",
		},
		{name: "wrong apiVersion", template: edit(t, "apiVersion: batch/v1", "apiVersion: v1"), field: "jobTemplate.apiVersion", problem: `"v1"`},
		{name: "missing apiVersion", template: edit(t, "apiVersion: batch/v1\n", ""), field: "jobTemplate.apiVersion", problem: "missing"},
		{name: "wrong kind", template: edit(t, "kind: Job", "kind: Pod"), field: "jobTemplate.kind", problem: `"Pod"`},
		{name: "missing kind", template: edit(t, "kind: Job\n", ""), field: "jobTemplate.kind", problem: "missing"},
		{name: "generateName", template: edit(t, "  name: ignored", "  generateName: job-"), field: "jobTemplate.metadata.generateName", problem: "names"},
		{name: "namespace", template: edit(t, "  name: ignored", "  namespace: default"), field: "jobTemplate.metadata.namespace", problem: `"default"`},
		{
			name:     "restartPolicy Always",
			template: edit(t, "restartPolicy: Never", "restartPolicy: Always"),
			field:    pod + ".restartPolicy", problem: `"Always"`,
		},
		{
			name:     "restartPolicy missing",
			template: edit(t, "      restartPolicy: Never\n", ""),
			field:    pod + ".restartPolicy", problem: "missing",
		},
		{
			name:     "restartPolicy unknown",
			template: edit(t, "restartPolicy: Never", "restartPolicy: Sometimes"),
			field:    pod + ".restartPolicy", problem: `"Sometimes"`,
		},
		{
			name:     "nodeName fixed",
			template: edit(t, `nodeName: "{{node}}"`, "nodeName: node-7"),
			field:    pod + ".nodeName", problem: `"node-7"`,
		},
		{
			name:     "nodeName with the placeholder inside",
			template: edit(t, `nodeName: "{{node}}"`, `nodeName: "x{{node}}"`),
			field:    pod + ".nodeName", problem: "own node",
		},
		{
			name:     "hostname nodeSelector",
			template: edit(t, "      restartPolicy:", "      nodeSelector:\n        kubernetes.io/hostname: node-7\n      restartPolicy:"),
			field:    pod + ".nodeSelector[kubernetes.io/hostname]", problem: "pins",
		},
		{
			name: "nodeAffinity",
			template: edit(t, "      restartPolicy:", `      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: kubernetes.io/os, operator: In, values: [linux]}
      restartPolicy:`),
			field: pod + ".affinity.nodeAffinity", problem: "pins",
		},
		{
			name:     "no containers",
			template: edit(t, goodTemplate[strings.Index(goodTemplate, "      containers:"):], "      containers: []\n"),
			field:    pod + ".containers", problem: "empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := ParseTemplate(tt.template)
			assert.Nil(t, job)
			fe := requireFieldError(t, err, tt.field)
			assert.Contains(t, fe.Problem, tt.problem)

			// Build checks the same things.
			job, err = Build(tt.template, testParams())
			assert.Nil(t, job)
			requireFieldError(t, err, tt.field)
		})
	}
}

func TestTemplateAccepted(t *testing.T) {
	tests := []struct {
		name     string
		template string
	}{
		{name: "good", template: goodTemplate},
		{name: "leading document marker", template: "---\n" + goodTemplate},
		{name: "trailing document marker", template: goodTemplate + "---\n"},
		{name: "trailing empty documents", template: goodTemplate + "---\n# nothing\n---\n...\n"},
		{name: "no nodeName", template: edit(t, "      nodeName: \"{{node}}\"\n", "")},
		{name: "unquoted placeholder", template: edit(t, `nodeName: "{{node}}"`, "nodeName: {{node}}")},
		{name: "OnFailure", template: edit(t, "restartPolicy: Never", "restartPolicy: OnFailure")},
		{
			name:     "other nodeSelector keys",
			template: edit(t, "      restartPolicy:", "      nodeSelector:\n        kubernetes.io/os: linux\n      restartPolicy:"),
		},
		{
			name:     "pod affinity is not node affinity",
			template: edit(t, "      restartPolicy:", "      affinity:\n        podAffinity: {}\n      restartPolicy:"),
		},
		{name: "exactly at the size limit", template: goodTemplate + "#" + strings.Repeat("x", api.MaxTemplateBytes-len(goodTemplate)-1)},
		{
			name: "JSON",
			template: `{"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {"spec": {
				"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := ParseTemplate(tt.template)
			require.NoError(t, err)
			assert.Equal(t, "Job", job.Kind)

			job, err = Build(tt.template, testParams())
			require.NoError(t, err)
			assert.Equal(t, testNode, job.Spec.Template.Spec.NodeName)
		})
	}
}

func TestBuild(t *testing.T) {
	p := testParams()
	job, err := Build(goodTemplate, p)
	require.NoError(t, err)

	assert.Equal(t, JobName("nightly", testNode, "run-1"), job.Name)
	assert.Empty(t, validation.IsDNS1123Label(job.Name))
	assert.Equal(t, "maintenance", job.Namespace)
	assert.Equal(t, map[string]string{
		"team":       "infra",
		LabelRollout: "nightly", // ours win over the template's
		LabelNode:    NodeLabelValue(testNode),
	}, job.Labels)
	assert.Equal(t, map[string]string{
		"app":        "kernel-check",
		LabelRollout: "nightly",
		LabelNode:    NodeLabelValue(testNode),
	}, job.Spec.Template.Labels)
	assert.Equal(t, map[string]string{
		"note":                 "keep me",
		AnnotationNode:         testNode,
		AnnotationTemplateHash: TemplateHash(goodTemplate),
		AnnotationRunID:        "run-1",
	}, job.Annotations)
	assert.Empty(t, job.Spec.Template.Annotations)

	pod := job.Spec.Template.Spec
	assert.Equal(t, testNode, pod.NodeName)
	require.Len(t, pod.Containers, 1)
	assert.Equal(t, []string{"--node=" + testNode, "--verbose"}, pod.Containers[0].Args)
	assert.Equal(t, testNode, pod.Containers[0].Env[0].Value)
	assert.Equal(t, "batch/v1", job.APIVersion)
	assert.Equal(t, "Job", job.Kind)
	assert.Nil(t, job.Spec.ActiveDeadlineSeconds)
	assert.Nil(t, job.Spec.TTLSecondsAfterFinished)
	assert.Empty(t, job.OwnerReferences)
}

// Build must not widen what the template's Pod may do: apart from nodeName and our labels,
// the Job is exactly what the template says.
func TestBuildAddsNothingElse(t *testing.T) {
	job, err := Build(goodTemplate, testParams())
	require.NoError(t, err)
	want, _, err := decodeJob(strings.ReplaceAll(goodTemplate, NodePlaceholder, testNode))
	require.NoError(t, err)

	assert.Equal(t, want.Spec.Template.Spec, job.Spec.Template.Spec)
	want.Spec.Template.Labels = job.Spec.Template.Labels
	assert.Equal(t, want.Spec, job.Spec)
	assert.Nil(t, job.Spec.Template.Spec.AutomountServiceAccountToken)
	assert.Empty(t, job.Spec.Template.Spec.Volumes)
	assert.Nil(t, job.Spec.Template.Spec.SecurityContext)
	assert.Nil(t, job.Spec.Template.Spec.Containers[0].SecurityContext)
}

func TestBuildIsDeterministic(t *testing.T) {
	p := testParams()
	p.Owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "uid-1"}
	a, err := Build(goodTemplate, p)
	require.NoError(t, err)
	b, err := Build(goodTemplate, p)
	require.NoError(t, err)
	assert.Equal(t, a, b)

	p.RunID = "run-2"
	c, err := Build(goodTemplate, p)
	require.NoError(t, err)
	assert.NotEqual(t, a.Name, c.Name, "a new run gets a new Job")
}

func TestBuildDefaults(t *testing.T) {
	withLimits := edit(t, "  backoffLimit: 0\n", "  backoffLimit: 0\n  activeDeadlineSeconds: 60\n  ttlSecondsAfterFinished: 30\n")
	ptr64 := func(v int64) *int64 { return &v }
	ptr32 := func(v int32) *int32 { return &v }
	tests := []struct {
		name         string
		template     string
		deadline     int64
		ttl          int32
		wantDeadline *int64
		wantTTL      *int32
	}{
		{name: "no defaults asked", template: goodTemplate},
		{name: "defaults fill gaps", template: goodTemplate, deadline: 3600, ttl: 600, wantDeadline: ptr64(3600), wantTTL: ptr32(600)},
		{name: "template wins", template: withLimits, deadline: 3600, ttl: 600, wantDeadline: ptr64(60), wantTTL: ptr32(30)},
		{name: "template kept without defaults", template: withLimits, wantDeadline: ptr64(60), wantTTL: ptr32(30)},
		{name: "negative defaults ignored", template: goodTemplate, deadline: -1, ttl: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams()
			p.ActiveDeadlineSeconds = tt.deadline
			p.TTLSecondsAfterFinished = tt.ttl
			job, err := Build(tt.template, p)
			require.NoError(t, err)
			assert.Equal(t, tt.wantDeadline, job.Spec.ActiveDeadlineSeconds)
			assert.Equal(t, tt.wantTTL, job.Spec.TTLSecondsAfterFinished)
		})
	}
}

func TestBuildOwner(t *testing.T) {
	yes := true
	owner := &metav1.OwnerReference{
		APIVersion: "v1", Kind: "ConfigMap", Name: "nightly", UID: "uid-1",
		Controller: &yes, BlockOwnerDeletion: &yes,
	}
	p := testParams()
	p.Owner = owner
	job, err := Build(goodTemplate, p)
	require.NoError(t, err)
	assert.Equal(t, []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "nightly", UID: "uid-1"}}, job.OwnerReferences)
	assert.Same(t, &yes, owner.Controller, "the caller's owner is left alone")

	// A template that already names the owner does not get it twice.
	withOwner := edit(t, "  name: ignored\n", "  name: ignored\n  ownerReferences:\n  - {apiVersion: v1, kind: ConfigMap, name: nightly, uid: uid-1}\n")
	job, err = Build(withOwner, p)
	require.NoError(t, err)
	assert.Len(t, job.OwnerReferences, 1)
}

func TestBuildParamErrors(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*JobParams)
		field string
	}{
		{name: "empty rollout", edit: func(p *JobParams) { p.Rollout = "" }, field: "rollout"},
		{name: "rollout too long", edit: func(p *JobParams) { p.Rollout = strings.Repeat("r", 64) }, field: "rollout"},
		{name: "rollout uppercase", edit: func(p *JobParams) { p.Rollout = "Nightly" }, field: "rollout"},
		{name: "empty namespace", edit: func(p *JobParams) { p.Namespace = "" }, field: "namespace"},
		{name: "empty node", edit: func(p *JobParams) { p.Node = "" }, field: "node"},
		{name: "uppercase node", edit: func(p *JobParams) { p.Node = "Node-1" }, field: "node"},
		{name: "node too long", edit: func(p *JobParams) { p.Node = longNode + "a" }, field: "node"},
		// Node names are spliced into YAML text; anything but a DNS name could rewrite the Job.
		{name: "node injecting YAML", edit: func(p *JobParams) { p.Node = "a\"\n      privileged: true\n#" }, field: "node"},
		{name: "owner without uid", edit: func(p *JobParams) { p.Owner = &metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "x"} }, field: "owner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams()
			tt.edit(&p)
			job, err := Build(goodTemplate, p)
			assert.Nil(t, job)
			requireFieldError(t, err, tt.field)
		})
	}
}

func TestBuildRenderedTooBig(t *testing.T) {
	many := strings.Repeat(`        - {name: A, value: "{{node}}{{node}}{{node}}{{node}}"}`+"\n", 3000)
	tmpl := edit(t, "        env:\n", "        env:\n"+many)
	require.Less(t, len(tmpl), api.MaxTemplateBytes)
	_, err := ParseTemplate(tmpl)
	require.NoError(t, err, "a sample node name is short")

	p := testParams()
	p.Node = longNode
	_, err = Build(tmpl, p)
	fe := requireFieldError(t, err, "jobTemplate")
	assert.Contains(t, fe.Problem, "grows")
}

func TestBuildLongNode(t *testing.T) {
	p := testParams()
	p.Node = longNode
	job, err := Build(goodTemplate, p)
	require.NoError(t, err)
	assert.Equal(t, longNode, job.Spec.Template.Spec.NodeName)
	assert.Equal(t, longNode, job.Annotations[AnnotationNode])
	assert.Empty(t, validation.IsDNS1123Label(job.Name))
	for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
		for _, v := range labels {
			requireLabelValue(t, v)
		}
	}
}

// The placeholder is replaced in the text, so where it stands unquoted YAML decides the type of
// the result. Nodes whose names YAML reads as something else must be refused, not mangled.
func TestBuildNodeNamesYAMLReadsAsOtherTypes(t *testing.T) {
	unquoted := edit(t, `value: "{{node}}"`, "value: {{node}}")
	unquotedKey := edit(t, "    app: kernel-check\n", "    app: kernel-check\n        {{node}}: x\n")
	tests := []struct {
		name, template, node string
		wantErr              bool
	}{
		{name: "ordinary name, unquoted", template: unquoted, node: testNode},
		{name: "date-like name, unquoted", template: unquoted, node: "2001-12-14"},
		{name: "null", template: unquoted, node: "null", wantErr: true},
		{name: "yes", template: unquoted, node: "yes", wantErr: true},
		{name: "on", template: unquoted, node: "on", wantErr: true},
		{name: "integer", template: unquoted, node: "123", wantErr: true},
		{name: "octal", template: unquoted, node: "017", wantErr: true},
		{name: "hex", template: unquoted, node: "0x1f", wantErr: true},
		{name: "float", template: unquoted, node: "1e5", wantErr: true},
		{name: "octal as a key", template: unquotedKey, node: "017", wantErr: true},
		{name: "ordinary name as a key", template: unquotedKey, node: "node-1"},
		// The readings' keys are sorted: this name sorts before "app", the sample's after it.
		{name: "name that sorts first, as a key", template: unquotedKey, node: "aaa-node"},
		{name: "zero as a key, read as the same text", template: unquotedKey, node: "0"},
		{name: "null, quoted", template: goodTemplate, node: "null"},
		{name: "octal, quoted", template: goodTemplate, node: "017"},
		{name: "yes, quoted", template: goodTemplate, node: "yes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testParams()
			p.Node = tt.node
			job, err := Build(tt.template, p)
			if tt.wantErr {
				fe := requireFieldError(t, err, "jobTemplate")
				assert.Contains(t, fe.Fix, "quotes")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.node, job.Spec.Template.Spec.Containers[0].Env[0].Value)
		})
	}
}

func TestSampleNodes(t *testing.T) {
	for _, s := range sampleNodes {
		assert.Empty(t, validation.IsDNS1123Subdomain(s))
		// No border (a prefix that is also a suffix): occurrences of s can never overlap.
		for n := 1; n < len(s); n++ {
			assert.NotEqual(t, s[:n], s[len(s)-n:], "%q has border %q", s, s[:n])
		}
	}

	// A template that happens to contain a sample name is still checked with another one.
	tmpl := edit(t, "    note: keep me", "    note: "+sampleNodes[0])
	_, err := ParseTemplate(strings.Replace(tmpl, `nodeName: "{{node}}"`, "nodeName: "+sampleNodes[0], 1))
	requireFieldError(t, err, "jobTemplate.spec.template.spec.nodeName")
}

func TestFieldErrorMessage(t *testing.T) {
	err := &api.FieldError{Field: "jobTemplate.kind", Problem: `is "Pod"`, Fix: "set kind: Job"}
	assert.Equal(t, `jobTemplate.kind: is "Pod"; set kind: Job`, err.Error())
}

// ParseTemplate hands back the Job rendered for a sample node, so callers can inspect it.
func TestParseTemplateReturnsTheJob(t *testing.T) {
	job, err := ParseTemplate(goodTemplate)
	require.NoError(t, err)
	assert.IsType(t, &batchv1.Job{}, job)
	assert.Equal(t, "infra", job.Labels["team"])
	assert.Empty(t, validation.IsDNS1123Subdomain(job.Spec.Template.Spec.NodeName))
}

// Every Job carries our finalizer, so that its outcome outlasts a deletion (a TTL of 0, a
// person tidying up) that comes while no worker watches; the template's own finalizers stay.
func TestBuildAddsTheOutcomeFinalizer(t *testing.T) {
	job, err := Build(goodTemplate, testParams())
	require.NoError(t, err)
	require.Equal(t, []string{FinalizerOutcome}, job.Finalizers)

	withOwn := strings.Replace(goodTemplate, "metadata:\n", "metadata:\n  finalizers: [example.com/keep]\n", 1)
	job, err = Build(withOwn, testParams())
	require.NoError(t, err)
	require.Equal(t, []string{"example.com/keep", FinalizerOutcome}, job.Finalizers)
}
