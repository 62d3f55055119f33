// Package policy is the platform team's say over what rollouts may do: which namespaces Jobs
// go to, which images and ServiceAccounts their Pods use, which host access they get, how wide
// a rollout runs and which nodes it may reach. It lives in the worker's configuration, never in
// the request, and its checks are pure functions over a request's fields and a rendered Job.
package policy

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/noderollout/noderollout/api/didyoumean"
)

// Rule names: they appear in every denial and in docs/security.md, so their spelling is stable.
const (
	RuleNamespaces          = "namespaces"
	RuleImages              = "images"
	RuleServiceAccounts     = "serviceAccounts"
	RulePrivileged          = "privileged"
	RuleHostPath            = "hostPath"
	RuleHostNetwork         = "hostNetwork"
	RuleHostPID             = "hostPID"
	RuleMaxParallelism      = "maxParallelism"
	RuleProtectedNodeLabels = "protectedNodeLabels"
	RuleHostIPC             = "hostIPC"
	RuleHostPorts           = "hostPorts"
	RuleCapabilities        = "capabilities"
	RulePrivilegeEscalation = "privilegeEscalation"
	RuleUnconfined          = "unconfined"
	RuleRuntimeClasses      = "runtimeClasses"
	RuleVolumeTypes         = "volumeTypes"
	RuleSecrets             = "secrets"
	RuleCordon              = "cordon"
	RuleDrain               = "drain"
	RuleEvictNamespaces     = "evictNamespaces"
)

// capabilityName is how Linux capabilities are spelled, with or without CAP_.
var capabilityName = regexp.MustCompile(`^[A-Za-z_]+$`)

// AnyNamespace is the namespaces key whose rules apply to every namespace not listed by name.
const AnyNamespace = "*"

// DefaultProtectedNodeLabels are the labels of nodes no rollout reaches unless its namespace
// says protectedNodes: true, when the policy does not list its own.
var DefaultProtectedNodeLabels = []string{
	"node-role.kubernetes.io/control-plane",
	"node-role.kubernetes.io/master",
}

// Policy is the file given to the worker with --policy-file. A rule left out allows what it
// would check, except the namespace list (a namespace not listed is denied), ServiceAccounts
// (only "default" unless listed) and host access (off unless granted).
type Policy struct {
	// Namespaces the Jobs may be created in (and their templates read from), each with what
	// its Pods may do. The key "*" covers every namespace not named.
	Namespaces map[string]NamespaceRules `json:"namespaces"`
	// Images are the prefixes a container image must start with, written in full
	// (registry host first: docker.io/library/busybox, registry.example.com/node-tools/).
	// Empty: any image.
	Images []string `json:"images,omitempty"`
	// MaxParallelism caps the request's parallelism; 0: no cap beyond the engine's own.
	MaxParallelism int `json:"maxParallelism,omitempty"`
	// ProtectedNodeLabels ("key" or "key=value") mark nodes only namespaces with
	// protectedNodes may reach. Left out: DefaultProtectedNodeLabels; [] protects none.
	ProtectedNodeLabels []string `json:"protectedNodeLabels,omitempty"`
}

// NamespaceRules is what a rollout's Pods may do in one namespace.
type NamespaceRules struct {
	// ServiceAccounts the Pods may run as; empty: only "default".
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	Privileged      bool     `json:"privileged,omitempty"`
	HostPath        bool     `json:"hostPath,omitempty"`
	HostNetwork     bool     `json:"hostNetwork,omitempty"`
	HostPID         bool     `json:"hostPID,omitempty"`
	HostIPC         bool     `json:"hostIPC,omitempty"`
	// HostPorts lets containers bind ports of the node (ports[].hostPort).
	HostPorts bool `json:"hostPorts,omitempty"`
	// Capabilities may be added beyond Pod Security baseline's (AUDIT_WRITE, CHOWN, ...);
	// "ALL" grants any. Where privileged is granted, any.
	Capabilities []string `json:"capabilities,omitempty"`
	// PrivilegeEscalation false requires every container to set allowPrivilegeEscalation:
	// false (as Pod Security restricted does); left out, escalation is allowed (baseline).
	PrivilegeEscalation *bool `json:"privilegeEscalation,omitempty"`
	// Unconfined lets Pods loosen the kernel's confinement of them: seccomp or AppArmor
	// Unconfined, SELinux options beyond the container types, procMount Unmasked, sysctls
	// outside the safe set.
	Unconfined bool `json:"unconfined,omitempty"`
	// RuntimeClasses the Pods may name in runtimeClassName; empty: none (the cluster's default).
	RuntimeClasses []string `json:"runtimeClasses,omitempty"`
	// VolumeTypes may be used beyond Pod Security restricted's (configMap, csi, downwardAPI,
	// emptyDir, ephemeral, image, persistentVolumeClaim, projected, secret), by their field
	// name (nfs, iscsi, ...); hostPath has its own rule.
	VolumeTypes []string `json:"volumeTypes,omitempty"`
	// Secrets the Pods may read (volumes, projections, env, envFrom, CSI volumes' secret
	// references) by name; "*": any. Empty: none.
	Secrets []string `json:"secrets,omitempty"`
	// LogTailWithSecrets lets a failed Pod that reads Secrets have its log tail kept in the
	// node's result (and so in the workflow history); otherwise it is withheld.
	LogTailWithSecrets bool `json:"logTailWithSecrets,omitempty"`
	// ProtectedNodes lets rollouts into this namespace reach nodes with protected labels.
	ProtectedNodes bool `json:"protectedNodes,omitempty"`
	// Cordon lets rollouts into this namespace cordon the nodes they reach
	// (maintenance.cordon); Drain lets them cordon and drain them (maintenance.drain), that is
	// evict other workloads' Pods.
	Cordon bool `json:"cordon,omitempty"`
	Drain  bool `json:"drain,omitempty"`
	// EvictNamespaces are the namespaces whose Pods their drains may evict ("*": any); left
	// out, any. A drain that meets a Pod of another namespace is refused before it evicts.
	EvictNamespaces []string `json:"evictNamespaces,omitempty"`
}

// Denial says which rule refused what. It is the error every check returns.
type Denial struct {
	Rule    string // one of the Rule* names
	Field   string // the request or template field, as the user spells it
	Problem string // what is wrong and how to fix it
}

func (d *Denial) Error() string {
	return fmt.Sprintf("policy rule %q denies %s: %s", d.Rule, d.Field, d.Problem)
}

// Load reads a policy file (YAML or JSON). Unknown keys are errors, so a misspelt rule never
// silently allows what it was meant to deny.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes and checks a policy.
func Parse(data []byte) (*Policy, error) {
	var p Policy
	if unknown := unknownRules(data); len(unknown) > 0 {
		return nil, fmt.Errorf("%s (rules: see README, Security model)", strings.Join(unknown, "; "))
	}
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, err
	}
	// Tell "protectedNodeLabels: []" (protect none) from a policy that does not mention it.
	var keys map[string]any
	if err := yaml.Unmarshal(data, &keys); err != nil {
		return nil, err
	}
	if _, set := keys["protectedNodeLabels"]; !set {
		p.ProtectedNodeLabels = slices.Clone(DefaultProtectedNodeLabels)
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func (p *Policy) validate() error {
	var errs []string
	if len(p.Namespaces) == 0 {
		errs = append(errs, `namespaces: required: list the namespaces Jobs may run in (the key "*" covers any other)`)
	}
	for ns, rules := range p.Namespaces {
		if ns != AnyNamespace && len(validation.IsDNS1123Label(ns)) > 0 {
			errs = append(errs, fmt.Sprintf("namespaces: %q is not a namespace name", ns))
		}
		for _, c := range rules.Capabilities {
			if !capabilityName.MatchString(c) {
				errs = append(errs, fmt.Sprintf("namespaces.%s.capabilities: %q is not a capability name (NET_ADMIN, SYS_TIME, ALL)", ns, c))
			}
		}
		for _, rc := range rules.RuntimeClasses {
			if len(validation.IsDNS1123Subdomain(rc)) > 0 {
				errs = append(errs, fmt.Sprintf("namespaces.%s.runtimeClasses: %q is not a RuntimeClass name", ns, rc))
			}
		}
		for _, v := range rules.VolumeTypes {
			switch {
			case v == "hostPath":
				errs = append(errs, fmt.Sprintf("namespaces.%s.volumeTypes: hostPath has its own rule: set hostPath: true", ns))
			case !slices.Contains(volumeTypeNames(), v):
				errs = append(errs, fmt.Sprintf("namespaces.%s.volumeTypes: %q is not a volume type (a field of a Pod's volume, such as nfs or iscsi)", ns, v))
			}
		}
		for _, secret := range rules.Secrets {
			if secret != AnyNamespace && len(validation.IsDNS1123Subdomain(secret)) > 0 {
				errs = append(errs, fmt.Sprintf("namespaces.%s.secrets: %q is not a Secret name", ns, secret))
			}
		}
		for _, evict := range rules.EvictNamespaces {
			if evict != AnyNamespace && len(validation.IsDNS1123Label(evict)) > 0 {
				errs = append(errs, fmt.Sprintf("namespaces.%s.evictNamespaces: %q is not a namespace name", ns, evict))
			}
		}
		if len(rules.EvictNamespaces) > 0 && !rules.Drain {
			errs = append(errs, fmt.Sprintf("namespaces.%s.evictNamespaces: set without drain: true, so no drain could use it", ns))
		}
		for _, sa := range rules.ServiceAccounts {
			if len(validation.IsDNS1123Subdomain(sa)) > 0 {
				errs = append(errs, fmt.Sprintf("namespaces.%s.serviceAccounts: %q is not a ServiceAccount name", ns, sa))
			}
		}
	}
	for _, prefix := range p.Images {
		if !looksQualified(prefix) {
			errs = append(errs, fmt.Sprintf("images: %q must start with a registry host (e.g. docker.io/library/busybox, registry.example.com/tools/)", prefix))
		}
	}
	if p.MaxParallelism < 0 {
		errs = append(errs, fmt.Sprintf("maxParallelism: %d is negative; use 0 for no cap", p.MaxParallelism))
	}
	for _, l := range p.ProtectedNodeLabels {
		key, _, _ := strings.Cut(l, "=")
		if len(validation.IsQualifiedName(key)) > 0 {
			errs = append(errs, fmt.Sprintf("protectedNodeLabels: %q is not a label key or key=value", l))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// looksQualified says whether an image prefix begins with a registry host, the form images
// are compared in after normalisation.
func looksQualified(prefix string) bool {
	host, rest, found := strings.Cut(prefix, "/")
	if !found || rest == "" && !strings.HasSuffix(prefix, "/") {
		return false
	}
	return strings.ContainsAny(host, ".:") || host == "localhost"
}

// rules returns the rules of a namespace and whether it is allowed at all.
func (p *Policy) rules(namespace string) (NamespaceRules, bool) {
	if r, ok := p.Namespaces[namespace]; ok {
		return r, true
	}
	r, ok := p.Namespaces[AnyNamespace]
	return r, ok
}

// allowedNamespaces lists the named namespaces for messages.
func (p *Policy) allowedNamespaces() string {
	var names []string
	for ns := range p.Namespaces {
		names = append(names, ns)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// WithinNamespaces checks that every namespace the policy allows is among watched (none: the
// whole cluster is watched, so any policy fits).
func (p *Policy) WithinNamespaces(watched []string) error {
	if p == nil || len(watched) == 0 {
		return nil
	}
	for ns := range p.Namespaces {
		if ns == AnyNamespace {
			return fmt.Errorf(`the policy allows any namespace ("*") but Jobs are watched in %s only; list the namespaces instead`, strings.Join(watched, ", "))
		}
		if !slices.Contains(watched, ns) {
			return fmt.Errorf("the policy allows namespace %q where Jobs are not watched (%s); add it to job-namespaces or remove it from the policy", ns, strings.Join(watched, ", "))
		}
	}
	return nil
}

// unknownRules names every key the policy does not have, at the top and within each
// namespace's rules, with the rule it was probably meant to be. Data that is not a mapping is
// left to the decoder to describe.
func unknownRules(data []byte) []string {
	var top map[string]json.RawMessage
	if asJSON, err := yaml.YAMLToJSON(data); err != nil || json.Unmarshal(asJSON, &top) != nil {
		return nil
	}
	problems := unknownKeys(top, reflect.TypeOf(Policy{}), "")
	var namespaces map[string]map[string]json.RawMessage
	if json.Unmarshal(top["namespaces"], &namespaces) == nil {
		names := make([]string, 0, len(namespaces))
		for ns := range namespaces {
			names = append(names, ns)
		}
		slices.Sort(names)
		for _, ns := range names {
			problems = append(problems, unknownKeys(namespaces[ns], reflect.TypeOf(NamespaceRules{}), "namespaces."+ns+": ")...)
		}
	}
	return problems
}

// unknownKeys is one problem line per key t has no field for, each after prefix.
func unknownKeys(fields map[string]json.RawMessage, t reflect.Type, prefix string) []string {
	var problems []string
	for _, f := range didyoumean.UnknownFields(fields, t, "") {
		problems = append(problems, fmt.Sprintf("%sunknown field %q%s", prefix, f.Path, f.Hint))
	}
	return problems
}
