package activities

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// Steps a node runs a second Job for, after its own: the reboot (maintenance.reboot) and the
// check (gates.checkJob).
const (
	StepReboot = "reboot"
	StepCheck  = "check"
	// LabelStep marks a step's Job with its step, so `kubectl get jobs -l` tells them apart.
	LabelStep = "noderollout.io/step"
)

// StepJobRequest creates a step's Job on the node: the template stored under TemplateHash.
type StepJobRequest struct {
	JobRequest
	Step string `json:"step"`
}

// StepJobName is the name of a step's Job: as deterministic as the node's own Job (a retry
// adopts it), and another name than it.
func StepJobName(rollout, node, runID, step string) string {
	return jobspec.JobName(rollout, node, runID+"/"+step)
}

// CreateStepJob renders a step's stored template for the node and creates its Job, or adopts
// the one an earlier attempt made. The worker's policy judges it as it judges the node's Job.
// A reboot Job runs once (backoffLimit 0): its Pod dies with the node, and a retried Pod would
// reboot the node again.
func (a *Activities) CreateStepJob(ctx context.Context, in StepJobRequest) (JobRef, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	// The caller must be a node workflow of a running Rollout that prepared this step template.
	if err := a.Lineage.checkStep(ctx, in.TemplateHash); err != nil {
		return JobRef{}, err
	}
	if in.TemplateHash == "" {
		return JobRef{}, invalidRequest("templateHash", "required: the hash of the %s Job's template the rollout stored", in.Step)
	}
	text, err := a.storedTemplate(ctx, in.Namespace, in.TemplateHash)
	if err != nil {
		return JobRef{}, err
	}
	params := jobParams(in.JobRequest)
	job, err := jobspec.Build(text, params)
	if err != nil {
		return JobRef{}, templateError(err)
	}
	job.Name = StepJobName(in.Rollout, in.Node, in.RunID, in.Step)
	job.Labels[LabelStep] = in.Step
	if in.Step == StepReboot {
		once := int32(0)
		job.Spec.BackoffLimit = &once
	}
	policyNode, err := a.checkJobPolicy(ctx, in.JobRequest, job)
	if err != nil {
		return JobRef{}, err
	}
	stampRequester(job, in.Requester)
	var uid string
	if policyNode != nil {
		uid = string(policyNode.UID) // the policy has just read the Node: that is the node check
	} else {
		var node *corev1.Node
		if node, err = a.readNode(ctx, in.Node); err == nil {
			uid = string(node.UID)
		}
	}
	if apierrors.IsNotFound(err) {
		return JobRef{}, nodeGone(in.Node)
	}
	if err != nil {
		return JobRef{}, kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
	}
	ref, err := a.createJob(ctx, in.JobRequest, job)
	if err != nil {
		return JobRef{}, err
	}
	ref.NodeUID = uid
	return ref, nil
}

// DropRebootJob deletes the reboot Job (our finalizer removed) without awaiting its Pods: the
// Pod went down with the node it rebooted, and on a node that never came back no kubelet would
// ever confirm its end, so a wait would hold the node for ever. The garbage collector takes the
// Pod. Someone else's Job under the name is left alone.
func (a *Activities) DropRebootJob(ctx context.Context, job JobRef) error {
	sub := a.Jobs.Subscribe(job.Namespace, job.Name)
	defer sub.Close()
	_, err := a.removeJob(ctx, &job, sub, metav1.DeletePropagationBackground)
	return err
}
