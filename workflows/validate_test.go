package workflows

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

func requireInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	require.True(t, errors.As(err, &appErr), "want InvalidRequest naming %q, got %v", field, err)
	require.Equal(t, api.ErrInvalidRequest, appErr.Type())
	require.True(t, appErr.NonRetryable())
	require.Contains(t, appErr.Message(), field)
}

// A request typed into the Temporal UI with a misspelt nested field fails naming the field
// by its path and the field it was probably meant to be, as the starter does.
func TestRolloutNamesAMisspeltNestedFieldWithAHint(t *testing.T) {
	env, _ := newTestEnv(nil)
	env.ExecuteWorkflow(api.RolloutWorkflow, json.RawMessage(
		`{"name":"demo","nodes":["n1"],"jobTemplate":"t","batch":{"inital":1},"zzz":1}`))
	err := env.GetWorkflowError()
	requireInvalid(t, err, `batch.inital: unknown field; did you mean "batch.initial"?`)
	requireInvalid(t, err, `zzz: unknown field: remove it`)
}
