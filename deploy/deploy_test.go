package deploy

import (
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/activities"
	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/config"
	"github.com/noderollout/noderollout/internal/policy"
)

// WorkerRules is the worker's ClusterRole, verb for verb. It changes only together with the
// activities' Kubernetes calls (deploy/base/rbac.yaml says which activity needs each verb, and
// test/e2e/deploy_test.go shows on a real API server that each is needed).
var WorkerRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "delete", "get", "list", "patch", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}},
	DrainRules[0], DrainRules[1],
}

// DrainRules are what maintenance.drain adds: evicting a node's tenants, in whatever namespace
// they run, and naming the budgets that would block that in a dry run. Namespaced mode leaves
// them out: a drain reaches every namespace, so it needs the base ClusterRole.
var DrainRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
	{APIGroups: []string{"policy"}, Resources: []string{"poddisruptionbudgets"}, Verbs: []string{"list"}},
}

// NamespacedClusterRules is the ClusterRole in namespaced mode: what cannot be namespaced.
var NamespacedClusterRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}},
}

// JobNamespaceRules is the Role in each Job namespace in namespaced mode: together with
// NamespacedClusterRules, exactly WorkerRules (TestNamespacedModeGrantsTheSameVerbs).
var JobNamespaceRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"batch"}, Resources: []string{"jobs"}, Verbs: []string{"create", "delete", "get", "list", "patch", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}},
	{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}},
	{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}},
}

// EventRules is the Role in namespace "default", where FinalizeJob records Node Events.
var EventRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
}

const (
	namespace      = "noderollout"
	serviceAccount = "noderollout-worker"
)

func repoDir() string { return filepath.Dir(Dir()) }

func render(t *testing.T, kustomization string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Render(kustomization)
	require.NoError(t, err)
	return objs
}

// find returns the one object of a kind, namespace and name; a ConfigMap's name may carry the
// generator's hash suffix.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() != kind || o.GetNamespace() != ns {
			continue
		}
		if o.GetName() == name || (kind == "ConfigMap" && strings.HasPrefix(o.GetName(), name+"-")) {
			found = append(found, o)
		}
	}
	require.Len(t, found, 1, "%s %s/%s", kind, ns, name)
	return found[0]
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var out T
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &out, true), "%s %s", o.GetKind(), o.GetName())
	return &out
}

func deployment(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
	return convert[appsv1.Deployment](t, find(t, objs, "Deployment", namespace, "noderollout-worker"))
}

func TestEveryKustomizationRendersTheSameObjects(t *testing.T) {
	want := []string{
		"Namespace//noderollout",
		"ServiceAccount/noderollout/noderollout-worker",
		"Role/default/noderollout-worker-events",
		"ClusterRole//noderollout-worker",
		"RoleBinding/default/noderollout-worker-events",
		"ClusterRoleBinding//noderollout-worker",
		"ConfigMap/noderollout/noderollout-worker-config",
		"Service/noderollout/noderollout-worker-metrics",
		"Deployment/noderollout/noderollout-worker",
		"PodDisruptionBudget/noderollout/noderollout-worker",
	}
	for _, k := range Kustomizations {
		t.Run(k, func(t *testing.T) {
			want := slices.Clone(want)
			if k == NamespacedKustomization {
				want = append(want, "Namespace//"+JobNamespace,
					"Role/"+JobNamespace+"/noderollout-worker-jobs", "RoleBinding/"+JobNamespace+"/noderollout-worker-jobs")
			}
			var got []string
			for _, o := range render(t, k) {
				name := o.GetName()
				if o.GetKind() == "ConfigMap" {
					name = name[:strings.LastIndex(name, "-")] // the generator's hash suffix
				}
				got = append(got, o.GetKind()+"/"+o.GetNamespace()+"/"+name)
				require.Equal(t, "noderollout", o.GetLabels()["app.kubernetes.io/part-of"], "%s %s", o.GetKind(), name)
				for _, l := range []string{"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version"} {
					require.NotEmpty(t, o.GetLabels()[l], "%s %s: %s", o.GetKind(), name, l)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			require.Equal(t, want, got)
		})
	}
}

// TestClusterRoleIsExactlyWhatTheActivitiesNeed fails when a rule or verb is added or removed:
// a change to rbac.yaml must come with a change to WorkerRules, and so to the review that the
// activities really make that call.
func TestClusterRoleIsExactlyWhatTheActivitiesNeed(t *testing.T) {
	for _, k := range Kustomizations {
		t.Run(k, func(t *testing.T) {
			objs := render(t, k)
			role := convert[rbacv1.ClusterRole](t, find(t, objs, "ClusterRole", "", "noderollout-worker"))
			if k == NamespacedKustomization {
				require.Equal(t, NamespacedClusterRules, role.Rules)
				jobs := convert[rbacv1.Role](t, find(t, objs, "Role", JobNamespace, "noderollout-worker-jobs"))
				require.Equal(t, JobNamespaceRules, jobs.Rules)
				rb := convert[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", JobNamespace, "noderollout-worker-jobs"))
				require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: jobs.Name}, rb.RoleRef)
				require.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}}, rb.Subjects)
			} else {
				require.Equal(t, WorkerRules, role.Rules)
			}
			require.Nil(t, role.AggregationRule)

			events := convert[rbacv1.Role](t, find(t, objs, "Role", activities.EventNamespace, "noderollout-worker-events"))
			require.Equal(t, EventRules, events.Rules)

			sa := []rbacv1.Subject{{Kind: "ServiceAccount", Name: serviceAccount, Namespace: namespace}}
			crb := convert[rbacv1.ClusterRoleBinding](t, find(t, objs, "ClusterRoleBinding", "", "noderollout-worker"))
			require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name}, crb.RoleRef)
			require.Equal(t, sa, crb.Subjects)
			rb := convert[rbacv1.RoleBinding](t, find(t, objs, "RoleBinding", activities.EventNamespace, "noderollout-worker-events"))
			require.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: events.Name}, rb.RoleRef)
			require.Equal(t, sa, rb.Subjects)

			require.Equal(t, serviceAccount, deployment(t, objs).Spec.Template.Spec.ServiceAccountName)
		})
	}
}

// TestRulesNeverGrantWhatTheWorkerMustNotHave guards the rules against broadening by
// wildcard or by a verb that only looks harmless.
func TestRulesNeverGrantWhatTheWorkerMustNotHave(t *testing.T) {
	for _, r := range slices.Concat(WorkerRules, EventRules, NamespacedClusterRules, JobNamespaceRules) {
		for _, field := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
			require.NotContains(t, field, "*")
		}
		require.Empty(t, r.ResourceNames)
		require.Empty(t, r.NonResourceURLs)
		for _, forbidden := range []string{"update", "deletecollection", "escalate", "bind", "impersonate"} {
			require.NotContains(t, r.Verbs, forbidden, "%v", r.Resources)
		}
		require.NotContains(t, r.Resources, "secrets")
	}
}

func TestNamespaceEnforcesTheRestrictedPodSecurityStandard(t *testing.T) {
	ns := find(t, render(t, "base"), "Namespace", "", namespace)
	for _, mode := range []string{"enforce", "warn", "audit"} {
		require.Equal(t, "restricted", ns.GetLabels()["pod-security.kubernetes.io/"+mode], mode)
	}
}

type overlayWant struct {
	image, pullPolicy, temporalAddress string
	secretOptional                     bool
}

var overlays = map[string]overlayWant{
	"base":                    {image: "noderollout:dev", temporalAddress: "temporal-frontend.temporal.svc.cluster.local:7233", secretOptional: true},
	"overlays/local":          {image: "noderollout:dev", pullPolicy: "Never", temporalAddress: "host.docker.internal:7233", secretOptional: true},
	"overlays/temporal-cloud": {image: "your-registry/noderollout:dev", temporalAddress: "<region>.<cloud-provider>.api.temporal.io:7233", secretOptional: false},
	NamespacedKustomization:   {image: "noderollout:dev", temporalAddress: "temporal-frontend.temporal.svc.cluster.local:7233", secretOptional: true},
}

// TestNamespacedModeGrantsTheSameVerbs: namespaced mode moves verbs from the ClusterRole into
// Roles, and neither adds nor drops one but the drain's, so every other activity works in both
// modes.
func TestNamespacedModeGrantsTheSameVerbs(t *testing.T) {
	require.ElementsMatch(t, WorkerRules, slices.Concat(NamespacedClusterRules, JobNamespaceRules, DrainRules))
}

// TestNamespacedWorkerPolicyFitsItsRoles loads the namespaced overlay's policy as the worker
// would, and requires that it allows exactly the namespaces with Roles and a Job watch.
func TestNamespacedWorkerPolicyFitsItsRoles(t *testing.T) {
	objs := render(t, NamespacedKustomization)
	cfg := loadWorkerConfig(t, objs, deployment(t, objs))
	require.Equal(t, []string{JobNamespace}, cfg.JobNamespaces)
	require.Equal(t, "/etc/noderollout/policy.yaml", cfg.PolicyFile)
	cm := convert[corev1.ConfigMap](t, find(t, objs, "ConfigMap", namespace, "noderollout-worker-config"))
	p, err := policy.Parse([]byte(cm.Data["policy.yaml"]))
	require.NoError(t, err)
	require.NoError(t, p.WithinNamespaces(cfg.JobNamespaces))
	var roleNamespaces []string
	for _, o := range objs {
		if o.GetKind() == "Role" && o.GetName() == "noderollout-worker-jobs" {
			roleNamespaces = append(roleNamespaces, o.GetNamespace())
		}
	}
	require.ElementsMatch(t, cfg.JobNamespaces, roleNamespaces)
	require.ErrorContains(t, p.CheckRequest(policy.Request{Namespace: "kube-system", Parallelism: 1}), "namespaces")
}

func TestWorkerDeployment(t *testing.T) {
	require.Len(t, overlays, len(Kustomizations))
	for _, k := range Kustomizations {
		want := overlays[k]
		t.Run(k, func(t *testing.T) {
			objs := render(t, k)
			d := deployment(t, objs)
			require.EqualValues(t, 2, *d.Spec.Replicas)
			pod := d.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			require.Equal(t, want.image, c.Image)
			require.EqualValues(t, want.pullPolicy, c.ImagePullPolicy)

			selector, err := labels.ValidatedSelectorFromSet(d.Spec.Selector.MatchLabels)
			require.NoError(t, err)
			require.True(t, selector.Matches(labels.Set(d.Spec.Template.Labels)))

			// Restricted Pod Security Standard.
			require.NotNil(t, pod.SecurityContext)
			require.True(t, *pod.SecurityContext.RunAsNonRoot)
			require.NotZero(t, *pod.SecurityContext.RunAsUser)
			require.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
			require.False(t, pod.HostNetwork || pod.HostPID || pod.HostIPC)
			sc := c.SecurityContext
			require.NotNil(t, sc)
			require.False(t, *sc.AllowPrivilegeEscalation)
			require.True(t, *sc.ReadOnlyRootFilesystem)
			require.True(t, *sc.RunAsNonRoot)
			require.Nil(t, sc.Privileged)
			require.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
			require.Empty(t, sc.Capabilities.Add)

			require.False(t, c.Resources.Requests.Cpu().IsZero())
			require.False(t, c.Resources.Requests.Memory().IsZero())
			require.False(t, c.Resources.Limits.Memory().IsZero())

			// Probes on the metrics port, which the arguments open on all interfaces.
			require.Equal(t, []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}, c.Ports)
			require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			require.Equal(t, "metrics", c.LivenessProbe.HTTPGet.Port.String())
			require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			require.Equal(t, "metrics", c.ReadinessProbe.HTTPGet.Port.String())

			// The Temporal Secret: optional where no Temporal credentials are needed.
			secretVolume := volume(t, pod, "temporal-tls").Secret
			require.Equal(t, "noderollout-temporal", secretVolume.SecretName)
			require.True(t, *secretVolume.Optional, "the mTLS files stay optional; config.yaml names them when used")
			var apiKey *corev1.EnvVar
			for i := range c.Env {
				if c.Env[i].Name == config.EnvName("api-key") {
					apiKey = &c.Env[i]
				}
			}
			require.NotNil(t, apiKey, "env %s", config.EnvName("api-key"))
			require.Equal(t, "noderollout-temporal", apiKey.ValueFrom.SecretKeyRef.Name)
			require.Equal(t, want.secretOptional, *apiKey.ValueFrom.SecretKeyRef.Optional)

			cfg := loadWorkerConfig(t, objs, d)
			require.Equal(t, "0.0.0.0:9090", cfg.MetricsListen)
			require.Equal(t, want.temporalAddress, cfg.TemporalAddress)
			require.Equal(t, api.TaskQueue, cfg.TaskQueue)
			require.Equal(t, "secret-api-key", cfg.APIKey, "the Secret's api-key reaches the api-key setting")
			require.Empty(t, cfg.Kubeconfig, "in the cluster the worker uses its ServiceAccount")
			grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
			require.Greater(t, grace, cfg.StopTimeout+5*time.Second,
				"the kubelet must not kill the worker while it lets activities finish")
		})
	}
}

func volume(t *testing.T, pod corev1.PodSpec, name string) corev1.Volume {
	t.Helper()
	for _, v := range pod.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no volume %s", name)
	return corev1.Volume{}
}

// loadWorkerConfig runs the worker's own config loader on the Deployment's arguments, with
// the rendered ConfigMap where the container mounts it and the Secret's key as its env, so a
// misspelt key, a bad value or a wrong mount path fails here rather than in the cluster.
func loadWorkerConfig(t *testing.T, objs []*unstructured.Unstructured, d *appsv1.Deployment) config.Config {
	t.Helper()
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	cm := convert[corev1.ConfigMap](t, find(t, objs, "ConfigMap", namespace, "noderollout-worker-config"))
	require.Equal(t, cm.Name, volume(t, pod, "config").ConfigMap.Name, "the Deployment mounts the generated ConfigMap")

	root := t.TempDir() // stands for the container's file system
	for _, m := range c.VolumeMounts {
		require.True(t, m.ReadOnly, m.Name)
		if m.Name != "config" {
			continue
		}
		dir := filepath.Join(root, m.MountPath)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for key, text := range cm.Data {
			require.NoError(t, os.WriteFile(filepath.Join(dir, key), []byte(text), 0o644))
		}
	}
	var args []string
	for _, a := range c.Args {
		if path, ok := strings.CutPrefix(a, "--config="); ok {
			a = "--config=" + filepath.Join(root, path)
		}
		args = append(args, a)
	}
	var env []string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			continue // the Go runtime's, checked in TestGoMemoryLimitIsUnderTheContainerLimit
		}
		require.True(t, strings.HasPrefix(e.Name, config.EnvPrefix+"_"), e.Name)
		value := e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			value = "secret-" + e.ValueFrom.SecretKeyRef.Key
		}
		env = append(env, e.Name+"="+value)
	}
	cfg, err := config.Load(config.NewFlagSet("worker", true), args, env)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.ConfigFile, "the worker reads the mounted config file")
	return cfg
}

func TestPodDisruptionBudgetAndMetricsService(t *testing.T) {
	for _, k := range Kustomizations {
		t.Run(k, func(t *testing.T) {
			objs := render(t, k)
			d := deployment(t, objs)
			podLabels := labels.Set(d.Spec.Template.Labels)

			pdb := convert[policyv1.PodDisruptionBudget](t, find(t, objs, "PodDisruptionBudget", namespace, "noderollout-worker"))
			require.Equal(t, 1, pdb.Spec.MinAvailable.IntValue())
			require.Nil(t, pdb.Spec.MaxUnavailable)
			require.Less(t, pdb.Spec.MinAvailable.IntValue(), int(*d.Spec.Replicas), "a drain can still evict one worker")
			require.Equal(t, d.Spec.Selector.MatchLabels, pdb.Spec.Selector.MatchLabels)

			svc := convert[corev1.Service](t, find(t, objs, "Service", namespace, "noderollout-worker-metrics"))
			require.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels))
			require.Len(t, svc.Spec.Ports, 1)
			require.Equal(t, "metrics", svc.Spec.Ports[0].TargetPort.String())
			require.EqualValues(t, 9090, svc.Spec.Ports[0].Port)
		})
	}
}

// TestJobTemplateConfigMapExample checks that the jobTemplateRef example names the ConfigMap
// example, and that both pass the same checks the workflow and PrepareTemplate make.
func TestJobTemplateConfigMapExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(Dir(), "examples", "job-template-configmap.yaml"))
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, yaml.UnmarshalStrict(data, &cm))
	require.Equal(t, "ConfigMap", cm.Kind)

	data, err = os.ReadFile(filepath.Join(Dir(), "examples", "rollout-ref.yaml"))
	require.NoError(t, err)
	asJSON, err := yaml.YAMLToJSON(data)
	require.NoError(t, err)
	var req api.RolloutRequest
	require.NoError(t, json.Unmarshal(asJSON, &req))
	require.Empty(t, req.Problems())

	ref := req.JobTemplateRef
	require.NotNil(t, ref)
	require.Empty(t, req.JobTemplate)
	require.Equal(t, cm.Name, ref.Name)
	require.Equal(t, cm.Namespace, ref.Namespace)
	key := ref.Key
	if key == "" {
		key = activities.DefaultTemplateKey
	}
	template, ok := cm.Data[key]
	require.True(t, ok, "the ConfigMap has the key %q", key)
	_, err = jobspec.ParseTemplate(template)
	require.NoError(t, err)
	_, err = jobspec.Build(template, jobspec.JobParams{Rollout: req.Name, Namespace: req.Namespace, Node: "node-a", TemplateHash: jobspec.TemplateHash(template)})
	require.NoError(t, err)
}

func loadCompose(t *testing.T, env ...string) *types.Project {
	t.Helper()
	t.Setenv("HOME", "/home/tester") // where compose expands ~
	opts, err := cli.NewProjectOptions([]string{filepath.Join(repoDir(), "docker-compose.yml")},
		cli.WithWorkingDirectory(repoDir()), cli.WithEnv(env), cli.WithInterpolation(true))
	require.NoError(t, err)
	project, err := opts.LoadProject(context.Background())
	require.NoError(t, err)
	return project
}

func TestDockerCompose(t *testing.T) {
	project := loadCompose(t)
	require.Equal(t, "noderollout", project.Name)
	require.ElementsMatch(t, []string{"temporal-data", "temporal", "worker"}, project.ServiceNames())

	for name, s := range project.Services {
		ref, err := reference.ParseNormalizedNamed(s.Image)
		require.NoError(t, err, name)
		tagged, ok := ref.(reference.Tagged)
		require.True(t, ok, "%s: image %q is pinned by tag", name, s.Image)
		require.NotEqual(t, "latest", tagged.Tag(), name)
	}

	data := project.Services["temporal-data"]
	temporal := project.Services["temporal"]
	worker := project.Services["worker"]

	// Temporal dev server: SQLite on the named volume, the search attribute starter sets.
	require.Contains(t, project.Volumes, "temporal-data")
	require.Equal(t, []string{"server", "start-dev", "--ip", "0.0.0.0", "--db-filename", "/data/temporal.db",
		"--search-attribute", "RolloutName=Keyword", "--search-attribute", "RolloutRequester=Keyword"}, []string(temporal.Command))
	require.Equal(t, []types.ServiceVolumeConfig{{Type: types.VolumeTypeVolume, Source: "temporal-data", Target: "/data", Volume: &types.ServiceVolumeVolume{}}},
		temporal.Volumes)
	published := map[uint32]string{}
	for _, p := range temporal.Ports {
		published[p.Target] = p.Published
		// The dev server has no authentication: whoever reaches it may start any rollout.
		require.Equal(t, "127.0.0.1", p.HostIP, "port %d is published on the loopback interface only", p.Target)
	}
	require.Equal(t, map[uint32]string{7233: "7233", 8233: "8233"}, published)
	for name, s := range project.Services {
		for _, p := range s.Ports {
			require.Equal(t, "127.0.0.1", p.HostIP, "%s publishes port %d beyond the loopback interface", name, p.Target)
		}
	}
	require.NotNil(t, temporal.HealthCheck)
	require.Equal(t, types.HealthCheckTest{"CMD", "temporal", "operator", "cluster", "health", "--address", "127.0.0.1:7233"},
		temporal.HealthCheck.Test)
	require.Equal(t, types.ServiceConditionCompletedSuccessfully, temporal.DependsOn["temporal-data"].Condition)

	// The setup step hands the same volume to the server image's user.
	require.Equal(t, temporal.Image, data.Image)
	require.Equal(t, temporal.Volumes[0].Source, data.Volumes[0].Source)
	require.Equal(t, temporal.Volumes[0].Target, data.Volumes[0].Target)

	// Worker: built here, started once Temporal answers, with the kubeconfig read-only.
	require.NotNil(t, worker.Build)
	require.Equal(t, repoDir(), worker.Build.Context)
	require.Equal(t, "Dockerfile", worker.Build.Dockerfile)
	require.Equal(t, map[string]types.ServiceDependency{
		"temporal": {Condition: types.ServiceConditionHealthy, Required: true},
	}, map[string]types.ServiceDependency(worker.DependsOn))
	require.True(t, worker.ReadOnly)
	require.Len(t, worker.Volumes, 1)
	kubeconfig := worker.Volumes[0]
	require.Equal(t, types.VolumeTypeBind, kubeconfig.Type)
	require.True(t, kubeconfig.ReadOnly)
	require.Equal(t, "/home/tester/.kube/config", kubeconfig.Source)

	env := map[string]string{}
	var envList []string
	for k, v := range worker.Environment {
		require.NotNil(t, v, k)
		env[k] = *v
		envList = append(envList, k+"="+*v)
	}
	host, port, ok := strings.Cut(env[config.EnvName("temporal-address")], ":")
	require.True(t, ok)
	require.Contains(t, project.Services, host, "the worker dials the temporal service by name")
	require.Contains(t, published, uint32(mustAtoi(t, port)))

	// The worker's own loader accepts the command and environment as compose passes them.
	cfg, err := config.Load(config.NewFlagSet("worker", true), worker.Command, envList)
	require.NoError(t, err)
	require.Equal(t, kubeconfig.Target, cfg.Kubeconfig)
	require.Equal(t, "temporal:7233", cfg.TemporalAddress)
	require.Equal(t, "0.0.0.0:9090", cfg.MetricsListen)
	require.Equal(t, "9090", worker.Ports[0].Published)
	require.Equal(t, "127.0.0.1", worker.Ports[0].HostIP, "metrics stay on the host's loopback")
	require.Equal(t, "0:0", worker.User, "default user can read a 0600 kubeconfig")
}

func TestDockerComposeTakesTheKubeconfigAndUserFromTheEnvironment(t *testing.T) {
	project := loadCompose(t, "NODEROLLOUT_KUBECONFIG=/tmp/kind.kubeconfig", "NODEROLLOUT_USER=1000:1000")
	worker := project.Services["worker"]
	require.Equal(t, "/tmp/kind.kubeconfig", worker.Volumes[0].Source)
	require.Equal(t, "1000:1000", worker.User)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	for _, r := range s {
		require.True(t, r >= '0' && r <= '9', s)
		n = n*10 + int(r-'0')
	}
	return n
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoDir(), "Dockerfile"))
	require.NoError(t, err)
	var out []instruction
	var current strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && current.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(trimmed, "\\"); ok {
			current.WriteString(cont + " ")
			continue
		}
		current.WriteString(trimmed)
		cmd, args, _ := strings.Cut(current.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		current.Reset()
	}
	require.Zero(t, current.Len(), "Dockerfile ends inside a continued line")
	return out
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t)
	var froms []string
	for _, i := range ins {
		if i.cmd == "FROM" {
			froms = append(froms, i.args)
		}
	}
	require.Equal(t, []string{"golang:1.27 AS build", "scratch"}, froms)
	require.Contains(t, ins, instruction{"RUN", "sh " + imageBuildScript + " /out"},
		"the build stage runs the script TestImageBinaries runs")
	require.Contains(t, ins, instruction{"COPY", "--from=build /out/worker /out/starter /usr/local/bin/"})
	last := ins[len(ins)-1]
	require.Equal(t, instruction{"ENTRYPOINT", `["/usr/local/bin/worker"]`}, last)
	require.Contains(t, ins, instruction{"USER", "65532:65532"})
	d := deployment(t, render(t, "base"))
	require.EqualValues(t, 65532, *d.Spec.Template.Spec.SecurityContext.RunAsUser, "the Deployment runs as the image's user")
}

// imageBuildScript builds the image's binaries; the Dockerfile's build stage runs it.
const imageBuildScript = "dev/build-image-binaries.sh"

// TestImageBinaries runs the Dockerfile's build command and checks what it makes: static,
// stripped, trimmed binaries, and a worker that starts.
func TestImageBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the worker and starter from scratch (-trimpath): minutes on 2 cores")
	}
	out := t.TempDir()
	cmd := exec.Command("sh", filepath.Join(repoDir(), imageBuildScript), out)
	cmd.Dir = t.TempDir() // the script finds the module itself
	output, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", output)

	for _, name := range []string{"worker", "starter"} {
		path := filepath.Join(out, name)
		info, err := buildinfo.ReadFile(path)
		require.NoError(t, err, name)
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		require.Equal(t, "0", settings["CGO_ENABLED"], name)
		require.Equal(t, "true", settings["-trimpath"], name)
		// -trimpath keeps -ldflags out of the build info; -s and -w show in the file itself.

		f, err := elf.Open(path)
		require.NoError(t, err, name)
		for _, p := range f.Progs {
			require.NotEqual(t, elf.PT_INTERP, p.Type, "%s is static: the image has no libc", name)
		}
		require.Nil(t, f.Section(".symtab"), "%s has no symbol table (-s)", name)
		require.Nil(t, f.Section(".debug_info"), "%s has no DWARF (-w)", name)
		require.NotNil(t, f.Section(".go.buildinfo"), name)
		f.Close()
	}

	help := exec.Command(filepath.Join(out, "worker"), "--help")
	output, err = help.CombinedOutput()
	require.NoError(t, err, "%s", output)
	require.Contains(t, string(output), "--temporal-address")
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoDir(), ".dockerignore"))
	require.NoError(t, err)
	var patterns []string
	for _, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	for _, p := range []string{".git", ".stack", "bin"} {
		require.Contains(t, patterns, p)
	}
	ignored := func(path string) bool {
		for _, p := range patterns {
			base := strings.TrimPrefix(p, "**/")
			for prefix := path; prefix != "."; prefix = filepath.Dir(prefix) {
				if ok, _ := filepath.Match(p, prefix); ok {
					return true
				}
				if ok, _ := filepath.Match(base, filepath.Base(prefix)); ok && base != p {
					return true
				}
			}
		}
		return false
	}
	for _, path := range []string{"go.mod", "go.sum", imageBuildScript, "worker/main.go", "starter/main.go",
		"activities/jobs.go", "activities/jobspec/template.go", "internal/config/config.go", "workflows/rollout.go"} {
		require.FileExists(t, filepath.Join(repoDir(), path))
		require.False(t, ignored(path), "%s is needed to build the image", path)
	}
	require.True(t, ignored("activities/jobs_test.go"))
	require.True(t, ignored(".stack/env"))
}

// TestGoMemoryLimitIsUnderTheContainerLimit: GOMEMLIMIT makes the garbage collector work
// harder before the kubelet's OOM kill; above the limit it would never get the chance.
func TestGoMemoryLimitIsUnderTheContainerLimit(t *testing.T) {
	for _, k := range Kustomizations {
		t.Run(k, func(t *testing.T) {
			d := deployment(t, render(t, k))
			c := d.Spec.Template.Spec.Containers[0]
			var limit string
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					limit = e.Value
				}
			}
			require.NotEmpty(t, limit, "GOMEMLIMIT is set")
			mib, ok := strings.CutSuffix(limit, "MiB")
			require.True(t, ok, "GOMEMLIMIT %q in MiB", limit)
			n, err := strconv.ParseInt(mib, 10, 64)
			require.NoError(t, err)
			bytes := n << 20
			max := c.Resources.Limits.Memory().Value()
			require.Less(t, bytes, max, "under the memory limit")
			require.GreaterOrEqual(t, bytes, max*8/10, "close enough to the limit to leave the heap room")
			labels := d.Spec.Template.Labels
			require.Equal(t, "noderollout", labels["app.kubernetes.io/instance"], "Pods carry the recommended labels too")
			require.NotContains(t, d.Spec.Selector.MatchLabels, "app.kubernetes.io/version", "a selector cannot change on upgrade")
		})
	}
}

// TestMonitoringComponentScrapesTheMetricsService builds an overlay with the optional
// ServiceMonitor component and checks it selects the metrics Service and its port.
func TestMonitoringComponentScrapesTheMetricsService(t *testing.T) {
	// kustomize takes only relative paths, so the overlay lives beside the others for the test.
	dir, err := os.MkdirTemp(filepath.Join(Dir(), "overlays"), "test-monitoring-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	kustomization := fmt.Sprintf("resources: [%s]\ncomponents: [%s]\n", "../../base", "../../components/monitoring")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600))
	objs := render(t, dir)
	sm := find(t, objs, "ServiceMonitor", namespace, "noderollout-worker")
	svc := convert[corev1.Service](t, find(t, objs, "Service", namespace, "noderollout-worker-metrics"))
	selector, found, err := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	require.NoError(t, err)
	require.True(t, found)
	require.True(t, labels.SelectorFromSet(selector).Matches(labels.Set(svc.Labels)), "selects the metrics Service")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	require.Len(t, endpoints, 1)
	require.Equal(t, svc.Spec.Ports[0].Name, endpoints[0].(map[string]any)["port"])
	require.Equal(t, "noderollout", sm.GetLabels()["app.kubernetes.io/part-of"])
}
