package activities

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/policy"
)

// FieldManager owns every field noderollout writes.
const FieldManager = "noderollout"

// DefaultTemplateKey is the ConfigMap key read when TemplateRef names none.
const DefaultTemplateKey = "job.yaml"

// Activities holds what the activities need. Register one value with the worker
// (worker.RegisterActivity(a)) after a.Jobs.Start has returned.
type Activities struct {
	Kube kubernetes.Interface
	Jobs *JobWatcher
	// Now is the clock for deadlines and event times; tests replace it.
	Now func() time.Time
	// NodeCheckInterval is how often WaitJob checks that the node still exists.
	NodeCheckInterval time.Duration
	// HeartbeatInterval is how often WaitJob heartbeats; keep it well under the activity's
	// HeartbeatTimeout.
	HeartbeatInterval time.Duration
	// PodPollInterval is how often a wait for a deleted Job's Pods lists them while some remain
	// (or GETs the Job when the informer does not hold it).
	PodPollInterval time.Duration
	// NodeGonePodWait bounds the wait for the Pods of a Job whose Node was deleted: no kubelet
	// will report them stopped, and the Pod garbage collector removes the Pods of a missing
	// Node within about a minute.
	NodeGonePodWait time.Duration
	// DrainRetryInterval is the first wait before evictions a PodDisruptionBudget refused are
	// tried again (doubling up to 10 s); HealthPollInterval is how often CheckNodeHealth reads
	// the Node. Zero means 1 s and 2 s.
	DrainRetryInterval time.Duration
	HealthPollInterval time.Duration
	// Policy is the platform team's rules (--policy-file); nil allows every request.
	Policy *policy.Policy
	// TrustJobPodCounts says the Job controller counts a finished Job's Pods until they
	// stopped (Kubernetes 1.31 on, see podsStopped), so a Job's end needs no Pod list. The
	// worker sets it from the API server's version (TrustsJobPodCounts); off, the Pods of every
	// ended Job are listed, which is right on any version.
	TrustJobPodCounts bool
	// Prometheus is where metric gates ask (worker configuration); nil: a request with a
	// metric gate is refused.
	Prometheus *Prometheus
	// MetricGatePoll, when set, replaces a metric gate's interval (tests).
	MetricGatePoll time.Duration
	// Lineage lets only node workflows a running Rollout started write to the cluster; nil
	// (tests, tools) checks nothing.
	Lineage *Lineage

	waiting   atomic.Int64 // WaitJob calls in progress, for the running-Jobs gauge
	templates templateCache
}

// New returns Activities with the default clock and intervals and an unstarted JobWatcher.
func New(kube kubernetes.Interface) *Activities {
	return &Activities{
		Kube:              kube,
		Jobs:              NewJobWatcher(kube),
		Now:               time.Now,
		NodeCheckInterval: 60 * time.Second,
		HeartbeatInterval: 10 * time.Second,
		PodPollInterval:   5 * time.Second,
		NodeGonePodWait:   3 * time.Minute,
	}
}

// PrepareTemplate loads the rollout's Job template (inline or from a ConfigMap), checks it and
// the target namespace once, and returns it with its hash.
func (a *Activities) PrepareTemplate(ctx context.Context, in PrepareTemplateInput) (PreparedTemplate, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	if in.Namespace == "" {
		return PreparedTemplate{}, invalidRequest("namespace", "required: the namespace the Jobs are created in")
	}
	if (in.Template == "") == (in.TemplateRef == nil) {
		return PreparedTemplate{}, invalidRequest("jobTemplate",
			"set exactly one of jobTemplate (inline Job YAML) and jobTemplateRef (a ConfigMap holding it)")
	}
	if err := a.checkRequestPolicy(in); err != nil {
		return PreparedTemplate{}, err
	}
	if _, err := a.Kube.CoreV1().Namespaces().Get(ctx, in.Namespace, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return PreparedTemplate{}, invalidRequest("namespace",
				"namespace %q does not exist; create it (kubectl create namespace %s) or name another one", in.Namespace, in.Namespace)
		}
		return PreparedTemplate{}, kubeError(err, "get", fmt.Sprintf("namespace %q", in.Namespace))
	}
	text := in.Template
	if ref := in.TemplateRef; ref != nil {
		var err error
		if text, err = a.templateFromConfigMap(ctx, in.Namespace, *ref); err != nil {
			return PreparedTemplate{}, err
		}
	}
	job, err := jobspec.ParseTemplate(text)
	if err != nil {
		return PreparedTemplate{}, templateError(err)
	}
	if err := a.checkTemplatePolicy(in, job); err != nil {
		return PreparedTemplate{}, err
	}
	hash := jobspec.TemplateHash(text)
	tolerations := job.Spec.Template.Spec.Tolerations
	if !in.Store {
		return PreparedTemplate{Template: text, Hash: hash, MaxParallelism: a.policyParallelism(), Tolerations: tolerations, TolerationsRead: true}, nil
	}
	if err := a.storeTemplate(ctx, in.Namespace, text, hash); err != nil {
		return PreparedTemplate{}, err
	}
	return PreparedTemplate{Hash: hash, MaxParallelism: a.policyParallelism(), Tolerations: tolerations, TolerationsRead: true}, nil
}

func (a *Activities) templateFromConfigMap(ctx context.Context, defaultNamespace string, ref api.TemplateRef) (string, error) {
	ns, key := ref.Namespace, ref.Key
	if ns == "" {
		ns = defaultNamespace
	}
	if key == "" {
		key = DefaultTemplateKey
	}
	if ref.Name == "" {
		return "", invalidRequest("jobTemplateRef.name", "required: the ConfigMap holding the Job template")
	}
	cm, err := a.Kube.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", invalidRequest("jobTemplateRef", "ConfigMap %s/%s not found; create it with the Job template under key %q",
			ns, ref.Name, key)
	}
	if err != nil {
		return "", kubeError(err, "get", fmt.Sprintf("configmap %s/%s", ns, ref.Name))
	}
	if text, ok := cm.Data[key]; ok {
		return text, nil
	}
	if raw, ok := cm.BinaryData[key]; ok {
		return string(raw), nil
	}
	return "", invalidRequest("jobTemplateRef", "ConfigMap %s/%s has no key %q; put the Job template there or set jobTemplateRef.key",
		ns, ref.Name, key)
}
