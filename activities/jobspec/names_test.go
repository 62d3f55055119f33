package jobspec

import (
	"fmt"
	"math/rand/v2"
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
		{name: "EKS: the host, not the region", rollout: "nightly", node: "ip-10-0-12-34.eu-west-1.compute.internal", wantPrefix: "nightly-ip-10-0-12-34-"},
		{name: "GKE: the tail that differs", rollout: "nvidia-driver", node: "gke-production-cluster-01-gpu-pool-a100-5f2c9e1b-00ab",
			wantPrefix: "nvidia-driver-cluster-01-gpu-pool-a100-5f2c9e1b-00ab-"},
		{name: "AKS: the tail that differs", rollout: "kata", node: "aks-nodepool1-12345678-vmss00000a", wantPrefix: "kata-aks-nodepool1-12345678-vmss00000a-"},
		{name: "uppercase node lowered", rollout: "nightly", node: "Worker.A", wantPrefix: "nightly-worker-"},
		{name: "long node keeps its end", rollout: "nightly", node: strings.Repeat("abcdefghi-", 20) + "xyz", wantPrefix: "nightly-abcdefghi-abcdefghi-abcdefghi-abcdefghi-xyz-"},
		{name: "long rollout keeps short node", rollout: strings.Repeat("r", 63), node: "n1", wantPrefix: strings.Repeat("r", 49) + "-n1-"},
		{name: "both long share the room", rollout: strings.Repeat("r", 63), node: strings.Repeat("n", 60) + "-00ab", wantPrefix: strings.Repeat("r", 25) + "-" + strings.Repeat("n", 21) + "-00ab-"},
		{name: "no rollout", rollout: "", node: "n1", wantPrefix: "n1-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JobName(tt.rollout, tt.node, "run-1")
			requireDNSLabel(t, got)
			assert.Equal(t, tt.wantPrefix, JobNamePrefix(tt.rollout, tt.node))
			assert.True(t, strings.HasPrefix(got, tt.wantPrefix), "%q does not start with %q", got, tt.wantPrefix)
			assert.Regexp(t, `-[0-9a-z]{10}$`, got)
		})
	}
}

// LegacyJobName must name a Job exactly as releases before JobName changed did: running
// NodeRollout histories computed their Job's name with it.
func TestLegacyJobNameIsUnchanged(t *testing.T) {
	for _, tc := range [][4]string{
		{"nightly", "ip-10-0-0-1.ec2.internal", "run-1", "nightly-ip-10-0-0-1-ec2-internal-2427d"},
		{"nvidia-driver", "gke-production-cluster-01-gpu-pool-a100-5f2c9e1b-00ab", "0c8d9a3e-2c4a-4a43-9d7f-5c0e2a7f9b11",
			"nvidia-driver-gke-production-cluster-01-gpu-pool-a100-5f2-9a3c1"},
		{"r", "", "", "r-5da66"},
		{"", "n1", "x", "n1-fafcf"},
		{"", "", "", "709e8"},
	} {
		assert.Equal(t, tc[3], LegacyJobName(tc[0], tc[1], tc[2]), "LegacyJobName%q", tc[:3])
	}
}

// cloudNodeNames makes n distinct node names in the shapes clouds and sites give them: GKE
// ("gke-<cluster>-<pool>-<group hash>-<4 chars>"), AKS ("aks-<pool>-<8 digits>-vmss<6 base36>"),
// EKS ("ip-a-b-c-d.<region>.compute.internal"), and on-premises ("rack07-node112.dc2.example.com").
// A handful of clusters and pools, so that many names share everything but their tails.
func cloudNodeNames(rng *rand.Rand, n int) []string {
	const alnum = "0123456789abcdefghijklmnopqrstuvwxyz"
	pick := func(k int, chars string) string {
		b := make([]byte, k)
		for i := range b {
			b[i] = chars[rng.IntN(len(chars))]
		}
		return string(b)
	}
	clusters := []string{"production-cluster-01", "prod-eu-west4-gpu-training-cluster", "staging"}
	pools := []string{"gpu-pool-a100", "default-pool", "highmem-pool-n2d-standard-96"}
	groups := []string{pick(8, "0123456789abcdef"), pick(8, "0123456789abcdef")}
	regions := []string{"eu-west-1", "us-east-2", "ap-southeast-1"}
	seen := map[string]bool{}
	var names []string
	for len(names) < n {
		var name string
		switch rng.IntN(4) {
		case 0:
			name = fmt.Sprintf("gke-%s-%s-%s-%s", clusters[rng.IntN(len(clusters))], pools[rng.IntN(len(pools))],
				groups[rng.IntN(len(groups))], pick(4, alnum))
		case 1:
			name = fmt.Sprintf("aks-nodepool%d-%08d-vmss%06s", rng.IntN(3)+1, 12345678+rng.IntN(2), pick(6, alnum))
		case 2:
			name = fmt.Sprintf("ip-10-%d-%d-%d.%s.compute.internal", rng.IntN(4), rng.IntN(256), rng.IntN(256), regions[rng.IntN(len(regions))])
		default:
			name = fmt.Sprintf("rack%02d-node%03d.dc%d.example.com", rng.IntN(40), rng.IntN(1000), rng.IntN(3))
		}
		if len(name) <= 253 && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// TestJobNamesOfAFleetAreDistinct: a rollout over a large fleet of realistic node names, one run
// per node, gives every node its own valid Job name, and each name starts with the node's prefix
// and keeps the part of the node name that differs.
func TestJobNamesOfAFleetAreDistinct(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026)) // fixed: the same fleet every run
	nodes := cloudNodeNames(rng, 20000)
	for _, rollout := range []string{"nvidia-driver", "kernel-livepatch-2026-11-security-update-for-gpu-nodes-eu-wave2", "r"} {
		seen := make(map[string]string, len(nodes))
		for i, node := range nodes {
			runID := fmt.Sprintf("%08x-2c4a-4a43-9d7f-%012x", rng.Uint32(), i)
			name := JobName(rollout, node, runID)
			if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
				t.Fatalf("JobName(%q, %q) = %q: %v", rollout, node, name, errs)
			}
			if prev, dup := seen[name]; dup {
				t.Fatalf("rollout %q: nodes %q and %q both get Job %q", rollout, prev, node, name)
			}
			seen[name] = node
			prefix := JobNamePrefix(rollout, node)
			require.True(t, strings.HasPrefix(name, prefix), "%q does not start with %q", name, prefix)
			host, _, _ := strings.Cut(node, ".")
			tail := host[max(0, len(host)-4):]
			require.True(t, strings.HasSuffix(strings.TrimSuffix(prefix, "-"), tail),
				"Job %q of node %q lost the end of the node name", name, node)
		}
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
	assert.Regexp(t, `^[0-9a-f]{64}$`, h)
	assert.Equal(t, h, TemplateHash("a"))
	assert.NotEqual(t, h, TemplateHash("a "))
	assert.Equal(t, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", TemplateHash(""), "SHA-256")

	assert.True(t, TemplateHashMatches("a", h))
	assert.True(t, TemplateHashMatches("a", h[:LegacyTemplateHashLen]), "a rollout from before the whole hash")
	for _, wrong := range []string{"", h[:9], h[:11], h[:63], h + "0", TemplateHash("b"), TemplateHash("b")[:LegacyTemplateHashLen]} {
		assert.False(t, TemplateHashMatches("a", wrong), "%q", wrong)
	}

	assert.True(t, SameTemplateHash(h, h))
	assert.True(t, SameTemplateHash(h, h[:10]))
	assert.True(t, SameTemplateHash(h[:10], h))
	assert.True(t, SameTemplateHash(h[:10], h[:10]))
	for _, other := range []string{"", h[:9], h[:11], TemplateHash("b"), TemplateHash("b")[:10]} {
		assert.False(t, SameTemplateHash(h, other), "%q", other)
	}
	assert.False(t, SameTemplateHash("", ""))
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
