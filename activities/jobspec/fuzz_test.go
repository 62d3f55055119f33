package jobspec

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
)

func FuzzNodeLabelValue(f *testing.F) {
	for _, s := range []string{"", "a", "A", "a.b", "a-b", "-", "...", "nöde", "a\nb", longNode, strings.ToUpper(longNode), strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, node string) {
		got := NodeLabelValue(node)
		if errs := content.IsLabelValue(got); len(errs) > 0 {
			t.Fatalf("NodeLabelValue(%q) = %q: %v", node, got, errs)
		}
		if again := NodeLabelValue(node); again != got {
			t.Fatalf("NodeLabelValue(%q) gave %q, then %q", node, got, again)
		}
		if isLabelValue(node) != (got == node) {
			t.Fatalf("NodeLabelValue(%q) = %q: only valid values may pass unchanged", node, got)
		}

		name := JobName(node, node, node)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Fatalf("JobName(%q x3) = %q: %v", node, name, errs)
		}
		checkNameCheckers(t, node)
	})
}

func FuzzBuild(f *testing.F) {
	f.Add(goodTemplate, testNode)
	f.Add(goodTemplate, longNode)
	f.Add(goodTemplate, "null")
	f.Add(strings.Replace(goodTemplate, `value: "{{node}}"`, "value: {{node}}", 1), "017")
	f.Add(goodTemplate+"---\n"+goodTemplate, testNode)
	f.Add("a: b: c", "n")
	f.Add("[1, 2]", "n")
	f.Add(`{"apiVersion": "batch/v1", "kind": "Job"}`, "n")
	f.Add("&a [*a, *a]", "n")
	f.Fuzz(func(t *testing.T, template, node string) {
		// ParseTemplate must not panic either; it fails or succeeds on its own terms.
		_, _ = ParseTemplate(template)

		p := testParams()
		p.Node = node
		job, err := Build(template, p)
		if err != nil {
			var fe *api.FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Problem == "" || fe.Fix == "" {
				t.Fatalf("Build error is not a complete *FieldError: %T %v", err, err)
			}
			return
		}
		// The reading checked against the sample's is the reading a full render gives.
		full, _, fullErr := render(template, node)
		if fullErr != nil {
			t.Fatalf("Build accepted node %q, which the template's own render refuses: %v", node, fullErr)
		}
		full.Spec.Template.Spec.NodeName = node // Build pins the Pod whatever the template says
		if !reflect.DeepEqual(full.Spec.Template.Spec, job.Spec.Template.Spec) {
			t.Fatalf("Build's Pod spec differs from the full render's for node %q", node)
		}
		if job.Spec.Template.Spec.NodeName != node {
			t.Fatalf("Job is on node %q, want %q", job.Spec.Template.Spec.NodeName, node)
		}
		if errs := validation.IsDNS1123Label(job.Name); len(errs) > 0 {
			t.Fatalf("Job name %q: %v", job.Name, errs)
		}
		if job.Namespace != p.Namespace {
			t.Fatalf("Job namespace %q, want %q", job.Namespace, p.Namespace)
		}
		for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
			if labels[LabelRollout] != p.Rollout || labels[LabelNode] != NodeLabelValue(node) {
				t.Fatalf("labels %v lack ours", labels)
			}
		}
	})
}
