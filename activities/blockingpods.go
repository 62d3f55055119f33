package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
)

// BlockingPodsInput waits until no Pod matching Selector runs on Node.
type BlockingPodsInput struct {
	Node     string `json:"node"`
	Selector string `json:"selector"`
	// FreeBy is the deadline, fixed by the workflow, so every attempt keeps the same one.
	FreeBy time.Time `json:"freeBy"`
}

// maxBlockingPodsNamed bounds the Pods a Blocked error names.
const maxBlockingPodsNamed = 5

// WaitBlockingPods waits while Pods matching the selector run (are neither Succeeded nor
// Failed) on the node, polling one list of the node's Pods each interval and heartbeating (the
// SDK sends at most one heartbeat per 80 % of the heartbeat timeout, so a long wait costs no
// history events). Past FreeBy it fails with the non-retryable Blocked, naming the Pods.
func (a *Activities) WaitBlockingPods(ctx context.Context, in BlockingPodsInput) error {
	for {
		names, err := a.blockingPods(ctx, in)
		if err != nil {
			var appErr *temporal.ApplicationError
			if errors.As(err, &appErr) && appErr.NonRetryable() {
				return err
			}
			activity.GetLogger(ctx).Info("the node's Pods cannot be listed; the blocking-Pods wait goes on", "node", in.Node, "error", err)
		} else if len(names) == 0 {
			return nil
		} else if !a.Now().Before(in.FreeBy) {
			shown := names[:min(len(names), maxBlockingPodsNamed)]
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"%d Pod(s) matching gates.blockingPods.selector %q still run on node %s at %s: %s; nothing was done to the node (see gates.blockingPods.timeout)",
				len(names), in.Selector, in.Node, in.FreeBy.UTC().Format(time.RFC3339), strings.Join(shown, ", ")), api.ErrBlocked, nil)
		}
		activity.RecordHeartbeat(ctx, len(names))
		if err := sleep(ctx, a.healthPoll()); err != nil {
			return err
		}
	}
}

// blockingPods lists, as namespace/name, the node's running Pods that match the selector.
func (a *Activities) blockingPods(ctx context.Context, in BlockingPodsInput) ([]string, error) {
	pods, err := a.Kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		LabelSelector: in.Selector,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", in.Node).String(),
	})
	if err != nil {
		return nil, kubeError(err, "list", "pods")
	}
	var names []string
	for _, p := range pods.Items {
		// The field selector is the server's filter; the check here keeps the answer right
		// where a server or fake ignores it.
		if p.Spec.NodeName == in.Node && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			names = append(names, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}
