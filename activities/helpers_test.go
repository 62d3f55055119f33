package activities

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/noderollout/noderollout/activities/jobspec"
)

const testNamespace = "kube-system"

const testTemplate = `apiVersion: batch/v1
kind: Job
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: install
        image: busybox
        args: ["echo", "{{node}}"]
`

// t0 is the tests' wall clock: Jobs are created at it and a.Now starts there.
var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newEnv(a *Activities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return env
}

// execute runs one activity of a in a test environment and decodes its result into a T.
func execute[T any](t *testing.T, a *Activities, activity, in any) (T, error) {
	t.Helper()
	var out T
	val, err := newEnv(a).ExecuteActivity(activity, in)
	if err != nil {
		return out, err
	}
	require.NoError(t, val.Get(&out))
	return out, nil
}

// newCluster is the activity tests' fake cluster: a fake clientset holding objs, where a
// created Job gets what the API server stamps on it (stampCreatedJobs), and the Activities on
// it with the tests' clock (newActivities).
func newCluster(objs ...runtime.Object) (*fake.Clientset, *Activities) {
	cs := fake.NewClientset(objs...)
	stampCreatedJobs(cs)
	return cs, newActivities(cs)
}

// newActivities is New with a fixed clock.
func newActivities(cs *fake.Clientset) *Activities {
	a := New(cs)
	a.Now = func() time.Time { return t0 }
	return a
}

func testNode(name string, annotations map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name, UID: types.UID("uid-node-" + name), Annotations: annotations,
	}}
}

func testNS(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func testRequest(node string) JobRequest {
	return JobRequest{
		Rollout:      "kata",
		Namespace:    testNamespace,
		Node:         node,
		RunID:        "run-1",
		Template:     testTemplate,
		TemplateHash: jobspec.TemplateHash(testTemplate),
		FirstTask:    true,
	}
}

// ourJob is the Job CreateJob makes for req, as the API server would return it.
func ourJob(t *testing.T, req JobRequest) *batchv1.Job {
	t.Helper()
	job, err := jobspec.Build(req.Template, jobspec.JobParams{
		Rollout: req.Rollout, Namespace: req.Namespace, Node: req.Node, RunID: req.RunID, TemplateHash: req.TemplateHash,
	})
	require.NoError(t, err)
	job.UID = types.UID("uid-" + job.Name)
	job.CreationTimestamp = metav1.NewTime(t0)
	return job
}

func refOf(job *batchv1.Job, node string) JobRef {
	return JobRef{Namespace: job.Namespace, Name: job.Name, UID: string(job.UID), Node: node, CreatedAt: job.CreationTimestamp.Time}
}

// stampCreatedJobs makes the fake fill in what the API server sets on create.
func stampCreatedJobs(cs *fake.Clientset) {
	cs.PrependReactor("create", "jobs", func(action k8stesting.Action) (bool, runtime.Object, error) {
		job := action.(k8stesting.CreateAction).GetObject().(*batchv1.Job)
		job.UID = types.UID("uid-" + job.Name)
		job.CreationTimestamp = metav1.NewTime(t0)
		return false, nil, nil
	})
}

// actions lists the requests made, as "verb resource[/subresource]", leaving out the
// informer's list and watch of Jobs.
func actions(cs *fake.Clientset) []string {
	var out []string
	for _, act := range cs.Actions() {
		res := act.GetResource().Resource
		if res == "jobs" && (act.GetVerb() == "list" || act.GetVerb() == "watch") {
			continue
		}
		if sub := act.GetSubresource(); sub != "" {
			res += "/" + sub
		}
		out = append(out, act.GetVerb()+" "+res)
	}
	return out
}

func countActions(cs *fake.Clientset, verb, resource string) int {
	n := 0
	for _, act := range actions(cs) {
		if act == verb+" "+resource {
			n++
		}
	}
	return n
}

// requireAppError checks the error Temporal sees: its type and whether it may be retried.
func requireAppError(t *testing.T, err error, wantType string, nonRetryable bool) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "not an ApplicationError: %v", err)
	if wantType != "" {
		require.Equal(t, wantType, appErr.Type(), "error: %v", err)
	}
	require.Equal(t, nonRetryable, appErr.NonRetryable(), "error: %v", err)
	return appErr
}

func forbidden(resource string) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: resource}, "x",
		fmt.Errorf("User \"system:serviceaccount:noderollout:worker\" cannot do it"))
}

// failOn makes every verb request on resource fail with err.
func failOn(cs *fake.Clientset, verb, resource string, err error) {
	cs.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
}
