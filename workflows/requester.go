package workflows

import (
	"github.com/noderollout/noderollout/api"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// requesterOf reads the requester from the run's memo, which Temporal carries across
// continue-as-new; empty when the rollout was started without one (CLI, UI). It is the only
// source: nothing in the request or its template names the requester.
func requesterOf(ctx workflow.Context) string {
	return memoString(ctx, api.MemoRequester)
}

// memoString reads a string the run's memo holds under key; empty when it holds none.
func memoString(ctx workflow.Context, key string) string {
	memo := workflow.GetInfo(ctx).Memo
	if memo == nil {
		return ""
	}
	payload, ok := memo.GetFields()[key]
	if !ok {
		return ""
	}
	var value string
	if err := converter.GetDefaultDataConverter().FromPayload(payload, &value); err != nil {
		workflow.GetLogger(ctx).Warn("a memo field is not a string; recording none", "field", key, "error", err)
		return ""
	}
	return value
}

// requestMemo is the requester and reason of the run's memo, for the workflows it starts on
// its behalf (a fleet's cluster rollouts); nil when it has neither.
func requestMemo(ctx workflow.Context) map[string]any {
	var memo map[string]any
	for _, key := range []string{api.MemoRequester, api.MemoReason} {
		if v := memoString(ctx, key); v != "" {
			if memo == nil {
				memo = map[string]any{}
			}
			memo[key] = v
		}
	}
	return memo
}
