package workflows

import (
	"strings"

	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/temporal"
)

// Validate checks the request and returns its settings, or a non-retryable InvalidRequest
// error naming every bad field and how to fix it. It is deterministic: workflows call it.
func Validate(req api.RolloutRequest) (api.Settings, error) {
	return validate(req, false)
}

// validate is Validate for the workflow, which also knows whether this run was continued as
// new: only such a run may carry the internal state of runs from before it had its own type.
func validate(req api.RolloutRequest, continued bool) (api.Settings, error) {
	s, problems := api.Check(req, continued)
	if len(problems) == 0 {
		return s, nil
	}
	return s, invalidRequestError("invalid rollout request: ", problems)
}

// invalidRequestError is the non-retryable InvalidRequest naming every problem, which it
// carries as details.
func invalidRequestError(what string, problems []*api.FieldError) error {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	return temporal.NewNonRetryableApplicationError(what+strings.Join(msgs, "; "), api.ErrInvalidRequest, nil, problems)
}
