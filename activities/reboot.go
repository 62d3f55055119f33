package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	batchv1 "k8s.io/api/batch/v1"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
)

// ReadBootID reads the node's status.nodeInfo.bootID: the node workflow records it before it
// creates the reboot Job, so a worker crash at any later point still knows the boot to leave.
func (a *Activities) ReadBootID(ctx context.Context, node string) (string, error) {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	n, err := a.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", errNodeGone(node)
	}
	if err != nil {
		return "", kubeError(err, "get", fmt.Sprintf("node %q", node))
	}
	return n.Status.NodeInfo.BootID, nil
}

// RebootWaitInput waits for a node to come back from its reboot.
type RebootWaitInput struct {
	Node string `json:"node"`
	// BootID is the node's boot ID before the reboot Job was created.
	BootID     string            `json:"bootID"`
	Conditions map[string]string `json:"conditions"`
	// BackBy is the deadline, fixed by the workflow, so every attempt keeps the same one.
	BackBy time.Time `json:"backBy"`
	// Job is the reboot Job, named in the timeout's message.
	Job JobRef `json:"job"`
}

// WaitReboot waits until the node runs a new boot (its boot ID is not BootID) and meets the
// conditions, polling the Node and heartbeating (the SDK sends at most one heartbeat per
// 80 % of the heartbeat timeout, so a long wait costs no history events). The reboot Job's Pod
// dying with the node is expected and not looked at: only the node's return counts. Past BackBy
// it fails with the non-retryable RebootTimedOut. A retried attempt (a worker crash) waits
// again with the same boot ID and deadline.
func (a *Activities) WaitReboot(ctx context.Context, in RebootWaitInput) error {
	for {
		n, err := a.Kube.CoreV1().Nodes().Get(ctx, in.Node, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return errNodeGone(in.Node)
		case err != nil:
			err = kubeError(err, "get", fmt.Sprintf("node %q", in.Node))
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && appErr.NonRetryable() {
				return err
			}
			activity.GetLogger(ctx).Info("the node cannot be read; the reboot wait goes on", "node", in.Node, "error", err)
		default:
			back, why := rebootedAndHealthy(n, in)
			if back {
				return nil
			}
			if !a.Now().Before(in.BackBy) {
				return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
					"node %s did not come back from its reboot (Job %s/%s) by %s: %s; see maintenance.reboot.timeout",
					in.Node, in.Job.Namespace, in.Job.Name, in.BackBy.UTC().Format(time.RFC3339), why), api.ErrRebootTimedOut, nil)
			}
		}
		activity.RecordHeartbeat(ctx, in.Node)
		if err := sleep(ctx, a.healthPoll()); err != nil {
			return err
		}
	}
}

// rebootedAndHealthy says whether the node is back: a new boot and the conditions met; else why not.
func rebootedAndHealthy(n *corev1.Node, in RebootWaitInput) (bool, string) {
	if id := n.Status.NodeInfo.BootID; id == in.BootID {
		return false, fmt.Sprintf("its boot ID is still %q", id)
	}
	if unmet := unmetConditions(n, in.Conditions); len(unmet) > 0 {
		return false, "it rebooted, but " + strings.Join(unmet, "; ")
	}
	return true, ""
}

// rebootRequested says whether a succeeded Job asked for a reboot: a container of one of its
// Pods ended with the termination message api.RebootRequiredMessage.
func (a *Activities) rebootRequested(ctx context.Context, ref JobRef) (bool, error) {
	selector := labels.Set{batchv1.JobNameLabel: ref.Name}
	if ref.UID != "" {
		selector = labels.Set{batchv1.ControllerUidLabel: ref.UID}
	}
	pods, err := a.Kube.CoreV1().Pods(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return false, kubeError(err, "list", fmt.Sprintf("pods in namespace %q", ref.Namespace))
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if t := c.State.Terminated; t != nil && strings.TrimSpace(t.Message) == api.RebootRequiredMessage {
				return true, nil
			}
		}
	}
	return false, nil
}
