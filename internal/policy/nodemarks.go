package policy

import (
	"fmt"
	"strings"
)

// Rules over the labels and taints a rollout's maintenance.onSuccess writes to its nodes.
const (
	RuleForbiddenNodeLabels = "forbiddenNodeLabels"
	RuleForbiddenTaints     = "forbiddenTaints"
)

// DefaultForbiddenNodeKeys are the label and taint keys no rollout touches when its namespace
// lists none of its own: the node's role, and the system's own taints (lifting
// node.kubernetes.io/unschedulable would uncordon the node behind the rollout's back).
var DefaultForbiddenNodeKeys = []string{"node-role.kubernetes.io/*", "node.kubernetes.io/*", "node.cloudprovider.kubernetes.io/*"}

// NodeMarks are the label and taint keys a rollout's onSuccess would write (set, add or remove).
type NodeMarks struct {
	Namespace string
	Labels    []string
	Taints    []string
}

// CheckNodeMarks judges the keys a rollout would write to its nodes after success. A nil
// Policy allows everything.
func (p *Policy) CheckNodeMarks(m NodeMarks) error {
	if p == nil || len(m.Labels)+len(m.Taints) == 0 {
		return nil
	}
	rules, err := p.namespace(m.Namespace, "namespace")
	if err != nil {
		return err
	}
	if key, pattern, ok := forbiddenKey(m.Labels, rules.ForbiddenNodeLabels); ok {
		return &Denial{RuleForbiddenNodeLabels, "maintenance.onSuccess.labels",
			fmt.Sprintf("rollouts in namespace %q may not set the node label %q (forbidden by %q); drop it from maintenance.onSuccess.labels", m.Namespace, key, pattern)}
	}
	if key, pattern, ok := forbiddenKey(m.Taints, rules.ForbiddenTaints); ok {
		return &Denial{RuleForbiddenTaints, "maintenance.onSuccess",
			fmt.Sprintf("rollouts in namespace %q may not add or remove the node taint %q (forbidden by %q); drop it from maintenance.onSuccess.addTaints/removeTaints", m.Namespace, key, pattern)}
	}
	return nil
}

// forbiddenKey is the first key a pattern forbids; patterns nil means the defaults. A pattern
// is a key, or a prefix ending in "*".
func forbiddenKey(keys, patterns []string) (key, pattern string, found bool) {
	if patterns == nil {
		patterns = DefaultForbiddenNodeKeys
	}
	for _, k := range keys {
		for _, p := range patterns {
			if prefix, wild := strings.CutSuffix(p, "*"); (wild && strings.HasPrefix(k, prefix)) || k == p {
				return k, p, true
			}
		}
	}
	return "", "", false
}
