package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// What the Pod fields that grant access beyond the Pod's own sandbox may hold where the policy
// grants nothing: Pod Security "baseline" (k8s.io/pod-security-admission/policy), except that
// host access and privileges are off unless granted, as they always were here, and volume
// types are those of "restricted" (the others reach storage by the node's identity).
var (
	// baselineCapabilities may be added by any container.
	baselineCapabilities = []string{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
		"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
	// safeSysctls are namespaced and isolated from the node and other Pods.
	safeSysctls = []string{"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
		"net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ip_local_reserved_ports",
		"net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
		"net.ipv4.tcp_keepalive_probes", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
		"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"}
	// confinedSELinuxTypes are the SELinux types of container runtimes' confined domains.
	confinedSELinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
	// podVolumeTypes reach nothing beyond the Pod, its namespace's objects and its claims.
	podVolumeTypes = []string{"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
		"persistentVolumeClaim", "projected", "secret"}
)

// Annotations older clusters read for seccomp and AppArmor profiles.
const (
	seccompPodAnnotation             = "seccomp.security.alpha.kubernetes.io/pod"
	seccompContainerAnnotationPrefix = "container.seccomp.security.alpha.kubernetes.io/"
	appArmorAnnotationPrefix         = "container.apparmor.security.beta.kubernetes.io/"
	podTemplateField                 = "jobTemplate.spec.template"
)

// container is one container of any kind, with the field it sits at.
type container struct {
	*corev1.Container
	field string // jobTemplate.spec.template.spec.containers[0]
}

// containersOf lists every container the Pod may run: init, regular and ephemeral ones.
func containersOf(spec *corev1.PodSpec) []container {
	var out []container
	for i := range spec.InitContainers {
		out = append(out, container{&spec.InitContainers[i], fmt.Sprintf("%s.initContainers[%d]", podSpecField, i)})
	}
	for i := range spec.Containers {
		out = append(out, container{&spec.Containers[i], fmt.Sprintf("%s.containers[%d]", podSpecField, i)})
	}
	for i := range spec.EphemeralContainers {
		// The two types have the same fields.
		c := (*corev1.Container)(&spec.EphemeralContainers[i].EphemeralContainerCommon)
		out = append(out, container{c, fmt.Sprintf("%s.ephemeralContainers[%d]", podSpecField, i)})
	}
	return out
}

// checkPodAccess judges every Pod field that grants access beyond the Pod's own sandbox
// (docs/security.md lists them): privileges, host namespaces, ports and paths, the
// kernel's confinement, capabilities, runtime classes, volume types and Secrets.
func checkPodAccess(ns string, rules NamespaceRules, tpl *corev1.PodTemplateSpec) error {
	spec := &tpl.Spec
	deny := func(rule, field, what string) error {
		return &Denial{rule, field,
			fmt.Sprintf("%s, which the policy does not grant to Jobs in namespace %q; remove it or run in a namespace that has it", what, ns)}
	}
	containers := containersOf(spec)
	if err := checkPrivileged(rules, spec, containers, deny); err != nil {
		return err
	}
	if err := checkHostAccess(rules, spec, containers, deny); err != nil {
		return err
	}
	if !rules.Privileged {
		// A namespace that may run privileged containers gains nothing from these.
		if err := checkCapabilities(rules, containers, deny); err != nil {
			return err
		}
		if err := checkPrivilegeEscalation(rules, containers, deny); err != nil {
			return err
		}
	}
	if !rules.Unconfined {
		if err := checkConfinement(tpl, containers, deny); err != nil {
			return err
		}
	}
	if rc := spec.RuntimeClassName; rc != nil && !slices.Contains(rules.RuntimeClasses, *rc) {
		return deny(RuleRuntimeClasses, podSpecField+".runtimeClassName", fmt.Sprintf("RuntimeClass %q chooses the container runtime", *rc))
	}
	for i, v := range spec.Volumes {
		kind := volumeType(&v.VolumeSource)
		if kind == "hostPath" || slices.Contains(podVolumeTypes, kind) || slices.Contains(rules.VolumeTypes, kind) {
			continue
		}
		return deny(RuleVolumeTypes, fmt.Sprintf("%s.volumes[%d].%s", podSpecField, i, kind),
			fmt.Sprintf("volume %q is of type %s, which reaches storage by the node's identity", v.Name, kind))
	}
	for _, ref := range SecretsRead(spec) {
		if !slices.Contains(rules.Secrets, ref.Name) && !slices.Contains(rules.Secrets, AnyNamespace) {
			return deny(RuleSecrets, ref.Field, fmt.Sprintf("the Pod reads Secret %q", ref.Name))
		}
	}
	return nil
}

type denyFunc func(rule, field, what string) error

func checkPrivileged(rules NamespaceRules, spec *corev1.PodSpec, containers []container, deny denyFunc) error {
	if rules.Privileged {
		return nil
	}
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		if sc.Privileged != nil && *sc.Privileged {
			return deny(RulePrivileged, c.field+".securityContext.privileged", "the container is privileged")
		}
		if w := sc.WindowsOptions; w != nil && w.HostProcess != nil && *w.HostProcess {
			return deny(RulePrivileged, c.field+".securityContext.windowsOptions.hostProcess", "the container is a Windows host process")
		}
	}
	if sc := spec.SecurityContext; sc != nil && sc.WindowsOptions != nil && sc.WindowsOptions.HostProcess != nil && *sc.WindowsOptions.HostProcess {
		return deny(RulePrivileged, podSpecField+".securityContext.windowsOptions.hostProcess", "the Pod is a Windows host process")
	}
	return nil
}

func checkHostAccess(rules NamespaceRules, spec *corev1.PodSpec, containers []container, deny denyFunc) error {
	if !rules.HostPath {
		for i, v := range spec.Volumes {
			if v.HostPath != nil {
				return deny(RuleHostPath, fmt.Sprintf("%s.volumes[%d].hostPath", podSpecField, i), "the Pod mounts a path of the node")
			}
		}
	}
	for _, h := range []struct {
		rule    string
		granted bool
		used    bool
	}{
		{RuleHostNetwork, rules.HostNetwork, spec.HostNetwork},
		{RuleHostPID, rules.HostPID, spec.HostPID},
		{RuleHostIPC, rules.HostIPC, spec.HostIPC},
	} {
		if h.used && !h.granted {
			return deny(h.rule, podSpecField+"."+h.rule, "the Pod shares the node's "+strings.TrimPrefix(h.rule, "host")+" namespace")
		}
	}
	// A Pod on the host network binds the node's ports anyway.
	if !rules.HostPorts && !(rules.HostNetwork && spec.HostNetwork) {
		for _, c := range containers {
			for i, p := range c.Ports {
				if p.HostPort != 0 {
					return deny(RuleHostPorts, fmt.Sprintf("%s.ports[%d].hostPort", c.field, i), fmt.Sprintf("the container binds port %d of the node", p.HostPort))
				}
			}
		}
	}
	if !rules.HostNetwork {
		for _, c := range containers {
			if field, host := handlerHost(c); host != "" {
				return deny(RuleHostNetwork, c.field+"."+field,
					fmt.Sprintf("a probe or lifecycle handler makes the kubelet connect to host %q from the node's network", host))
			}
		}
	}
	return nil
}

// handlerHost finds a probe or lifecycle handler of the container that names a host.
func handlerHost(c container) (field, host string) {
	probes := []struct {
		name  string
		probe *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}}
	for _, p := range probes {
		if p.probe == nil {
			continue
		}
		if g := p.probe.HTTPGet; g != nil && g.Host != "" {
			return p.name + ".httpGet.host", g.Host
		}
		if s := p.probe.TCPSocket; s != nil && s.Host != "" {
			return p.name + ".tcpSocket.host", s.Host
		}
	}
	if l := c.Lifecycle; l != nil {
		for _, h := range []struct {
			name    string
			handler *corev1.LifecycleHandler
		}{{"postStart", l.PostStart}, {"preStop", l.PreStop}} {
			if h.handler == nil {
				continue
			}
			if g := h.handler.HTTPGet; g != nil && g.Host != "" {
				return "lifecycle." + h.name + ".httpGet.host", g.Host
			}
			if s := h.handler.TCPSocket; s != nil && s.Host != "" {
				return "lifecycle." + h.name + ".tcpSocket.host", s.Host
			}
		}
	}
	return "", ""
}

func checkCapabilities(rules NamespaceRules, containers []container, deny denyFunc) error {
	granted := func(capability string) bool {
		name := strings.TrimPrefix(strings.ToUpper(capability), "CAP_")
		return slices.Contains(baselineCapabilities, name) || slices.ContainsFunc(rules.Capabilities, func(g string) bool {
			g = strings.TrimPrefix(strings.ToUpper(g), "CAP_")
			return g == name || g == "ALL"
		})
	}
	for _, c := range containers {
		if c.SecurityContext == nil || c.SecurityContext.Capabilities == nil {
			continue
		}
		for i, capability := range c.SecurityContext.Capabilities.Add {
			if !granted(string(capability)) {
				return deny(RuleCapabilities, fmt.Sprintf("%s.securityContext.capabilities.add[%d]", c.field, i),
					fmt.Sprintf("the container adds capability %s", capability))
			}
		}
	}
	return nil
}

func checkPrivilegeEscalation(rules NamespaceRules, containers []container, deny denyFunc) error {
	if rules.PrivilegeEscalation == nil || *rules.PrivilegeEscalation {
		return nil
	}
	for _, c := range containers {
		if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			return deny(RulePrivilegeEscalation, c.field+".securityContext.allowPrivilegeEscalation",
				"the container may gain privileges (set allowPrivilegeEscalation: false)")
		}
	}
	return nil
}

// checkProfiles judges the confinement profiles a Pod's and a container's securityContext
// (at f) both set: no Unconfined seccomp or AppArmor profile, and SELinux as checkSELinux
// allows. who ("Pod" or "container") names the owner in the refusal.
func checkProfiles(f, who string, seccomp *corev1.SeccompProfile, appArmor *corev1.AppArmorProfile, seLinux *corev1.SELinuxOptions, deny denyFunc) error {
	if seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		return deny(RuleUnconfined, f+".seccompProfile.type", "the "+who+" runs without a seccomp profile")
	}
	if appArmor != nil && appArmor.Type == corev1.AppArmorProfileTypeUnconfined {
		return deny(RuleUnconfined, f+".appArmorProfile.type", "the "+who+" runs without an AppArmor profile")
	}
	return checkSELinux(f, seLinux, deny)
}

// checkConfinement judges what loosens the kernel's confinement of the Pod.
func checkConfinement(tpl *corev1.PodTemplateSpec, containers []container, deny denyFunc) error {
	spec := &tpl.Spec
	if psc := spec.SecurityContext; psc != nil {
		f := podSpecField + ".securityContext"
		if err := checkProfiles(f, "Pod", psc.SeccompProfile, psc.AppArmorProfile, psc.SELinuxOptions, deny); err != nil {
			return err
		}
		for i, s := range psc.Sysctls {
			if !slices.Contains(safeSysctls, s.Name) {
				return deny(RuleUnconfined, fmt.Sprintf("%s.sysctls[%d].name", f, i), fmt.Sprintf("sysctl %s is not isolated from the node", s.Name))
			}
		}
	}
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil {
			continue
		}
		f := c.field + ".securityContext"
		if err := checkProfiles(f, "container", sc.SeccompProfile, sc.AppArmorProfile, sc.SELinuxOptions, deny); err != nil {
			return err
		}
		if sc.ProcMount != nil && *sc.ProcMount != corev1.DefaultProcMount {
			return deny(RuleUnconfined, f+".procMount", "the container sees /proc unmasked")
		}
	}
	keys := make([]string, 0, len(tpl.Annotations))
	for k := range tpl.Annotations {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := strings.ToLower(tpl.Annotations[k])
		if (k == seccompPodAnnotation || strings.HasPrefix(k, seccompContainerAnnotationPrefix) || strings.HasPrefix(k, appArmorAnnotationPrefix)) && v == "unconfined" {
			return deny(RuleUnconfined, podTemplateField+".metadata.annotations["+k+"]", "the annotation lifts the Pod's seccomp or AppArmor profile")
		}
	}
	return nil
}

func checkSELinux(field string, o *corev1.SELinuxOptions, deny denyFunc) error {
	switch {
	case o == nil:
		return nil
	case !slices.Contains(confinedSELinuxTypes, o.Type):
		return deny(RuleUnconfined, field+".seLinuxOptions.type", fmt.Sprintf("SELinux type %s is not a container runtime's confined type", o.Type))
	case o.User != "":
		return deny(RuleUnconfined, field+".seLinuxOptions.user", "the SELinux user is chosen")
	case o.Role != "":
		return deny(RuleUnconfined, field+".seLinuxOptions.role", "the SELinux role is chosen")
	}
	return nil
}

// volumeType is the field name of the one source a volume sets (nfs, secret, ...).
func volumeType(src *corev1.VolumeSource) string {
	v := reflect.ValueOf(src).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return "unknown"
}

// volumeTypeNames are the field names of every volume source.
func volumeTypeNames() []string {
	t := reflect.TypeOf(corev1.VolumeSource{})
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// SecretRef is a Secret a Pod reads, and the field that names it.
type SecretRef struct {
	Name  string
	Field string
}

// SecretsRead lists every Secret whose content the Pod's containers can read: secret volumes,
// projected secrets, CSI volumes' and other volume sources' secret references, and env and
// envFrom of every container. (Image pull secrets reach the kubelet, not the containers.)
func SecretsRead(spec *corev1.PodSpec) []SecretRef {
	var refs []SecretRef
	add := func(name, field string) {
		if name != "" {
			refs = append(refs, SecretRef{name, field})
		}
	}
	ref := func(r *corev1.LocalObjectReference) string {
		if r == nil {
			return ""
		}
		return r.Name
	}
	for i, v := range spec.Volumes {
		f := fmt.Sprintf("%s.volumes[%d]", podSpecField, i)
		switch src := v.VolumeSource; {
		case src.Secret != nil:
			add(src.Secret.SecretName, f+".secret.secretName")
		case src.Projected != nil:
			for j, p := range src.Projected.Sources {
				if p.Secret != nil {
					add(p.Secret.Name, fmt.Sprintf("%s.projected.sources[%d].secret.name", f, j))
				}
			}
		case src.CSI != nil:
			add(ref(src.CSI.NodePublishSecretRef), f+".csi.nodePublishSecretRef.name")
		case src.CephFS != nil:
			add(ref(src.CephFS.SecretRef), f+".cephfs.secretRef.name")
		case src.RBD != nil:
			add(ref(src.RBD.SecretRef), f+".rbd.secretRef.name")
		case src.ISCSI != nil:
			add(ref(src.ISCSI.SecretRef), f+".iscsi.secretRef.name")
		case src.FlexVolume != nil:
			add(ref(src.FlexVolume.SecretRef), f+".flexVolume.secretRef.name")
		case src.AzureFile != nil:
			add(src.AzureFile.SecretName, f+".azureFile.secretName")
		case src.ScaleIO != nil:
			add(ref(src.ScaleIO.SecretRef), f+".scaleIO.secretRef.name")
		case src.StorageOS != nil:
			add(ref(src.StorageOS.SecretRef), f+".storageos.secretRef.name")
		}
	}
	for _, c := range containersOf(spec) {
		for i, e := range c.EnvFrom {
			if e.SecretRef != nil {
				add(e.SecretRef.Name, fmt.Sprintf("%s.envFrom[%d].secretRef.name", c.field, i))
			}
		}
		for i, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				add(e.ValueFrom.SecretKeyRef.Name, fmt.Sprintf("%s.env[%d].valueFrom.secretKeyRef.name", c.field, i))
			}
		}
	}
	return refs
}

// LogTailWithSecrets says whether a failed Pod of a Job in namespace that reads Secrets may
// have its log tail kept. Without a policy it may not: the tail lands in the workflow history,
// readable by anyone who can read the Temporal namespace.
func (p *Policy) LogTailWithSecrets(namespace string) bool {
	if p == nil {
		return false
	}
	rules, _ := p.rules(namespace)
	return rules.LogTailWithSecrets
}
