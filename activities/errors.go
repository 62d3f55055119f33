package activities

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities/jobspec"
)

// kubeError sorts an API error into what Temporal should do with it. RBAC and validation
// failures cannot heal by retrying, so they become non-retryable ApplicationErrors that say what
// to fix; everything else (5xx, timeouts, conflicts, throttling, network) stays a plain error
// that the activity retry policy backs off on. verb and resource name the request, e.g.
// ("create", "jobs in namespace kube-system").
func kubeError(err error, verb, resource string) error {
	if err == nil {
		return nil
	}
	switch {
	case apierrors.IsForbidden(err):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("forbidden to %s %s: %v; grant the worker's ServiceAccount %q on this resource (see deploy/ for the ClusterRole)",
				verb, resource, err, verb),
			ErrForbidden, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the API server rejected %s %s: %v", verb, resource, err),
			ErrInvalidRequest, err)
	default:
		return fmt.Errorf("%s %s: %w", verb, resource, err)
	}
}

// invalidRequest is the non-retryable error for a request, or the template it names, that
// cannot work as given. field is the request field to fix, as the user spells it.
func invalidRequest(field, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(
		field+": "+fmt.Sprintf(format, args...), ErrInvalidRequest, nil)
}

// templateError reports a template that jobspec refused. Its FieldError already names the
// field (e.g. jobTemplate.spec.template.spec.restartPolicy) and the fix.
func templateError(err error) error {
	var fieldErr *jobspec.FieldError
	if errors.As(err, &fieldErr) {
		return temporal.NewNonRetryableApplicationError(fieldErr.Error(), ErrInvalidRequest, nil)
	}
	return invalidRequest("jobTemplate", "%v", err)
}
