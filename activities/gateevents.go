package activities

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GateEventInput tells the nodes in flight that the rollout's metric gate closed or opened.
type GateEventInput struct {
	Rollout string   `json:"rollout"`
	Nodes   []string `json:"nodes"`
	Open    bool     `json:"open"`
	Reason  string   `json:"reason"`
	// Change numbers the gate's changes, so a retry makes no second Event and the next
	// change makes its own.
	Change int `json:"change"`
}

// RecordGateEvent puts an Event on each node in flight where `kubectl describe node` shows it:
// the rollout paused itself (or went on) while the node's Job ran or soaked. A node that is
// gone is passed over.
func (a *Activities) RecordGateEvent(ctx context.Context, in GateEventInput) error {
	defer keepAlive(ctx, a.HeartbeatInterval)()
	reason, eventType, what := "RolloutGateClosed", corev1.EventTypeWarning, "paused by its metric gate"
	if in.Open {
		reason, eventType, what = "RolloutGateOpened", corev1.EventTypeNormal, "goes on: its metric gate opened"
	}
	msg := fmt.Sprintf("rollout %s %s: %s", in.Rollout, what, in.Reason)
	if len(msg) > maxEventMessage {
		msg = strings.ToValidUTF8(msg[:maxEventMessage], "")
	}
	for _, name := range in.Nodes {
		node, err := a.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return kubeError(err, "get", fmt.Sprintf("node %q", name))
		}
		now := metav1.NewTime(a.Now())
		event := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprintf("%s.%s.gate-%d", name, in.Rollout, in.Change), Namespace: EventNamespace},
			InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID},
			Reason:         reason, Message: msg, Type: eventType,
			Source:         corev1.EventSource{Component: FieldManager},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}
		_, err = a.Kube.CoreV1().Events(EventNamespace).Create(ctx, event, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return kubeError(err, "create", fmt.Sprintf("events in namespace %q", EventNamespace))
		}
	}
	return nil
}
