package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Request is what a rollout asks for, as far as the policy judges it before any Job exists.
type Request struct {
	Namespace string
	// TemplateNamespace is the namespace of the jobTemplateRef ConfigMap; empty for an inline template.
	TemplateNamespace string
	NodeSelector      string
	Parallelism       int
	// Cordon and Drain are the request's maintenance: it cordons, or cordons and drains, the
	// nodes it reaches.
	Cordon, Drain bool
}

// NodeWrite is a write a rollout is about to make to one node: its Job (neither Cordon nor
// Drain), a cordon, or a drain evicting Evict.
type NodeWrite struct {
	Namespace  string // the rollout's, where its Jobs go
	Node       string
	NodeLabels map[string]string
	Cordon     bool
	Drain      bool
	Evict      []PodRef // the Pods the drain would evict
}

// PodRef names a Pod.
type PodRef struct{ Namespace, Name string }

// podSpecField is where the rendered Job's Pod spec sits, spelled as the request spells it.
const podSpecField = "jobTemplate.spec.template.spec"

// CheckRequest judges a request before any node starts. A nil Policy allows everything.
func (p *Policy) CheckRequest(r Request) error {
	if p == nil {
		return nil
	}
	rules, err := p.namespace(r.Namespace, "namespace")
	if err != nil {
		return err
	}
	if r.TemplateNamespace != "" {
		// The template's text lands in the workflow history: reading it is a disclosure too.
		if _, err := p.namespace(r.TemplateNamespace, "jobTemplateRef.namespace"); err != nil {
			return err
		}
	}
	if err := checkMaintenance(r.Namespace, rules, r.Cordon, r.Drain); err != nil {
		return err
	}
	if p.MaxParallelism > 0 && r.Parallelism > p.MaxParallelism {
		return &Denial{RuleMaxParallelism, "parallelism",
			fmt.Sprintf("%d is over the policy's %d; ask for at most %d", r.Parallelism, p.MaxParallelism, p.MaxParallelism)}
	}
	if r.NodeSelector != "" && !rules.ProtectedNodes {
		if label, ok := p.selectorTargetsProtected(r.NodeSelector); ok {
			return &Denial{RuleProtectedNodeLabels, "nodeSelector",
				fmt.Sprintf("%q selects nodes labelled %s, which rollouts into namespace %q may not reach; select other nodes or add !%s",
					r.NodeSelector, label, r.Namespace, labelKey(label))}
		}
	}
	return nil
}

// CheckJob judges one rendered Job: its namespace and everything its Pod would run with.
// A nil Policy allows everything.
func (p *Policy) CheckJob(job *batchv1.Job) error {
	if p == nil {
		return nil
	}
	rules, err := p.namespace(job.Namespace, "namespace")
	if err != nil {
		return err
	}
	spec := &job.Spec.Template.Spec
	if err := p.checkImages(spec); err != nil {
		return err
	}
	if err := checkServiceAccount(job.Namespace, rules, spec); err != nil {
		return err
	}
	return checkPodAccess(job.Namespace, rules, &job.Spec.Template)
}

// CheckNode judges whether a Job in namespace may run on a node with these labels: the
// guarantee behind the selector check, since explicit node names and broad selectors reach
// nodes no selector names. A nil Policy allows everything.
func (p *Policy) CheckNode(namespace, node string, nodeLabels map[string]string) error {
	if p == nil {
		return nil
	}
	if rules, _ := p.rules(namespace); rules.ProtectedNodes {
		return nil
	}
	for _, l := range p.ProtectedNodeLabels {
		key, value, byValue := strings.Cut(l, "=")
		if v, has := nodeLabels[key]; has && (!byValue || v == value) {
			return &Denial{RuleProtectedNodeLabels, "node " + node,
				fmt.Sprintf("the node is labelled %s, which rollouts into namespace %q may not reach", l, namespace)}
		}
	}
	return nil
}

// GuardsNodes says whether CheckNode can deny anything, so callers may skip reading Node labels.
func (p *Policy) GuardsNodes() bool {
	if p == nil || len(p.ProtectedNodeLabels) == 0 {
		return false
	}
	for _, rules := range p.Namespaces {
		if !rules.ProtectedNodes {
			return true
		}
	}
	return false
}

func (p *Policy) namespace(ns, field string) (NamespaceRules, error) {
	rules, ok := p.rules(ns)
	if !ok {
		return rules, &Denial{RuleNamespaces, field,
			fmt.Sprintf("namespace %q is not one the policy allows (%s)", ns, p.allowedNamespaces())}
	}
	return rules, nil
}

// checkImages judges every image the Pod runs or mounts: each kind of container's, and each
// image volume's.
func (p *Policy) checkImages(spec *corev1.PodSpec) error {
	if len(p.Images) == 0 {
		return nil
	}
	check := func(f, image string) error {
		named, err := reference.ParseNormalizedNamed(image)
		if err != nil {
			return &Denial{RuleImages, f, fmt.Sprintf("%q is not an image reference the policy can judge: %v", image, err)}
		}
		full := named.String()
		if !slices.ContainsFunc(p.Images, func(prefix string) bool { return underPrefix(full, prefix) }) {
			return &Denial{RuleImages, f,
				fmt.Sprintf("%q (%s) is not under an allowed prefix (%s)", image, full, strings.Join(p.Images, ", "))}
		}
		return nil
	}
	for _, c := range containersOf(spec) {
		if err := check(c.field+".image", c.Image); err != nil {
			return err
		}
	}
	for i, v := range spec.Volumes {
		if v.Image != nil {
			if err := check(fmt.Sprintf("%s.volumes[%d].image.reference", podSpecField, i), v.Image.Reference); err != nil {
				return err
			}
		}
	}
	return nil
}

// underPrefix matches whole path components, tags and digests: the prefix
// docker.io/library/busybox covers busybox:1.36 but not busyboxx.
func underPrefix(image, prefix string) bool {
	if !strings.HasPrefix(image, prefix) {
		return false
	}
	if len(image) == len(prefix) || strings.HasSuffix(prefix, "/") {
		return true
	}
	return strings.ContainsRune("/:@", rune(image[len(prefix)]))
}

func checkServiceAccount(ns string, rules NamespaceRules, spec *corev1.PodSpec) error {
	allowed := rules.ServiceAccounts
	if len(allowed) == 0 {
		allowed = []string{"default"}
	}
	for _, sa := range []struct{ field, name string }{
		{"serviceAccountName", spec.ServiceAccountName},
		{"serviceAccount", spec.DeprecatedServiceAccount},
	} {
		name := sa.name
		if name == "" {
			if sa.field == "serviceAccount" {
				continue
			}
			name = "default" // what the API server fills in
		}
		if !slices.Contains(allowed, name) {
			return &Denial{RuleServiceAccounts, podSpecField + "." + sa.field,
				fmt.Sprintf("ServiceAccount %q is not one the policy allows in namespace %q (%s)", name, ns, strings.Join(allowed, ", "))}
		}
	}
	return nil
}

// selectorTargetsProtected finds a requirement that asks for a protected label to be present
// (Exists, =, ==, in): such a selector aims at protected nodes. Selectors that merely might
// match one are caught per node by CheckNode.
func (p *Policy) selectorTargetsProtected(selector string) (string, bool) {
	sel, err := labels.Parse(selector)
	if err != nil {
		return "", false // the selector's own validation reports it
	}
	reqs, _ := sel.Requirements()
	for _, protected := range p.ProtectedNodeLabels {
		key, value, byValue := strings.Cut(protected, "=")
		for _, r := range reqs {
			if r.Key() != key {
				continue
			}
			switch r.Operator() {
			case selection.Exists:
				return protected, true
			case selection.Equals, selection.DoubleEquals, selection.In:
				if !byValue || r.Values().Has(value) {
					return protected, true
				}
			}
		}
	}
	return "", false
}

func labelKey(l string) string {
	key, _, _ := strings.Cut(l, "=")
	return key
}

// CheckNodeWrite judges a write to a node before anything is written: whether the rollout may
// reach the node at all (its namespace, protectedNodeLabels), cordon it, drain it, and evict
// each of the Pods its drain would evict. A nil Policy allows everything.
func (p *Policy) CheckNodeWrite(w NodeWrite) error {
	if p == nil {
		return nil
	}
	if w.Namespace == "" {
		// An activity scheduled by a worker from before the policy judged node writes: no
		// namespace's rules can allow what it asks.
		return &Denial{RuleNamespaces, "namespace",
			"the write names no rollout namespace (an activity scheduled by an older worker); the policy cannot allow it"}
	}
	rules, err := p.namespace(w.Namespace, "namespace")
	if err != nil {
		return err
	}
	if err := p.CheckNode(w.Namespace, w.Node, w.NodeLabels); err != nil {
		return err
	}
	if err := checkMaintenance(w.Namespace, rules, w.Cordon, w.Drain); err != nil {
		return err
	}
	if !w.Drain || len(rules.EvictNamespaces) == 0 || slices.Contains(rules.EvictNamespaces, AnyNamespace) {
		return nil
	}
	for _, pod := range w.Evict {
		if !slices.Contains(rules.EvictNamespaces, pod.Namespace) {
			return &Denial{RuleEvictNamespaces, "pod " + pod.Namespace + "/" + pod.Name,
				fmt.Sprintf("drains of rollouts in namespace %q may evict Pods of %s only; the node's Pod in %q would be evicted: narrow maintenance.drain.podSelector to leave it, or drain the node otherwise",
					w.Namespace, strings.Join(rules.EvictNamespaces, ", "), pod.Namespace)}
		}
	}
	return nil
}

// checkMaintenance judges a cordon or a drain by the namespace's grants: drain covers both.
func checkMaintenance(ns string, rules NamespaceRules, cordon, drain bool) error {
	switch {
	case drain && !rules.Drain:
		return &Denial{RuleDrain, "maintenance.drain",
			fmt.Sprintf("rollouts in namespace %q may not drain nodes (evict their Pods); drop maintenance.drain or run in a namespace granted drain", ns)}
	case cordon && !rules.Cordon && !rules.Drain:
		return &Denial{RuleCordon, "maintenance.cordon",
			fmt.Sprintf("rollouts in namespace %q may not cordon nodes; drop maintenance.cordon or run in a namespace granted cordon", ns)}
	}
	return nil
}
