package deploy

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/noderollout/noderollout/activities"
)

// docs/security.md's table of what the worker may do lists exactly the base's RBAC: each
// resource (as the table spells it: jobs.batch, nodes, pods/log) with its verbs. Before, it
// said configmaps "get" while the ClusterRole granted create and get.
func TestSecurityDocRBACTableMatchesTheRules(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	documented := documentedRBAC(t, string(doc))

	objs := render(t, "base")
	role := convert[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "", "noderollout-worker"))
	events := convert[rbacv1.Role](t, find(t, objs, "Role", activities.EventNamespace, "noderollout-worker-events"))
	granted := map[string][]string{}
	for _, r := range slices.Concat(role.Rules, events.Rules) {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				name := res
				if g != "" {
					name += "." + g
				}
				granted[name] = append(granted[name], r.Verbs...)
			}
		}
	}
	for name, verbs := range granted {
		slices.Sort(verbs)
		granted[name] = slices.Compact(verbs)
	}
	require.Equal(t, granted, documented, "docs/security.md's RBAC table and deploy/base/rbac.yaml disagree")
}

// documentedRBAC reads the table that starts with "| resource | verbs | scope |".
func documentedRBAC(t *testing.T, doc string) map[string][]string {
	_, table, ok := strings.Cut(doc, "| resource | verbs | scope |\n|---|---|---|\n")
	require.True(t, ok, "docs/security.md has no RBAC table")
	out := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, "|")
		require.GreaterOrEqual(t, len(cells), 4, line)
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var verbs []string
		for _, v := range strings.Split(cells[2], ",") {
			verbs = append(verbs, strings.TrimSpace(v))
		}
		slices.Sort(verbs)
		out[name] = verbs
	}
	return out
}
