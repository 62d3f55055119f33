package workflows

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"
)

// Who started a rollout. The starter puts it in the workflow's memo (and, where the namespace
// has it, the RolloutRequester search attribute); the workflow hands it to every Job and Node
// marker. It is the starting client's claim: Temporal's own authorization decides who may start.
const (
	MemoRequester = "requester"
	MemoReason    = "reason"
	// SearchAttributeRequester (Keyword) is set by the starter when the namespace has it.
	SearchAttributeRequester = "RolloutRequester"
)

// requesterOf reads the requester from the run's memo, which Temporal carries across
// continue-as-new; empty when the rollout was started without one (CLI, UI).
func requesterOf(ctx workflow.Context) string {
	memo := workflow.GetInfo(ctx).Memo
	if memo == nil {
		return ""
	}
	payload, ok := memo.GetFields()[MemoRequester]
	if !ok {
		return ""
	}
	var requester string
	if err := converter.GetDefaultDataConverter().FromPayload(payload, &requester); err != nil {
		workflow.GetLogger(ctx).Warn("the memo's requester is not a string; recording none", "error", err)
		return ""
	}
	return requester
}
