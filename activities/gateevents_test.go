package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Each node in flight gets one Event per gate change, where `kubectl describe node` finds it
// (the Node's name and UID); a retry makes no second one, a gone node is passed over.
func TestRecordGateEventTellsEachNodeInFlight(t *testing.T) {
	cs, a := newCluster(testNode("n1", nil), testNode("n2", nil))
	in := GateEventInput{Rollout: "driver", Nodes: []string{"n1", "n2", "gone"}, Reason: "up == 0 returned 1 series", Change: 1}
	for range 2 {
		_, err := newEnv(a).ExecuteActivity(a.RecordGateEvent, in)
		require.NoError(t, err)
	}
	in.Open, in.Change, in.Reason = true, 2, "up == 0 returned nothing for 5m0s"
	_, err := newEnv(a).ExecuteActivity(a.RecordGateEvent, in)
	require.NoError(t, err)
	evs, err := cs.CoreV1().Events(EventNamespace).List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	byNode := map[string][]string{}
	for _, e := range evs.Items {
		require.Equal(t, "Node", e.InvolvedObject.Kind)
		require.Equal(t, "uid-node-"+e.InvolvedObject.Name, string(e.InvolvedObject.UID))
		byNode[e.InvolvedObject.Name] = append(byNode[e.InvolvedObject.Name], e.Reason+" "+e.Type)
		if e.Reason == "RolloutGateClosed" {
			require.Contains(t, e.Message, "rollout driver paused by its metric gate: up == 0 returned 1 series")
		}
	}
	want := []string{"RolloutGateClosed " + corev1.EventTypeWarning, "RolloutGateOpened " + corev1.EventTypeNormal}
	require.ElementsMatch(t, want, byNode["n1"])
	require.ElementsMatch(t, want, byNode["n2"])
	require.Len(t, byNode, 2)
}
