package floor

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/noderollout/noderollout/bench/nodejob"
	"github.com/noderollout/noderollout/internal/testjob"
)

func newEnv(t *testing.T, failing ...string) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Rollout, workflow.RegisterOptions{Name: RolloutWorkflow})
	env.RegisterWorkflowWithOptions(Node, workflow.RegisterOptions{Name: NodeWorkflow})
	env.RegisterActivityWithOptions((&Activities{}).RunJob, activity.RegisterOptions{Name: RunJobActivity})
	env.OnActivity(RunJobActivity, mock.Anything, mock.Anything).Return(func(_ context.Context, node string) (NodeResult, error) {
		return NodeResult{Succeeded: !slices.Contains(failing, node)}, nil
	})
	return env
}

func TestRolloutRunsOneChildPerNodeAndAtMostPAtOnce(t *testing.T) {
	env := newEnv(t, "c")
	var started []string
	inFlight, most := 0, 0
	env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		started = append(started, info.WorkflowExecution.ID)
		inFlight++
		most = max(most, inFlight)
	})
	env.SetOnChildWorkflowCompletedListener(func(*workflow.Info, converter.EncodedValue, error) { inFlight-- })

	env.ExecuteWorkflow(RolloutWorkflow, Request{Name: "f", Nodes: []string{"a", "b", "c", "d", "e"}, Parallelism: 2, JobSeconds: 0.01})

	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res Result
	require.NoError(t, env.GetWorkflowResult(&res))
	assert.Equal(t, Result{Succeeded: 4, Failed: 1}, res, "node c's Job failed")
	// Two children that start in one workflow task reach the listener in either order.
	assert.ElementsMatch(t, []string{"floor-node-a", "floor-node-b", "floor-node-c", "floor-node-d", "floor-node-e"}, started,
		"IDs from the node alone: every run over a node reuses its ID, as noderollout's node workflows do")
	assert.Equal(t, 2, most, "children in flight at once")
}

func TestRolloutRefusesParallelismBelowOne(t *testing.T) {
	env := newEnv(t)
	env.ExecuteWorkflow(RolloutWorkflow, Request{Name: "f", Nodes: []string{"a"}, Parallelism: 0, JobSeconds: 0.01})
	require.Error(t, env.GetWorkflowError())
	assert.Contains(t, env.GetWorkflowError().Error(), "parallelism 0")
}

var testTemplate = testjob.YAML("", "work")

// TestRunJobMakesTheBaselinesCalls: the local activity's requests are the baseline's for a node
// (bench/baseline's TestFullBaselineRecordsWhatNoderolloutRecords and
// TestFullBaselineReadsTheNodeWithTheCreate): the Job's create beside a Node read, then the
// outcome annotation, the Event and the delete, and for a failed Job its Pod and log tail.
func TestRunJobMakesTheBaselinesCalls(t *testing.T) {
	for _, succeeded := range []bool{true, false} {
		kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fl-n1-x", Namespace: "ns",
				Labels: map[string]string{batchv1.JobNameLabel: "fl-n1"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "work"}}}})
		ends := nodejob.NewEnds()
		a := &Activities{Ends: ends, Calls: &nodejob.Calls{Kube: kube, Namespace: "ns", Run: "r1", Template: testTemplate, Prefix: "fl-"}}
		condition := batchv1.JobComplete
		if !succeeded {
			condition = batchv1.JobFailed
		}
		go func() {
			for {
				job, err := kube.BatchV1().Jobs("ns").Get(context.Background(), "fl-n1", metav1.GetOptions{})
				if err == nil {
					assert.Equal(t, "n1", job.Spec.Template.Spec.NodeName)
					assert.Equal(t, "r1", job.Labels[nodejob.LabelRun])
					job.Status.Conditions = []batchv1.JobCondition{{Type: condition, Status: corev1.ConditionTrue}}
					ends.Observe(job)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := a.RunJob(ctx, "n1")
		cancel()
		require.NoError(t, err)
		assert.Equal(t, succeeded, out.Succeeded)
		var got []string
		for _, act := range kube.Actions() {
			if act.GetVerb() == "get" && act.GetResource().Resource == "jobs" {
				continue // the test's own poll
			}
			call := act.GetVerb() + " " + act.GetResource().Resource
			if act.GetSubresource() != "" {
				call += "/" + act.GetSubresource()
			}
			got = append(got, call)
		}
		slices.Sort(got)
		want := []string{"create events", "create jobs", "delete jobs", "get nodes", "patch nodes"}
		if !succeeded {
			want = []string{"create events", "create jobs", "delete jobs", "get nodes", "get pods/log", "list pods", "patch nodes"}
		}
		assert.Equal(t, want, got, "succeeded %t", succeeded)
	}
}

func TestEndsHandsAJobsEndToItsWaitWhicheverComesFirst(t *testing.T) {
	ends := nodejob.NewEnds()
	done := func(name string, ok bool) *batchv1.Job {
		c := batchv1.JobComplete
		if !ok {
			c = batchv1.JobFailed
		}
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: c, Status: corev1.ConditionTrue}}}}
	}
	ends.Observe(done("early", false))
	succeeded, err := ends.Wait(context.Background(), "early")
	require.NoError(t, err)
	assert.False(t, succeeded)

	go func() {
		time.Sleep(10 * time.Millisecond)
		ends.Observe(&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "late"}}) // running: not an end
		ends.Observe(done("late", true))
	}()
	succeeded, err = ends.Wait(context.Background(), "late")
	require.NoError(t, err)
	assert.True(t, succeeded)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = ends.Wait(ctx, "never")
	assert.ErrorIs(t, err, context.Canceled)
}
