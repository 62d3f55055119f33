package activities

import (
	"errors"

	"go.temporal.io/sdk/temporal"
)

// ReasonForError is a stand-in until the outcome-words change lands (delete on merge).
func ReasonForError(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		for _, t := range NonRetryableErrors {
			if appErr.Type() == t {
				return t
			}
		}
	}
	return "APIError"
}
