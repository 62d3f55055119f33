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

// README's table of what the worker may do lists exactly the base's RBAC: each resource (as
// README spells it: jobs.batch, nodes, pods/log) with its verbs. Before, it said configmaps
// "get" while the ClusterRole granted create and get.
func TestREADMERBACTableMatchesTheRules(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	documented := readmeRBAC(t, string(readme))

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
	require.Equal(t, granted, documented, "README's RBAC table and deploy/base/rbac.yaml disagree")
}

// readmeRBAC reads the table that starts with "| resource | verbs | scope |".
func readmeRBAC(t *testing.T, readme string) map[string][]string {
	_, table, ok := strings.Cut(readme, "| resource | verbs | scope |\n|---|---|---|\n")
	require.True(t, ok, "README has no RBAC table")
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
