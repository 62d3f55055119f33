package activities

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

func TestPrepareTemplateInline(t *testing.T) {
	cs, a := newCluster(testNS(testNamespace))
	val, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate})
	require.NoError(t, err)
	var got PreparedTemplate
	require.NoError(t, val.Get(&got))
	require.Equal(t, PreparedTemplate{Template: testTemplate, Hash: jobspec.TemplateHash(testTemplate)}, got)
	require.Equal(t, []string{"get namespaces"}, actions(cs))
}

func TestPrepareTemplateFromConfigMap(t *testing.T) {
	for _, tc := range []struct {
		name string
		ref  api.TemplateRef
		cm   *corev1.ConfigMap
	}{{
		name: "defaults to the rollout namespace and job.yaml",
		ref:  api.TemplateRef{Name: "kata-job"},
		cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kata-job", Namespace: testNamespace},
			Data: map[string]string{"job.yaml": testTemplate}},
	}, {
		name: "named namespace and key",
		ref:  api.TemplateRef{Namespace: "templates", Name: "kata-job", Key: "install.yaml"},
		cm: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kata-job", Namespace: "templates"},
			Data: map[string]string{"install.yaml": testTemplate}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cs, a := newCluster(testNS(testNamespace), tc.cm)
			val, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, TemplateRef: &tc.ref})
			require.NoError(t, err)
			var got PreparedTemplate
			require.NoError(t, val.Get(&got))
			require.Equal(t, testTemplate, got.Template)
			require.Equal(t, jobspec.TemplateHash(testTemplate), got.Hash)
			require.Equal(t, []string{"get namespaces", "get configmaps"}, actions(cs))
		})
	}
}

func TestPrepareTemplateInvalid(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kata-job", Namespace: testNamespace},
		Data: map[string]string{"other.yaml": testTemplate}}
	for _, tc := range []struct {
		name     string
		in       PrepareTemplateInput
		wantText []string
	}{
		{"namespace missing", PrepareTemplateInput{Namespace: "nope", Template: testTemplate},
			[]string{"namespace", `"nope"`, "create it"}},
		{"configmap missing", PrepareTemplateInput{Namespace: testNamespace, TemplateRef: &api.TemplateRef{Name: "absent"}},
			[]string{"jobTemplateRef", testNamespace + "/absent", `"job.yaml"`}},
		{"key missing", PrepareTemplateInput{Namespace: testNamespace, TemplateRef: &api.TemplateRef{Name: "kata-job"}},
			[]string{"jobTemplateRef", testNamespace + "/kata-job", `"job.yaml"`}},
		{"not a Job", PrepareTemplateInput{Namespace: testNamespace, Template: "apiVersion: v1\nkind: Pod\n"},
			[]string{"jobTemplate"}},
		{"both inline and ref", PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate, TemplateRef: &api.TemplateRef{Name: "kata-job"}},
			[]string{"jobTemplate", "exactly one"}},
		{"neither", PrepareTemplateInput{Namespace: testNamespace}, []string{"jobTemplate", "exactly one"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := newCluster(testNS(testNamespace), cm)
			_, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, tc.in)
			appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
			for _, want := range tc.wantText {
				require.Contains(t, appErr.Error(), want)
			}
		})
	}
}

func TestPrepareTemplateReportsParseError(t *testing.T) {
	_, a := newCluster(testNS(testNamespace))
	bad := "apiVersion: v1\nkind: Pod\n"
	_, parseErr := jobspec.ParseTemplate(bad)
	var fieldErr *api.FieldError
	require.True(t, errors.As(parseErr, &fieldErr))
	_, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: bad})
	appErr := requireAppError(t, err, api.ErrInvalidRequest, true)
	require.Contains(t, appErr.Error(), fieldErr.Error())
}

func TestPrepareTemplateForbiddenIsNotRetried(t *testing.T) {
	cs, a := newCluster()
	failOn(cs, "get", "namespaces", forbidden("namespaces"))
	_, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate})
	appErr := requireAppError(t, err, api.ErrForbidden, true)
	require.Contains(t, appErr.Error(), "get")
	require.Contains(t, appErr.Error(), "namespace")
	require.Contains(t, appErr.Error(), "grant")
}

func TestPrepareTemplateServerErrorIsRetried(t *testing.T) {
	cs, a := newCluster()
	failOn(cs, "get", "namespaces", apierrors.NewInternalError(errors.New("etcd leader changed")))
	_, err := newEnv(a).ExecuteActivity(a.PrepareTemplate, PrepareTemplateInput{Namespace: testNamespace, Template: testTemplate})
	requireAppError(t, err, "", false)
}

func TestKubeErrorClasses(t *testing.T) {
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		name         string
		err          error
		wantType     string // "" for a plain, retryable error
		nonRetryable bool
	}{
		{"forbidden", apierrors.NewForbidden(gr, "j", errors.New("rbac")), api.ErrForbidden, true},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "j", nil), api.ErrInvalidRequest, true},
		{"bad request", apierrors.NewBadRequest("bad"), api.ErrInvalidRequest, true},
		{"internal", apierrors.NewInternalError(errors.New("boom")), "", false},
		{"timeout", apierrors.NewServerTimeout(gr, "create", 1), "", false},
		{"conflict", apierrors.NewConflict(gr, "j", errors.New("changed")), "", false},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), "", false},
		{"unavailable", apierrors.NewServiceUnavailable("later"), "", false},
		// 403s that are not RBAC, and admission refusals with other codes.
		{"quota exceeded", apierrors.NewForbidden(gr, "j", errors.New("exceeded quota: compute, requested: pods=1, used: pods=10, limited: pods=10")),
			api.ErrQuotaExceeded, false},
		{"quota needs requests", apierrors.NewForbidden(gr, "j", errors.New("failed quota: compute: must specify limits.cpu")), api.ErrQuotaExceeded, true},
		{"webhook denied", apierrors.NewForbidden(gr, "j", errors.New(`admission webhook "policy.example.com" denied the request: no GPU Jobs on Fridays`)),
			api.ErrAdmissionDenied, true},
		{"webhook denied with 400", apierrors.NewBadRequest(`admission webhook "policy.example.com" denied the request: image not signed`),
			api.ErrAdmissionDenied, true},
		{"admission policy denied", apierrors.NewInvalid(schema.GroupKind{Group: "batch", Kind: "Job"}, "j", field.ErrorList{
			field.Invalid(field.NewPath(""), "j", "ValidatingAdmissionPolicy 'no-privileged' with binding 'all' denied request: privileged")}),
			api.ErrAdmissionDenied, true},
		// A webhook that cannot be called is a 500 and may come back: retried, but typed.
		{"webhook unreachable", apierrors.NewInternalError(errors.New(`failed calling webhook "policy.example.com": failed to call webhook: ` +
			`Post "https://policy.example.svc:443/validate": dial tcp 10.0.0.9:443: connect: connection refused`)),
			api.ErrAdmissionUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := kubeError(tc.err, "create", "jobs")
			if tc.wantType == "" {
				var appErr interface{ NonRetryable() bool }
				require.False(t, errors.As(err, &appErr), "plain errors are retried by the activity policy")
				require.ErrorIs(t, err, tc.err)
				return
			}
			requireAppError(t, err, tc.wantType, tc.nonRetryable)
		})
	}
	require.NoError(t, kubeError(nil, "get", "nodes"))
}

// requireBackgroundDelete checks that the Job was deleted with Background propagation, which
// takes its Pods too, and a UID precondition.
func requireBackgroundDelete(t *testing.T, cs *fake.Clientset, name string) {
	t.Helper()
	requireDelete(t, cs, name, metav1.DeletePropagationBackground)
}

// requireDelete checks that the Job was deleted with the given propagation and a UID
// precondition (never a namesake made after ours went).
func requireDelete(t *testing.T, cs *fake.Clientset, name string, policy metav1.DeletionPropagation) {
	t.Helper()
	for _, act := range cs.Actions() {
		del, ok := act.(k8stesting.DeleteActionImpl)
		if !ok || act.GetResource().Resource != "jobs" || del.Name != name {
			continue
		}
		require.NotNil(t, del.DeleteOptions.PropagationPolicy)
		require.Equal(t, policy, *del.DeleteOptions.PropagationPolicy)
		require.NotNil(t, del.DeleteOptions.Preconditions)
		require.Equal(t, types.UID("uid-"+name), *del.DeleteOptions.Preconditions.UID)
		return
	}
	t.Fatalf("job %s was not deleted; actions: %v", name, actions(cs))
}

// TestReasonForError: whatever error an activity ends with, the node's reason is a word of our
// documented list, never the Go type name the SDK gives a plain error ("wrapError").
func TestReasonForError(t *testing.T) {
	fail := func(err error) error {
		cs, a := newCluster(testNode("node-a", nil))
		failOn(cs, "create", "jobs", err)
		_, actErr := createJob(t, a, testRequest("node-a"))
		require.Error(t, actErr)
		return actErr
	}
	gr := schema.GroupResource{Group: "batch", Resource: "jobs"}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"RBAC", forbidden("jobs"), api.ErrForbidden},
		{"quota", apierrors.NewForbidden(gr, "j", errors.New("exceeded quota: compute")), api.ErrQuotaExceeded},
		{"webhook denied", apierrors.NewForbidden(gr, "j", errors.New(`admission webhook "w" denied the request: no`)), api.ErrAdmissionDenied},
		{"webhook unreachable", apierrors.NewInternalError(errors.New(`failed calling webhook "w": connection refused`)), api.ErrAdmissionUnavailable},
		{"server error", apierrors.NewInternalError(errors.New("etcdserver: request timed out")), api.ReasonAPIError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fail(tc.err)
			require.Equal(t, tc.want, ReasonForError(got), "error: %v", got)
			var appErr *temporal.ApplicationError
			require.True(t, errors.As(got, &appErr))
			if tc.want != api.ReasonAPIError {
				require.Equal(t, tc.want, appErr.Type(), "the ApplicationError itself carries the word")
			}
		})
	}
	require.Equal(t, api.ReasonActivityTimeout, ReasonForError(temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)))
	require.Equal(t, api.ReasonAPIError, ReasonForError(errors.New("anything")))
	require.Equal(t, api.ReasonAPIError, ReasonForError(temporal.NewApplicationError("x", "SomeoneElsesType")))
}
