package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/noderollout/noderollout/api"
	"go.temporal.io/api/serviceerror"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"go.temporal.io/sdk/temporal"
)

// kubeError sorts an API error into what Temporal should do with it. RBAC, quota, admission
// and validation refusals cannot heal by retrying, so they become non-retryable
// ApplicationErrors that say what to fix; an admission webhook that cannot be reached stays
// retryable but typed; everything else (5xx, timeouts, conflicts, throttling, network) stays a
// plain error that the activity retry policy backs off on. verb and resource name the request,
// e.g. ("create", "jobs in namespace kube-system").
func kubeError(err error, verb, resource string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	switch {
	// Admission and quota refusals come as 403 (a webhook may pick another 4xx), so they are
	// told apart from RBAC by what the API server says.
	case admissionDenied(msg):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("admission control refused to %s %s: %v; the webhook or policy named says why", verb, resource, err),
			api.ErrAdmissionDenied, err)
	case apierrors.IsForbidden(err) && quotaMisfit(msg):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("a ResourceQuota refused to %s %s: %v; give the template the requests and limits the quota needs", verb, resource, err),
			api.ErrQuotaExceeded, err)
	case apierrors.IsForbidden(err) && quotaExceeded(msg):
		// A full quota frees as other work ends: retried until the node's deadline, like any
		// passing refusal.
		return temporal.NewApplicationErrorWithCause(
			fmt.Sprintf("a ResourceQuota refused to %s %s (retrying until it has room): %v; raise the quota or lower the template's requests", verb, resource, err),
			api.ErrQuotaExceeded, err)
	case apierrors.IsForbidden(err):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("forbidden to %s %s: %v; grant the worker's ServiceAccount %q on this resource (see deploy/ for the ClusterRole)",
				verb, resource, err, verb),
			api.ErrForbidden, err)
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the API server rejected %s %s: %v", verb, resource, err),
			api.ErrInvalidRequest, err)
	case strings.Contains(msg, "failed calling webhook"):
		return temporal.NewApplicationErrorWithCause(
			fmt.Sprintf("%s %s: an admission webhook could not be reached (retrying): %v", verb, resource, err),
			api.ErrAdmissionUnavailable, err)
	default:
		return fmt.Errorf("%s %s: %w", verb, resource, err)
	}
}

// admissionDenied recognises a webhook's or a ValidatingAdmissionPolicy's refusal.
func admissionDenied(msg string) bool {
	return strings.Contains(msg, "admission webhook") && strings.Contains(msg, "denied the request") ||
		strings.Contains(msg, "ValidatingAdmissionPolicy") && strings.Contains(msg, "denied request")
}

// quotaExceeded recognises the ResourceQuota admission plugin's refusals.
func quotaExceeded(msg string) bool {
	return strings.Contains(msg, "exceeded quota") || strings.Contains(msg, "insufficient quota")
}

// quotaMisfit recognises a quota refusal that waiting cannot cure: the Job lacks the requests
// or limits the quota counts.
func quotaMisfit(msg string) bool {
	return strings.Contains(msg, "failed quota")
}

// ReasonForError turns the error an activity ended with into a reason word of our documented
// list (docs/outcomes.md): our own ApplicationError types pass through; a timeout of the
// activity is ActivityTimeout; anything else, such as the last API error of an activity that
// ran out of retries, is APIError. Never a Go type name.
func ReasonForError(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && slices.Contains(errorTypes, appErr.Type()) {
		return appErr.Type()
	}
	var timeoutErr *temporal.TimeoutError
	if errors.As(err, &timeoutErr) {
		return api.ReasonActivityTimeout
	}
	return api.ReasonAPIError
}

// errorTypes are the ApplicationError types the activities raise.
var errorTypes = append(slices.Clone(NonRetryableErrors), api.ErrAdmissionUnavailable, api.ErrQuotaExceeded)

// invalidRequest is the non-retryable error for a request, or the template it names, that
// cannot work as given. field is the request field to fix, as the user spells it.
func invalidRequest(field, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(
		field+": "+fmt.Sprintf(format, args...), api.ErrInvalidRequest, nil)
}

// templateError reports a template that jobspec refused. Its FieldError already names the
// field (e.g. jobTemplate.spec.template.spec.restartPolicy) and the fix.
func templateError(err error) error {
	var fieldErr *api.FieldError
	if errors.As(err, &fieldErr) {
		return temporal.NewNonRetryableApplicationError(fieldErr.Error(), api.ErrInvalidRequest, nil)
	}
	return invalidRequest("jobTemplate", "%v", err)
}

// temporalOutage says whether err is Temporal down, out of reach or overloaded, which passes
// by itself, rather than a refusal that trying again will not change.
func temporalOutage(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code := status.Code(err)
	var se serviceerror.ServiceError
	if errors.As(err, &se) {
		code = se.Status().Code()
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return true
	}
	return false
}
