package activities

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
)

// The drain heartbeats how many Pods it evicted and how many it still waits for, so starter
// status can say "drain (2 Pods left)".
func TestDrainHeartbeatsThePodsLeft(t *testing.T) {
	e := &evictions{refuse: func(pod string, try int) bool { return pod == "web-1" && try < 3 }}
	a := drainEnv(t, e, tenantPod("web-1", "n1", nil), tenantPod("web-2", "n1", nil), tenantPod("other", "n2", nil))
	env := newEnv(a)
	var mu sync.Mutex
	var beats [][2]int
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var evicted, left int
		if details.Get(&evicted, &left) == nil {
			mu.Lock()
			beats = append(beats, [2]int{evicted, left})
			mu.Unlock()
		}
	})
	_, err := env.ExecuteActivity(a.DrainNode, DrainInput{Node: "n1", Deadline: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	mu.Lock()
	defer mu.Unlock()
	// The SDK sends the first heartbeat at once and holds later ones back; the first says
	// that none was evicted yet and both of the node's Pods are left.
	require.NotEmpty(t, beats)
	require.Equal(t, [2]int{0, 2}, beats[0])
}
