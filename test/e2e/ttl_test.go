//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// TestFaultTTLRemovesAFinishedJobWhileTheWorkerIsDown: the template's ttlSecondsAfterFinished is
// 0, so the TTL controller deletes the Job the moment it completes, and no worker watches then.
// The outcome must not be lost: our finalizer keeps the finished Job until the worker is back
// and FinalizeJob has recorded `succeeded`; then the Job goes.
func TestFaultTTLRemovesAFinishedJobWhileTheWorkerIsDown(t *testing.T) {
	queue, ws := ownWorkers(t, 1)
	f := NewFleet(t, 1)
	node := f.Nodes[0]
	req := f.Request("ttl-zero", 8*time.Second)
	req.JobTemplate = strings.Replace(req.JobTemplate, "  backoffLimit: 0\n", "  backoffLimit: 0\n  ttlSecondsAfterFinished: 0\n", 1)
	require.Contains(t, req.JobTemplate, "ttlSecondsAfterFinished: 0")
	run := StartOn(t, req, queue)

	ctx := context.Background()
	var job batchv1.Job
	waitFor(t, 60*time.Second, "the node's Pod to run", func() bool {
		jobs := f.Jobs(t, req.Name)[node]
		if len(jobs) != 1 {
			return false
		}
		job = jobs[0]
		pods, err := stack.Kube.CoreV1().Pods(f.Namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job.Name})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodRunning
	})
	ws[0].Kill()

	// While no worker runs, the Job completes and its TTL deletes it.
	waitFor(t, 90*time.Second, "the Job to complete and its TTL to delete it", func() bool {
		got, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true // without our finalizer it is simply gone
		}
		return err == nil && got.DeletionTimestamp != nil
	})
	if held, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{}); err == nil {
		require.Contains(t, held.Finalizers, "noderollout.io/outcome", "our finalizer holds the deleted Job")
		require.True(t, slices.ContainsFunc(held.Status.Conditions, func(c batchv1.JobCondition) bool {
			return c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue
		}), "the Job completed before its TTL deleted it: %+v", held.Status)
	}

	restarted, err := StartWorker(ws[0].Name+"-back", "--task-queue", queue)
	require.NoError(t, err)
	defer func() { _ = restarted.Stop() }()

	res, err := Result(t, run)
	require.NoError(t, err, "the rollout succeeds: %+v", res)
	require.Equal(t, 1, res.Counts.Succeeded, "%+v", res)
	require.Equal(t, jobspec.NodeMarker(res.TemplateHash, string(api.OutcomeSucceeded)), f.Markers(t, req.Name)[node])
	waitFor(t, 30*time.Second, "the finalized Job to go", func() bool {
		_, err := stack.Kube.BatchV1().Jobs(f.Namespace).Get(ctx, job.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}
