package policy

import (
	"testing"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// accessPolicy: "apps" is granted nothing (baseline), "granted" each Pod-field grant, "maint"
// privileged and the host namespaces, "strict" requires allowPrivilegeEscalation: false.
const accessPolicy = `
namespaces:
  apps: {}
  granted:
    hostIPC: true
    hostPorts: true
    capabilities: [NET_ADMIN, SYS_TIME]
    unconfined: true
    runtimeClasses: [kata]
    volumeTypes: [nfs]
    secrets: [node-token]
  maint: {privileged: true, hostNetwork: true, hostPID: true}
  strict: {privilegeEscalation: false}
images: [registry.example.com/node-tools/, docker.io/library/busybox]
`

const spec = "jobTemplate.spec.template.spec."

func withTemplate(ns string, change func(*corev1.PodTemplateSpec)) *batchv1.Job {
	j := job(ns, "busybox", nil)
	change(&j.Spec.Template)
	return j
}

func inSpec(ns string, change func(*corev1.PodSpec)) *batchv1.Job {
	return job(ns, "busybox", change)
}

func sc(s *corev1.PodSpec) *corev1.SecurityContext {
	if s.Containers[0].SecurityContext == nil {
		s.Containers[0].SecurityContext = &corev1.SecurityContext{}
	}
	return s.Containers[0].SecurityContext
}

func podSC(s *corev1.PodSpec) *corev1.PodSecurityContext {
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	return s.SecurityContext
}

func volume(name string, src corev1.VolumeSource) func(*corev1.PodSpec) {
	return func(s *corev1.PodSpec) { s.Volumes = append(s.Volumes, corev1.Volume{Name: name, VolumeSource: src}) }
}

func secretEnv(s *corev1.PodSpec) {
	s.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "other-sa-token"}, Key: "token"}}}}
}

// TestCheckJobJudgesEveryFieldThatGrantsAccess: each Pod field that grants access beyond the
// Pod's own sandbox is denied where the namespace is not granted it (Pod Security "baseline"
// where the policy grants nothing; host access and privileges off), and allowed where it is.
func TestCheckJobJudgesEveryFieldThatGrantsAccess(t *testing.T) {
	p := mustParse(t, accessPolicy)
	yes, no := true, false
	unconfinedSeccomp := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
	unconfinedAppArmor := &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeUnconfined}
	probeHost := func(s *corev1.PodSpec) {
		s.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Host: "10.0.0.1", Path: "/"}}}
	}
	ephemeral := func(image string, sc *corev1.SecurityContext) func(*corev1.PodSpec) {
		return func(s *corev1.PodSpec) {
			s.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: image, SecurityContext: sc}}}
		}
	}
	cases := []struct {
		name  string
		job   *batchv1.Job
		rule  string // "" = allowed
		field string
	}{
		// images: every container kind, and image volumes
		{"ephemeral container image", inSpec("apps", ephemeral("evil.example.com/x", nil)), RuleImages, spec + "ephemeralContainers[0].image"},
		{"image volume from elsewhere", inSpec("apps", volume("tools", corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "evil.example.com/tools:1"}})),
			RuleImages, spec + "volumes[0].image.reference"},
		{"image volume under a prefix", inSpec("apps", volume("tools", corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "registry.example.com/node-tools/bin:1"}})), "", ""},
		// privileged: every container kind, and Windows host processes
		{"privileged ephemeral container", inSpec("apps", ephemeral("busybox", &corev1.SecurityContext{Privileged: &yes})),
			RulePrivileged, spec + "ephemeralContainers[0].securityContext.privileged"},
		{"Windows host process", inSpec("apps", func(s *corev1.PodSpec) {
			sc(s).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: &yes}
		}), RulePrivileged, spec + "containers[0].securityContext.windowsOptions.hostProcess"},
		{"Windows host process for the Pod", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: &yes}
		}), RulePrivileged, spec + "securityContext.windowsOptions.hostProcess"},
		{"Windows host process where privileged", inSpec("maint", func(s *corev1.PodSpec) {
			sc(s).WindowsOptions = &corev1.WindowsSecurityContextOptions{HostProcess: &yes}
		}), "", ""},
		// hostIPC
		{"hostIPC not granted", inSpec("apps", func(s *corev1.PodSpec) { s.HostIPC = true }), RuleHostIPC, spec + "hostIPC"},
		{"hostIPC granted", inSpec("granted", func(s *corev1.PodSpec) { s.HostIPC = true }), "", ""},
		// hostPorts
		{"hostPort not granted", inSpec("apps", func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 9100, HostPort: 9100}}
		}), RuleHostPorts, spec + "containers[0].ports[1].hostPort"},
		{"containerPort alone", inSpec("apps", func(s *corev1.PodSpec) { s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}} }), "", ""},
		{"hostPort granted", inSpec("granted", func(s *corev1.PodSpec) {
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9100, HostPort: 9100}}
		}), "", ""},
		{"hostPort on the host network granted", inSpec("maint", func(s *corev1.PodSpec) {
			s.HostNetwork = true
			s.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9100, HostPort: 9100}}
		}), "", ""},
		// probe and lifecycle hosts: the kubelet connects from the node's network
		{"probe host", inSpec("apps", probeHost), RuleHostNetwork, spec + "containers[0].livenessProbe.httpGet.host"},
		{"lifecycle host", inSpec("apps", func(s *corev1.PodSpec) {
			s.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Host: "10.0.0.1"}}}
		}), RuleHostNetwork, spec + "containers[0].lifecycle.preStop.tcpSocket.host"},
		{"probe host where hostNetwork is granted", inSpec("maint", probeHost), "", ""},
		// capabilities
		{"a baseline capability", inSpec("apps", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "NET_BIND_SERVICE"}}
		}), "", ""},
		{"a capability beyond baseline", inSpec("apps", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CHOWN", "NET_ADMIN"}}
		}), RuleCapabilities, spec + "containers[0].securityContext.capabilities.add[1]"},
		{"a capability spelled with CAP_", inSpec("apps", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"cap_sys_admin"}}
		}), RuleCapabilities, spec + "containers[0].securityContext.capabilities.add[0]"},
		{"ALL capabilities", inSpec("apps", func(s *corev1.PodSpec) { sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"ALL"}} }),
			RuleCapabilities, spec + "containers[0].securityContext.capabilities.add[0]"},
		{"an init container's capability", inSpec("apps", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_PTRACE"}}}}}
		}), RuleCapabilities, spec + "initContainers[0].securityContext.capabilities.add[0]"},
		{"a granted capability", inSpec("granted", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"CAP_NET_ADMIN"}}
		}), "", ""},
		{"a capability not granted there either", inSpec("granted", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		}), RuleCapabilities, spec + "containers[0].securityContext.capabilities.add[0]"},
		{"any capability where privileged is granted", inSpec("maint", func(s *corev1.PodSpec) {
			sc(s).Capabilities = &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}
		}), "", ""},
		{"dropping capabilities", inSpec("apps", func(s *corev1.PodSpec) { sc(s).Capabilities = &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}} }), "", ""},
		// privilegeEscalation
		{"escalation unset (baseline)", inSpec("apps", nil), "", ""},
		{"escalation allowed (baseline)", inSpec("apps", func(s *corev1.PodSpec) { sc(s).AllowPrivilegeEscalation = &yes }), "", ""},
		{"escalation unset where it must be off", inSpec("strict", nil), RulePrivilegeEscalation, spec + "containers[0].securityContext.allowPrivilegeEscalation"},
		{"escalation on where it must be off", inSpec("strict", func(s *corev1.PodSpec) { sc(s).AllowPrivilegeEscalation = &yes }),
			RulePrivilegeEscalation, spec + "containers[0].securityContext.allowPrivilegeEscalation"},
		{"escalation off where it must be", inSpec("strict", func(s *corev1.PodSpec) { sc(s).AllowPrivilegeEscalation = &no }), "", ""},
		// unconfined: seccomp, AppArmor, SELinux, procMount, sysctls
		{"seccomp Unconfined for the Pod", inSpec("apps", func(s *corev1.PodSpec) { podSC(s).SeccompProfile = unconfinedSeccomp }),
			RuleUnconfined, spec + "securityContext.seccompProfile.type"},
		{"seccomp Unconfined for a container", inSpec("apps", func(s *corev1.PodSpec) { sc(s).SeccompProfile = unconfinedSeccomp }),
			RuleUnconfined, spec + "containers[0].securityContext.seccompProfile.type"},
		{"seccomp RuntimeDefault", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
		}), "", ""},
		{"seccomp unconfined by annotation", withTemplate("apps", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations = map[string]string{"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}
		}), RuleUnconfined, "jobTemplate.spec.template.metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]"},
		{"AppArmor Unconfined for the Pod", inSpec("apps", func(s *corev1.PodSpec) { podSC(s).AppArmorProfile = unconfinedAppArmor }),
			RuleUnconfined, spec + "securityContext.appArmorProfile.type"},
		{"AppArmor Unconfined for a container", inSpec("apps", func(s *corev1.PodSpec) { sc(s).AppArmorProfile = unconfinedAppArmor }),
			RuleUnconfined, spec + "containers[0].securityContext.appArmorProfile.type"},
		{"AppArmor unconfined by annotation", withTemplate("apps", func(tpl *corev1.PodTemplateSpec) {
			tpl.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/work": "unconfined"}
		}), RuleUnconfined, "jobTemplate.spec.template.metadata.annotations[container.apparmor.security.beta.kubernetes.io/work]"},
		{"AppArmor RuntimeDefault", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).AppArmorProfile = &corev1.AppArmorProfile{Type: corev1.AppArmorProfileTypeRuntimeDefault}
		}), "", ""},
		{"SELinux type of a container runtime", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).SELinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0:c1,c2"}
		}), "", ""},
		{"SELinux super-privileged type", inSpec("apps", func(s *corev1.PodSpec) { podSC(s).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t"} }),
			RuleUnconfined, spec + "securityContext.seLinuxOptions.type"},
		{"SELinux user", inSpec("apps", func(s *corev1.PodSpec) { sc(s).SELinuxOptions = &corev1.SELinuxOptions{User: "system_u"} }),
			RuleUnconfined, spec + "containers[0].securityContext.seLinuxOptions.user"},
		{"procMount Unmasked", inSpec("apps", func(s *corev1.PodSpec) { pm := corev1.UnmaskedProcMount; sc(s).ProcMount = &pm }),
			RuleUnconfined, spec + "containers[0].securityContext.procMount"},
		{"procMount Default", inSpec("apps", func(s *corev1.PodSpec) { pm := corev1.DefaultProcMount; sc(s).ProcMount = &pm }), "", ""},
		{"a safe sysctl", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.ip_local_port_range", Value: "1024 65535"}}
		}), "", ""},
		{"an unsafe sysctl", inSpec("apps", func(s *corev1.PodSpec) {
			podSC(s).Sysctls = []corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "1"}}
		}), RuleUnconfined, spec + "securityContext.sysctls[1].name"},
		{"all of it where unconfined is granted", withTemplate("granted", func(tpl *corev1.PodTemplateSpec) {
			s := &tpl.Spec
			podSC(s).SeccompProfile, podSC(s).AppArmorProfile = unconfinedSeccomp, unconfinedAppArmor
			podSC(s).SELinuxOptions = &corev1.SELinuxOptions{Type: "spc_t", User: "system_u"}
			podSC(s).Sysctls = []corev1.Sysctl{{Name: "kernel.msgmax", Value: "1"}}
			pm := corev1.UnmaskedProcMount
			sc(s).ProcMount = &pm
			tpl.Annotations = map[string]string{"container.apparmor.security.beta.kubernetes.io/work": "unconfined"}
		}), "", ""},
		// runtimeClasses
		{"a RuntimeClass not granted", inSpec("apps", func(s *corev1.PodSpec) { rc := "kata"; s.RuntimeClassName = &rc }), RuleRuntimeClasses, spec + "runtimeClassName"},
		{"a granted RuntimeClass", inSpec("granted", func(s *corev1.PodSpec) { rc := "kata"; s.RuntimeClassName = &rc }), "", ""},
		{"another RuntimeClass", inSpec("granted", func(s *corev1.PodSpec) { rc := "runc-privileged"; s.RuntimeClassName = &rc }), RuleRuntimeClasses, spec + "runtimeClassName"},
		// volumeTypes
		{"an nfs volume", inSpec("apps", volume("share", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.2", Path: "/"}})),
			RuleVolumeTypes, spec + "volumes[0].nfs"},
		{"an iscsi volume", inSpec("granted", volume("disk", corev1.VolumeSource{ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.3", IQN: "iqn.x", Lun: 0}})),
			RuleVolumeTypes, spec + "volumes[0].iscsi"},
		{"a granted nfs volume", inSpec("granted", volume("share", corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "10.0.0.2", Path: "/"}})), "", ""},
		{"the volumes of Pod Security restricted", inSpec("apps", func(s *corev1.PodSpec) {
			for name, src := range map[string]corev1.VolumeSource{
				"cm": {ConfigMap: &corev1.ConfigMapVolumeSource{}}, "scratch": {EmptyDir: &corev1.EmptyDirVolumeSource{}},
				"info": {DownwardAPI: &corev1.DownwardAPIVolumeSource{}}, "claim": {PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}},
				"eph": {Ephemeral: &corev1.EphemeralVolumeSource{}}, "csi": {CSI: &corev1.CSIVolumeSource{Driver: "d"}},
				"token": {Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}},
			} {
				volume(name, src)(s)
			}
		}), "", ""},
		// secrets
		{"a Secret volume", inSpec("apps", volume("creds", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other-sa-token"}})),
			RuleSecrets, spec + "volumes[0].secret.secretName"},
		{"a projected Secret", inSpec("apps", volume("creds", corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}},
			{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "other-sa-token"}}}}}})),
			RuleSecrets, spec + "volumes[0].projected.sources[1].secret.name"},
		{"a CSI volume's Secret", inSpec("apps", volume("csi", corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d",
			NodePublishSecretRef: &corev1.LocalObjectReference{Name: "driver-creds"}}})), RuleSecrets, spec + "volumes[0].csi.nodePublishSecretRef.name"},
		{"a Secret in env", inSpec("apps", secretEnv), RuleSecrets, spec + "containers[0].env[0].valueFrom.secretKeyRef.name"},
		{"a Secret in envFrom", inSpec("apps", func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
		}), RuleSecrets, spec + "containers[0].envFrom[0].secretRef.name"},
		{"an init container's Secret", inSpec("apps", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
			s.InitContainers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}}}
		}), RuleSecrets, spec + "initContainers[0].envFrom[0].secretRef.name"},
		{"a granted Secret", inSpec("granted", volume("creds", corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "node-token"}})), "", ""},
		{"another Secret", inSpec("granted", secretEnv), RuleSecrets, spec + "containers[0].env[0].valueFrom.secretKeyRef.name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			requireVerdict(t, p.CheckJob(c.job), c.rule, c.field)
		})
	}
}

func TestSecretsReadNamesEveryWayIntoASecret(t *testing.T) {
	s := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "a", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "vol"}}},
			{Name: "b", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "projected"}}}}}}},
			{Name: "c", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", NodePublishSecretRef: &corev1.LocalObjectReference{Name: "csi"}}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "envfrom"}}}}}},
		Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "X", Value: "x"},
			{Name: "T", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}, Key: "k"}}}}}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}},
	}
	var names []string
	for _, r := range SecretsRead(s) {
		names = append(names, r.Name)
	}
	require.Equal(t, []string{"vol", "projected", "csi", "envfrom", "env"}, names, "not the ServiceAccount token projection, not the image pull secret")
	require.Empty(t, SecretsRead(&corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}))

	p := mustParse(t, "namespaces: {ops: {logTailWithSecrets: true}, apps: {}}\n")
	require.True(t, p.LogTailWithSecrets("ops"))
	require.False(t, p.LogTailWithSecrets("apps"))
	require.False(t, p.LogTailWithSecrets("other"))
	var none *Policy
	require.False(t, none.LogTailWithSecrets("ops"), "without a policy no one allowed it")
}
