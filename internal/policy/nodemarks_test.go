package policy

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckNodeMarks: by default the node's role and the system's taints are forbidden; a
// namespace's own lists replace the defaults ([] forbids none), a pattern ending in "*" is a
// prefix, and the denial names its rule, field and pattern.
func TestCheckNodeMarks(t *testing.T) {
	p, err := Parse([]byte(`namespaces:
  "*": {}
  gpu: {forbiddenNodeLabels: ["example.com/team", "secure.example.com/*"], forbiddenTaints: []}
`))
	require.NoError(t, err)
	cases := []struct {
		name  string
		marks NodeMarks
		rule  string
	}{
		{"role label, default", NodeMarks{Namespace: "apps", Labels: []string{"node-role.kubernetes.io/worker"}}, RuleForbiddenNodeLabels},
		{"unschedulable taint, default", NodeMarks{Namespace: "apps", Taints: []string{"node.kubernetes.io/unschedulable"}}, RuleForbiddenTaints},
		{"own label, default", NodeMarks{Namespace: "apps", Labels: []string{"example.com/gpu-driver"}, Taints: []string{"example.com/driver-not-ready"}}, ""},
		{"exact key", NodeMarks{Namespace: "gpu", Labels: []string{"example.com/team"}}, RuleForbiddenNodeLabels},
		{"prefix", NodeMarks{Namespace: "gpu", Labels: []string{"secure.example.com/level"}}, RuleForbiddenNodeLabels},
		{"the namespace's list replaces the defaults", NodeMarks{Namespace: "gpu", Labels: []string{"node-role.kubernetes.io/gpu"}, Taints: []string{"node.kubernetes.io/x"}}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := p.CheckNodeMarks(c.marks)
			if c.rule == "" {
				require.NoError(t, err)
				return
			}
			var d *Denial
			require.True(t, errors.As(err, &d), "%v", err)
			require.Equal(t, c.rule, d.Rule)
			require.Contains(t, d.Field, "maintenance.onSuccess")
		})
	}
	require.NoError(t, (*Policy)(nil).CheckNodeMarks(NodeMarks{Namespace: "x", Labels: []string{"node-role.kubernetes.io/x"}}), "no policy: anything")
}
