package activities

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A listing held up by a slow API server heartbeats while it waits, so a worker that dies in
// it is noticed by the heartbeat timeout; a quick one sends no beat (no Temporal action).
func TestSlowListingHeartbeatsAndAQuickOneDoesNot(t *testing.T) {
	cs, a := newCluster(testNode("a", nil), testNode("b", nil))
	a.HeartbeatInterval = 20 * time.Millisecond
	beat := make(chan struct{}, 100)
	env := newEnv(a)
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { beat <- struct{}{} })
	slow := true
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if slow {
			select {
			case <-beat: // the API server answers once the activity has beaten
			case <-time.After(10 * time.Second):
				t.Error("no heartbeat while the list was held up for 10 s")
			}
		}
		return false, nil, nil
	})
	_, err := env.ExecuteActivity(a.ListNodes, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "x!=y", Limit: 10})
	require.NoError(t, err)

	slow = false
	a.HeartbeatInterval = time.Hour
	quick := make(chan struct{}, 100)
	env = newEnv(a)
	env.SetOnActivityHeartbeatListener(func(*activity.Info, converter.EncodedValues) { quick <- struct{}{} })
	_, err = env.ExecuteActivity(a.ListNodes, ListNodesInput{Rollout: "kata", TemplateHash: testHash, Selector: "x!=y", Limit: 10})
	require.NoError(t, err)
	require.Empty(t, quick, "a listing shorter than the interval sends no beat")
}
