package main

import (
	"fmt"
	"io"
	"os"
	"os/user"

	"github.com/noderollout/noderollout/api"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
)

// requester is who starts the rollout as far as this starter can tell: user@host. It is a claim,
// not an authentication: Temporal's authorization decides who may start workflows at all.
func requester() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = fmt.Sprintf("uid-%d", os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return name
	}
	return name + "@" + host
}

// requesterMemo is the memo every rollout this starter begins carries: the requester and, with
// --reason, why.
func (a *app) requesterMemo() map[string]any {
	memo := map[string]any{api.MemoRequester: requester()}
	if a.cmd != nil && a.cmd.Flags().Lookup("reason") != nil {
		if reason := a.flagString("reason"); reason != "" {
			memo[api.MemoReason] = reason
		}
	}
	return memo
}

// searchAttributes tags the rollout with those of RolloutName and RolloutRequester that the
// namespace has registered; without them the rollout still runs, it just cannot be searched.
func (a *app) searchAttributes(name string) temporal.SearchAttributes {
	resp, err := a.tc.OperatorService().ListSearchAttributes(a.ctx, &operatorservice.ListSearchAttributesRequest{Namespace: a.cfg.TemporalNamespace})
	if err != nil {
		return temporal.SearchAttributes{}
	}
	registered := resp.GetCustomAttributes()
	var updates []temporal.SearchAttributeUpdate
	if _, ok := registered[api.SearchAttributeRolloutName]; ok {
		updates = append(updates, temporal.NewSearchAttributeKeyKeyword(api.SearchAttributeRolloutName).ValueSet(name))
	}
	if _, ok := registered[api.SearchAttributeRequester]; ok {
		updates = append(updates, temporal.NewSearchAttributeKeyKeyword(api.SearchAttributeRequester).ValueSet(requester()))
	}
	return temporal.NewSearchAttributes(updates...)
}

// memoString reads one string from a workflow's memo; empty when absent.
func memoString(memo *commonpb.Memo, key string) string {
	payload, ok := memo.GetFields()[key]
	if !ok {
		return ""
	}
	var s string
	if converter.GetDefaultDataConverter().FromPayload(payload, &s) != nil {
		return ""
	}
	return s
}

// withRequester adds the memo's requester and reason to a status view.
func withRequester(v rolloutView, memo *commonpb.Memo) rolloutView {
	v.Requester = memoString(memo, api.MemoRequester)
	v.Reason = memoString(memo, api.MemoReason)
	return v
}

func printRequester(w io.Writer, v rolloutView) {
	if v.Requester == "" {
		return
	}
	line := "requested by " + v.Requester
	if v.Reason != "" {
		line += ": " + v.Reason
	}
	fmt.Fprintln(w, line)
}
