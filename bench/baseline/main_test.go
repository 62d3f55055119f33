package main

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/noderollout/noderollout/bench/nodejob"
	"github.com/noderollout/noderollout/internal/testjob"
)

var testTemplate = testjob.YAML("", "work")

// calls runs one node's create and finish and returns the requests made, as "verb resource".
func calls(t *testing.T, minimal, succeeded bool) []string {
	t.Helper()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
	d := newDispatcher(kube, options{Flags: nodejob.Flags{Namespace: "ns", Run: "r1"}, minimal: minimal, parallelism: 1}, testTemplate)
	ctx := context.Background()
	d.slots <- struct{}{}
	d.wg.Add(1)
	d.create(ctx, "n1")
	_, err := kube.CoreV1().Pods("ns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "bl-n1-x", Namespace: "ns", Labels: map[string]string{"batch.kubernetes.io/job-name": "bl-n1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	kube.ClearActions()
	d.finish(ctx, "bl-n1", "n1", succeeded)
	var got []string
	for _, a := range kube.Actions() {
		got = append(got, a.GetVerb()+" "+a.GetResource().Resource+subresource(a))
	}
	slices.Sort(got)
	return got
}

func subresource(a k8stesting.Action) string {
	if a.GetSubresource() != "" {
		return "/" + a.GetSubresource()
	}
	return ""
}

func TestFullBaselineRecordsWhatNoderolloutRecords(t *testing.T) {
	assert.Equal(t, []string{"create events", "delete jobs", "patch nodes"}, calls(t, false, true))
	assert.Equal(t, []string{"create events", "delete jobs", "get pods/log", "list pods", "patch nodes"}, calls(t, false, false),
		"a failed Job's Pod and log tail are read")
}

func TestMinimalBaselineOnlyDeletes(t *testing.T) {
	assert.Equal(t, []string{"delete jobs"}, calls(t, true, false))
}

func TestFullBaselineReadsTheNodeWithTheCreate(t *testing.T) {
	for _, minimal := range []bool{false, true} {
		kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}})
		d := newDispatcher(kube, options{Flags: nodejob.Flags{Namespace: "ns", Run: "r1"}, minimal: minimal, parallelism: 1}, testTemplate)
		d.create(context.Background(), "n1")
		var got []string
		for _, a := range kube.Actions() {
			got = append(got, a.GetVerb()+" "+a.GetResource().Resource)
		}
		slices.Sort(got)
		if minimal {
			assert.Equal(t, []string{"create jobs"}, got)
		} else {
			assert.Equal(t, []string{"create jobs", "get nodes"}, got)
		}
	}
}
