package activities

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes/fake"
)

// In namespaced mode the watcher lists and watches each allowed namespace, never the cluster,
// since the worker's RBAC there is Roles in those namespaces only.
func TestJobWatcherWatchesOnlyTheGivenNamespaces(t *testing.T) {
	inA := testRequest("node-a")
	inA.Namespace = "a"
	inB := testRequest("node-b")
	inB.Namespace = "b"
	jobA, jobB := ourJob(t, inA), ourJob(t, inB)
	cs := fake.NewClientset(jobA, jobB)
	w := NewJobWatcher(cs, "a", "c")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, w.Start(ctx))

	var listed []string
	for _, act := range cs.Actions() {
		if act.GetResource().Resource == "jobs" && act.GetVerb() == "list" {
			listed = append(listed, act.GetNamespace())
		}
	}
	require.ElementsMatch(t, []string{"a", "c"}, listed, "one list per namespace, none cluster-wide")

	sub := w.Subscribe("a", jobA.Name)
	defer sub.Close()
	job, _ := sub.Last()
	require.NotNil(t, job, "a Job in a watched namespace is in the cache")
	other := w.Subscribe("b", jobB.Name)
	defer other.Close()
	job, _ = other.Last()
	require.Nil(t, job, "a Job elsewhere is not")
}
