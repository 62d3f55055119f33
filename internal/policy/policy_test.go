package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testPolicy: "maint" may do everything host-level as node-maint; "apps" nothing; images from
// one registry path and Docker Hub's busybox.
const testPolicy = `
namespaces:
  maint:
    serviceAccounts: [node-maint]
    privileged: true
    hostPath: true
    hostNetwork: true
    hostPID: true
    protectedNodes: true
  apps: {}
images:
- registry.example.com/node-tools/
- docker.io/library/busybox
maxParallelism: 50
`

func mustParse(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse([]byte(text))
	require.NoError(t, err)
	return p
}

// job is a Job in ns whose Pod runs image; change adjusts it.
func job(ns, image string, change func(*corev1.PodSpec)) *batchv1.Job {
	j := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "work", Image: image}},
		}}},
	}
	if change != nil {
		change(&j.Spec.Template.Spec)
	}
	return j
}

func privileged(s *corev1.PodSpec) {
	yes := true
	s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
}

func hostPath(s *corev1.PodSpec) {
	s.Volumes = append(s.Volumes, corev1.Volume{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
}

func TestCheckJobEachRuleAllowsAndDenies(t *testing.T) {
	p := mustParse(t, testPolicy)
	cases := []struct {
		name  string
		job   *batchv1.Job
		rule  string // "" = allowed
		field string
	}{
		// namespaces
		{"listed namespace", job("apps", "docker.io/library/busybox:1.36", nil), "", ""},
		{"unlisted namespace", job("kube-system", "docker.io/library/busybox", nil), RuleNamespaces, "namespace"},
		// images
		{"image under a prefix", job("apps", "registry.example.com/node-tools/kata:1.2", nil), "", ""},
		{"short Docker Hub name is normalised", job("apps", "busybox", nil), "", ""},
		{"image by digest", job("apps", "busybox@sha256:"+sha, nil), "", ""},
		{"image from another registry", job("apps", "evil.example.com/node-tools/kata", nil), RuleImages, "jobTemplate.spec.template.spec.containers[0].image"},
		{"prefix is not a string prefix", job("apps", "docker.io/library/busyboxx", nil), RuleImages, "jobTemplate.spec.template.spec.containers[0].image"},
		{"init container image", job("apps", "busybox", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "quay.io/other/x"}}
		}), RuleImages, "jobTemplate.spec.template.spec.initContainers[0].image"},
		{"unparseable image", job("apps", "UPPER/Case", nil), RuleImages, "jobTemplate.spec.template.spec.containers[0].image"},
		// serviceAccounts
		{"default ServiceAccount", job("apps", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "default" }), "", ""},
		{"listed ServiceAccount", job("maint", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint" }), "", ""},
		{"unlisted ServiceAccount", job("apps", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint" }), RuleServiceAccounts, "jobTemplate.spec.template.spec.serviceAccountName"},
		{"deprecated serviceAccount field", job("apps", "busybox", func(s *corev1.PodSpec) { s.DeprecatedServiceAccount = "admin" }), RuleServiceAccounts, "jobTemplate.spec.template.spec.serviceAccount"},
		{"default not allowed once others are listed", job("maint", "busybox", nil), RuleServiceAccounts, "jobTemplate.spec.template.spec.serviceAccountName"},
		// privileged
		{"privileged where granted", job("maint", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint"; privileged(s) }), "", ""},
		{"privileged where not granted", job("apps", "busybox", privileged), RulePrivileged, "jobTemplate.spec.template.spec.containers[0].securityContext.privileged"},
		{"privileged false is fine", job("apps", "busybox", func(s *corev1.PodSpec) {
			no := false
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &no}
		}), "", ""},
		// hostPath
		{"hostPath where granted", job("maint", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint"; hostPath(s) }), "", ""},
		{"hostPath where not granted", job("apps", "busybox", hostPath), RuleHostPath, "jobTemplate.spec.template.spec.volumes[0].hostPath"},
		// hostNetwork
		{"hostNetwork where granted", job("maint", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint"; s.HostNetwork = true }), "", ""},
		{"hostNetwork where not granted", job("apps", "busybox", func(s *corev1.PodSpec) { s.HostNetwork = true }), RuleHostNetwork, "jobTemplate.spec.template.spec.hostNetwork"},
		// hostPID
		{"hostPID where granted", job("maint", "busybox", func(s *corev1.PodSpec) { s.ServiceAccountName = "node-maint"; s.HostPID = true }), "", ""},
		{"hostPID where not granted", job("apps", "busybox", func(s *corev1.PodSpec) { s.HostPID = true }), RuleHostPID, "jobTemplate.spec.template.spec.hostPID"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireVerdict(t, p.CheckJob(c.job), c.rule, c.field)
		})
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func requireVerdict(t *testing.T, err error, rule, field string) {
	t.Helper()
	if rule == "" {
		require.NoError(t, err)
		return
	}
	var d *Denial
	require.True(t, errors.As(err, &d), "want a denial by %s, got %v", rule, err)
	require.Equal(t, rule, d.Rule, d.Error())
	require.Equal(t, field, d.Field, d.Error())
	require.Contains(t, err.Error(), rule)
	require.Contains(t, err.Error(), field)
}

func TestCheckRequestEachRuleAllowsAndDenies(t *testing.T) {
	p := mustParse(t, testPolicy)
	cases := []struct {
		name  string
		req   Request
		rule  string
		field string
	}{
		{"listed namespace", Request{Namespace: "apps", Parallelism: 10}, "", ""},
		{"unlisted namespace", Request{Namespace: "kube-system", Parallelism: 10}, RuleNamespaces, "namespace"},
		{"template from a listed namespace", Request{Namespace: "apps", TemplateNamespace: "maint", Parallelism: 10}, "", ""},
		{"template from an unlisted namespace", Request{Namespace: "apps", TemplateNamespace: "secrets", Parallelism: 10}, RuleNamespaces, "jobTemplateRef.namespace"},
		{"parallelism at the cap", Request{Namespace: "apps", Parallelism: 50}, "", ""},
		{"parallelism over the cap", Request{Namespace: "apps", Parallelism: 51}, RuleMaxParallelism, "parallelism"},
		{"ordinary selector", Request{Namespace: "apps", NodeSelector: "pool=gpu", Parallelism: 1}, "", ""},
		{"selector excluding the control plane", Request{Namespace: "apps", NodeSelector: "pool=gpu,!node-role.kubernetes.io/control-plane", Parallelism: 1}, "", ""},
		{"selector targeting the control plane", Request{Namespace: "apps", NodeSelector: "node-role.kubernetes.io/control-plane", Parallelism: 1}, RuleProtectedNodeLabels, "nodeSelector"},
		{"selector targeting masters by value", Request{Namespace: "apps", NodeSelector: "node-role.kubernetes.io/master in (,true)", Parallelism: 1}, RuleProtectedNodeLabels, "nodeSelector"},
		{"control plane where granted", Request{Namespace: "maint", NodeSelector: "node-role.kubernetes.io/control-plane=", Parallelism: 1}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireVerdict(t, p.CheckRequest(c.req), c.rule, c.field)
		})
	}
}

func TestCheckNodeKeepsRolloutsOffProtectedNodes(t *testing.T) {
	p := mustParse(t, testPolicy)
	cp := map[string]string{"node-role.kubernetes.io/control-plane": ""}
	requireVerdict(t, p.CheckNode("apps", "w1", map[string]string{"pool": "gpu"}), "", "")
	requireVerdict(t, p.CheckNode("apps", "cp1", cp), RuleProtectedNodeLabels, "node cp1")
	requireVerdict(t, p.CheckNode("maint", "cp1", cp), "", "")

	byValue := mustParse(t, "namespaces: {apps: {}}\nprotectedNodeLabels: [tier=prod]\n")
	requireVerdict(t, byValue.CheckNode("apps", "n", map[string]string{"tier": "dev"}), "", "")
	requireVerdict(t, byValue.CheckNode("apps", "n", map[string]string{"tier": "prod"}), RuleProtectedNodeLabels, "node n")
	requireVerdict(t, byValue.CheckNode("apps", "n", cp), "", "") // its own list replaces the default
	requireVerdict(t, byValue.CheckRequest(Request{Namespace: "apps", NodeSelector: "tier=dev", Parallelism: 1}), "", "")
	requireVerdict(t, byValue.CheckRequest(Request{Namespace: "apps", NodeSelector: "tier=prod", Parallelism: 1}), RuleProtectedNodeLabels, "nodeSelector")

	none := mustParse(t, "namespaces: {apps: {}}\nprotectedNodeLabels: []\n")
	requireVerdict(t, none.CheckNode("apps", "cp1", cp), "", "")
}

func TestAnyNamespaceCoversUnlistedNamespaces(t *testing.T) {
	p := mustParse(t, "namespaces:\n  \"*\": {}\n  maint: {hostPID: true}\n")
	requireVerdict(t, p.CheckJob(job("anything", "quay.io/x/y", nil)), "", "")
	requireVerdict(t, p.CheckJob(job("anything", "busybox", func(s *corev1.PodSpec) { s.HostPID = true })), RuleHostPID, "jobTemplate.spec.template.spec.hostPID")
	requireVerdict(t, p.CheckJob(job("maint", "busybox", func(s *corev1.PodSpec) { s.HostPID = true })), "", "")
}

func TestNoPolicyAllowsEverything(t *testing.T) {
	var p *Policy
	require.NoError(t, p.CheckRequest(Request{Namespace: "kube-system", NodeSelector: "node-role.kubernetes.io/control-plane", Parallelism: 1000}))
	require.NoError(t, p.CheckJob(job("kube-system", "evil.example.com/x", privileged)))
	require.NoError(t, p.CheckNode("kube-system", "cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}))
}

func TestParseRejectsMistakesNamingTheKey(t *testing.T) {
	cases := map[string]string{
		"namespaces: {apps: {}}\nimage: [docker.io/x]\n":                `unknown field "image"`,
		"namespaces: {apps: {privilegd: true}}\n":                       `unknown field "privilegd"`,
		"images: [docker.io/x]\n":                                       "namespaces: required",
		"namespaces: {Apps: {}}\n":                                      `namespaces: "Apps" is not a namespace name`,
		"namespaces: {apps: {}}\nimages: [busybox]\n":                   `images: "busybox" must start with a registry host`,
		"namespaces: {apps: {}}\nmaxParallelism: -1\n":                  "maxParallelism: -1 is negative",
		"namespaces: {apps: {}}\nprotectedNodeLabels: [\"bad key\"]\n":  `protectedNodeLabels: "bad key"`,
		"namespaces: {apps: {serviceAccounts: [\"Not_Valid\"]}}\n":      `namespaces.apps.serviceAccounts: "Not_Valid"`,
		"namespaces: {ops: {drain: true, evictNamespaces: [Tenant]}}\n": `namespaces.ops.evictNamespaces: "Tenant" is not a namespace name`,
		"namespaces: {ops: {evictNamespaces: [tenant]}}\n":              "namespaces.ops.evictNamespaces: set without drain: true",
		"namespaces: {apps: {capabilities: [\"NET ADMIN\"]}}\n":         `namespaces.apps.capabilities: "NET ADMIN" is not a capability name`,
		"namespaces: {apps: {runtimeClasses: [Kata]}}\n":                `namespaces.apps.runtimeClasses: "Kata" is not a RuntimeClass name`,
		"namespaces: {apps: {volumeTypes: [hostPath]}}\n":               "hostPath has its own rule",
		"namespaces: {apps: {volumeTypes: [nfsv4]}}\n":                  `namespaces.apps.volumeTypes: "nfsv4" is not a volume type`,
		"namespaces: {apps: {secrets: [Bad_Name]}}\n":                   `namespaces.apps.secrets: "Bad_Name" is not a Secret name`,
		"namespaces: {apps: {logTailWithSecret: true}}\n":               `did you mean "logTailWithSecrets"?`,
	}
	for text, want := range cases {
		_, err := Parse([]byte(text))
		require.ErrorContains(t, err, want, text)
	}
	p := mustParse(t, "namespaces: {apps: {}}\n")
	require.Equal(t, DefaultProtectedNodeLabels, p.ProtectedNodeLabels, "left out: the control plane is protected")
}

func TestLoadReadsJSONToo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"namespaces":{"apps":{}},"maxParallelism":5}`), 0o600))
	p, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, 5, p.MaxParallelism)
	_, err = Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.ErrorContains(t, err, "policy:")
}

func TestWithinNamespaces(t *testing.T) {
	p := mustParse(t, testPolicy)
	require.NoError(t, p.WithinNamespaces(nil), "a cluster-wide watch fits any policy")
	require.NoError(t, p.WithinNamespaces([]string{"maint", "apps", "extra"}))
	require.ErrorContains(t, p.WithinNamespaces([]string{"maint"}), `"apps"`)
	anyNS := mustParse(t, "namespaces: {\"*\": {}}\n")
	require.ErrorContains(t, anyNS.WithinNamespaces([]string{"maint"}), `"*"`)
}

// BenchmarkCheckJob is the policy's cost per CreateJob (the Node label GET aside).
func BenchmarkCheckJob(b *testing.B) {
	p, err := Parse([]byte(testPolicy))
	if err != nil {
		b.Fatal(err)
	}
	j := job("maint", "registry.example.com/node-tools/kata:1.2", func(s *corev1.PodSpec) {
		s.ServiceAccountName = "node-maint"
		privileged(s)
		hostPath(s)
	})
	for b.Loop() {
		if err := p.CheckJob(j); err != nil {
			b.Fatal(err)
		}
	}
}

// A misspelt rule is refused (it must never silently allow), naming every unknown key with
// the rule it was probably meant to be, at the top and within a namespace's rules.
func TestMisspeltRulesAreNamedWithAHint(t *testing.T) {
	_, err := Parse([]byte("namespaces:\n  maint: {privilegd: true}\nmaxParalelism: 5\n"))
	require.Error(t, err)
	require.ErrorContains(t, err, `unknown field "maxParalelism"; did you mean "maxParallelism"?`)
	require.ErrorContains(t, err, `namespaces.maint: unknown field "privilegd"; did you mean "privileged"?`)
}

// maintenancePolicy: "ops" may cordon and drain anywhere except kube-system's Pods, "cordon"
// may only cordon, "apps" neither.
const maintenancePolicy = `
namespaces:
  ops: {drain: true, evictNamespaces: [tenant, batch]}
  anyevict: {drain: true}
  cordon: {cordon: true}
  apps: {}
`

func TestCheckNodeWriteEachRuleAllowsAndDenies(t *testing.T) {
	p := mustParse(t, maintenancePolicy)
	cp := map[string]string{"node-role.kubernetes.io/control-plane": ""}
	worker := map[string]string{"pool": "a"}
	pods := func(refs ...string) []PodRef {
		var out []PodRef
		for _, r := range refs {
			ns, name, _ := strings.Cut(r, "/")
			out = append(out, PodRef{Namespace: ns, Name: name})
		}
		return out
	}
	cases := []struct {
		name  string
		w     NodeWrite
		rule  string
		field string
	}{
		{"a Job on a worker", NodeWrite{Namespace: "apps", Node: "w1", NodeLabels: worker}, "", ""},
		{"a Job on the control plane", NodeWrite{Namespace: "apps", Node: "cp1", NodeLabels: cp}, RuleProtectedNodeLabels, "node cp1"},
		{"a namespace not listed", NodeWrite{Namespace: "other", Node: "w1", NodeLabels: worker}, RuleNamespaces, "namespace"},
		{"no namespace (an input from before)", NodeWrite{Node: "w1", NodeLabels: worker, Cordon: true}, RuleNamespaces, "namespace"},
		// cordon
		{"cordon where granted", NodeWrite{Namespace: "cordon", Node: "w1", NodeLabels: worker, Cordon: true}, "", ""},
		{"cordon where drain is granted", NodeWrite{Namespace: "ops", Node: "w1", NodeLabels: worker, Cordon: true}, "", ""},
		{"cordon where not granted", NodeWrite{Namespace: "apps", Node: "w1", NodeLabels: worker, Cordon: true}, RuleCordon, "maintenance.cordon"},
		{"cordon of the control plane", NodeWrite{Namespace: "cordon", Node: "cp1", NodeLabels: cp, Cordon: true}, RuleProtectedNodeLabels, "node cp1"},
		// drain
		{"drain where granted", NodeWrite{Namespace: "ops", Node: "w1", NodeLabels: worker, Drain: true, Evict: pods("tenant/web-1", "batch/x")}, "", ""},
		{"drain where only cordon is granted", NodeWrite{Namespace: "cordon", Node: "w1", NodeLabels: worker, Drain: true}, RuleDrain, "maintenance.drain"},
		{"drain where nothing is granted", NodeWrite{Namespace: "apps", Node: "w1", NodeLabels: worker, Drain: true}, RuleDrain, "maintenance.drain"},
		{"drain of the control plane", NodeWrite{Namespace: "ops", Node: "cp1", NodeLabels: cp, Drain: true}, RuleProtectedNodeLabels, "node cp1"},
		// evictNamespaces
		{"evicting a Pod of a namespace not listed", NodeWrite{Namespace: "ops", Node: "w1", NodeLabels: worker, Drain: true,
			Evict: pods("tenant/web-1", "kube-system/coredns-1")}, RuleEvictNamespaces, "pod kube-system/coredns-1"},
		{"evictNamespaces left out: any", NodeWrite{Namespace: "anyevict", Node: "w1", NodeLabels: worker, Drain: true,
			Evict: pods("kube-system/coredns-1")}, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireVerdict(t, p.CheckNodeWrite(c.w), c.rule, c.field)
		})
	}
	star := mustParse(t, "namespaces: {ops: {drain: true, evictNamespaces: [\"*\"]}}\n")
	requireVerdict(t, star.CheckNodeWrite(NodeWrite{Namespace: "ops", Node: "w1", Drain: true, Evict: pods("kube-system/x")}), "", "")
	granted := mustParse(t, "namespaces: {ops: {drain: true, protectedNodes: true}}\n")
	requireVerdict(t, granted.CheckNodeWrite(NodeWrite{Namespace: "ops", Node: "cp1", NodeLabels: cp, Drain: true}), "", "")
	var none *Policy
	require.NoError(t, none.CheckNodeWrite(NodeWrite{Node: "cp1", NodeLabels: cp, Drain: true, Evict: pods("kube-system/x")}))
}

func TestCheckRequestJudgesMaintenance(t *testing.T) {
	p := mustParse(t, maintenancePolicy)
	requireVerdict(t, p.CheckRequest(Request{Namespace: "ops", Parallelism: 1, Drain: true, Cordon: true}), "", "")
	requireVerdict(t, p.CheckRequest(Request{Namespace: "cordon", Parallelism: 1, Cordon: true}), "", "")
	requireVerdict(t, p.CheckRequest(Request{Namespace: "cordon", Parallelism: 1, Cordon: true, Drain: true}), RuleDrain, "maintenance.drain")
	requireVerdict(t, p.CheckRequest(Request{Namespace: "apps", Parallelism: 1, Cordon: true}), RuleCordon, "maintenance.cordon")
	requireVerdict(t, p.CheckRequest(Request{Namespace: "apps", Parallelism: 1}), "", "")
}
