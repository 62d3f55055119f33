package jobspec

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
)

// longNode is a 253-character node name, the most a DNS subdomain allows.
var longNode = strings.Repeat("abcdefghi.", 25) + "xyz"

func TestLongNodeIsAValidNodeName(t *testing.T) {
	require.Len(t, longNode, 253)
	require.Empty(t, validation.IsDNS1123Subdomain(longNode))
}

func requireLabelValue(t *testing.T, v string) {
	t.Helper()
	require.Empty(t, content.IsLabelValue(v), "label value %q", v)
	require.LessOrEqual(t, len(v), 63)
}

func requireDNSLabel(t *testing.T, v string) {
	t.Helper()
	require.Empty(t, validation.IsDNS1123Label(v), "DNS label %q", v)
}

func TestNodeLabelValue(t *testing.T) {
	tests := []struct {
		name      string
		node      string
		unchanged bool
	}{
		{name: "cloud node name", node: "ip-10-0-0-1.ec2.internal", unchanged: true},
		{name: "single letter", node: "a", unchanged: true},
		{name: "uppercase is a valid label value", node: "Worker-1", unchanged: true},
		{name: "exactly 63", node: strings.Repeat("a", 63), unchanged: true},
		{name: "64 is too long", node: strings.Repeat("a", 64)},
		{name: "253 with dots", node: longNode},
		{name: "253 with dots and uppercase", node: strings.ToUpper(longNode)},
		{name: "leading dash", node: "-node"},
		{name: "trailing dot", node: "node."},
		{name: "slash", node: "rack/node-1"},
		{name: "space", node: "node 1"},
		{name: "non-ASCII", node: "nöde"},
		{name: "only punctuation", node: "..."},
		{name: "newline", node: "a\nb"},
		{name: "invalid UTF-8", node: "\xff\xfe"},
	}
	hexSuffix := regexp.MustCompile(`_[0-9a-f]{10}$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NodeLabelValue(tt.node)
			requireLabelValue(t, got)
			assert.Equal(t, got, NodeLabelValue(tt.node), "deterministic")
			if tt.unchanged {
				assert.Equal(t, tt.node, got)
				return
			}
			assert.Regexp(t, hexSuffix, got)
		})
	}
}

func TestNodeLabelValueKeepsTheStartOfLongNames(t *testing.T) {
	got := NodeLabelValue(longNode)
	assert.True(t, strings.HasPrefix(got, longNode[:40]), got)
	assert.Len(t, got, 63)
}

func TestNodeLabelValueDistinctNodes(t *testing.T) {
	long := strings.Repeat("n", 100)
	tests := []struct{ name, a, b string }{
		{name: "dot and dash", a: "a.b", b: "a-b"},
		{name: "case", a: "A", b: "a"},
		{name: "long, differing only at the end", a: long + "1", b: long + "2"},
		{name: "253, differing only at the end", a: longNode, b: longNode[:252] + "q"},
		{name: "long, dot and dash", a: long + ".b", b: long + "-b"},
		{name: "long, case", a: long + "A", b: long + "a"},
		{name: "sanitized alike", a: "a b", b: "a/b"},
		{name: "valid and its sanitized twin", a: "a-b", b: "a b"},
		{name: "empty and punctuation", a: "", b: "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NotEqual(t, NodeLabelValue(tt.a), NodeLabelValue(tt.b))
		})
	}
}

func TestJobName(t *testing.T) {
	rollouts := []string{"nightly", "r", strings.Repeat("r", 63), "kernel-upgrade-2024", "", "UPPER", "-x-"}
	nodes := []string{"ip-10-0-0-1.ec2.internal", "a", longNode, strings.ToUpper(longNode), "a.b", "a-b", "", "...", "nöde"}
	runIDs := []string{"run-1", "run-2", "", "0c8d9a3e-2c4a-4a43-9d7f-5c0e2a7f9b11"}
	seen := map[string][3]string{}
	for _, r := range rollouts {
		for _, n := range nodes {
			for _, id := range runIDs {
				name := JobName(r, n, id)
				requireDNSLabel(t, name)
				require.Equal(t, name, JobName(r, n, id), "stable")
				if prev, ok := seen[name]; ok {
					t.Fatalf("JobName%q and JobName%q are both %q", prev, [3]string{r, n, id}, name)
				}
				seen[name] = [3]string{r, n, id}
			}
		}
	}
}

func TestJobNameShape(t *testing.T) {
	tests := []struct {
		name, rollout, node string
		wantPrefix          string
	}{
		{name: "short parts kept whole", rollout: "nightly", node: "ip-10-0-0-1.ec2.internal", wantPrefix: "nightly-ip-10-0-0-1-ec2-internal-"},
		{name: "uppercase node lowered", rollout: "nightly", node: "Worker.A", wantPrefix: "nightly-worker-a-"},
		{name: "long node truncated, rollout kept", rollout: "nightly", node: longNode, wantPrefix: "nightly-abcdefghi-abcdefghi-"},
		{name: "long rollout keeps short node", rollout: strings.Repeat("r", 63), node: "n1", wantPrefix: strings.Repeat("r", 54) + "-n1-"},
		{name: "both long share the room", rollout: strings.Repeat("r", 63), node: longNode, wantPrefix: strings.Repeat("r", 28) + "-abcdefghi-"},
		{name: "no rollout", rollout: "", node: "n1", wantPrefix: "n1-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JobName(tt.rollout, tt.node, "run-1")
			requireDNSLabel(t, got)
			assert.True(t, strings.HasPrefix(got, tt.wantPrefix), "%q does not start with %q", got, tt.wantPrefix)
			assert.Regexp(t, `-[0-9a-f]{5}$`, got)
		})
	}
}

func TestJobNameDistinct(t *testing.T) {
	long := strings.Repeat("n", 100)
	tests := []struct {
		name string
		a, b [3]string
	}{
		{name: "run ID", a: [3]string{"r", "n", "run-1"}, b: [3]string{"r", "n", "run-2"}},
		{name: "dot and dash", a: [3]string{"r", "a.b", "x"}, b: [3]string{"r", "a-b", "x"}},
		{name: "case", a: [3]string{"r", "A", "x"}, b: [3]string{"r", "a", "x"}},
		{name: "long, differing only at the end", a: [3]string{"r", long + "1", "x"}, b: [3]string{"r", long + "2", "x"}},
		{name: "rollout", a: [3]string{"r1", "n", "x"}, b: [3]string{"r2", "n", "x"}},
		{name: "boundary between parts", a: [3]string{"ab", "c", "x"}, b: [3]string{"a", "bc", "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.NotEqual(t, JobName(tt.a[0], tt.a[1], tt.a[2]), JobName(tt.b[0], tt.b[1], tt.b[2]))
		})
	}
}

func TestTemplateHash(t *testing.T) {
	h := TemplateHash("a")
	assert.Regexp(t, `^[0-9a-f]{10}$`, h)
	assert.Equal(t, h, TemplateHash("a"))
	assert.NotEqual(t, h, TemplateHash("a "))
	assert.Regexp(t, `^[0-9a-f]{10}$`, TemplateHash(""))
}

func TestNodeMarker(t *testing.T) {
	assert.Equal(t, "noderollout.io/nightly", NodeMarkerKey("nightly"))
	assert.Empty(t, content.IsLabelKey(NodeMarkerKey(strings.Repeat("r", 63))))

	hash := TemplateHash("x")
	for _, outcome := range []string{"succeeded", "failed", "timedOut", "skipped", "nodeGone"} {
		gotHash, gotOutcome, ok := ParseNodeMarker(NodeMarker(hash, outcome))
		assert.True(t, ok)
		assert.Equal(t, hash, gotHash)
		assert.Equal(t, outcome, gotOutcome)
	}

	for _, bad := range []string{"", ":", "abc", "abc:", ":failed", "a:b:c"} {
		_, _, ok := ParseNodeMarker(bad)
		assert.False(t, ok, "%q", bad)
	}
}

// The helpers decide what Build accepts and what NodeLabelValue leaves alone; they must agree
// with Kubernetes exactly.
func TestNameCheckersMatchKubernetes(t *testing.T) {
	inputs := []string{
		"", "a", "A", "-", "a-", "-a", "a.b", "a..b", ".a", "a.", "a_b", "_a", "a_", "a b",
		"0", "0.0", "ip-10-0-0-1.ec2.internal", strings.Repeat("a", 63), strings.Repeat("a", 64),
		longNode, longNode + "a", strings.Repeat("a", 70) + ".b", "nöde", "a\n",
	}
	for _, s := range inputs {
		checkNameCheckers(t, s)
	}
}

func checkNameCheckers(t *testing.T, s string) {
	t.Helper()
	assert.Equal(t, len(content.IsLabelValue(s)) == 0, isLabelValue(s), "label value %q", s)
	assert.Equal(t, len(validation.IsDNS1123Label(s)) == 0, isDNSLabel(s), "DNS label %q", s)
	assert.Equal(t, len(validation.IsDNS1123Subdomain(s)) == 0, isDNSSubdomain(s), "DNS subdomain %q", s)
}
