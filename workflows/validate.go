package workflows

import (
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/api"
)

// invalidRequest is the non-retryable InvalidRequest naming every problem of a request, which
// it carries as details (the starter and the UI read them).
func invalidRequest(what string, problems []*api.FieldError) error {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = p.Error()
	}
	return temporal.NewNonRetryableApplicationError(what+strings.Join(msgs, "; "), api.ErrInvalidRequest, nil, problems)
}
