package main

import (
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func TestStatusViewCarriesTheRequesterFromTheMemo(t *testing.T) {
	dc := converter.GetDefaultDataConverter()
	who, _ := dc.ToPayload("alice@laptop")
	why, _ := dc.ToPayload("CVE-2026-1 kernel patch")
	memo := &commonpb.Memo{Fields: map[string]*commonpb.Payload{api.MemoRequester: who, api.MemoReason: why}}
	v := withRequester(runningView("rollout-kata", api.RolloutStatus{Name: "kata"}), memo)
	require.Equal(t, "alice@laptop", v.Requester)
	require.Equal(t, "CVE-2026-1 kernel patch", v.Reason)
	require.Equal(t, "kata", v.Name, "the status itself is unchanged")
	var b strings.Builder
	printRequester(&b, v)
	require.Equal(t, "requested by alice@laptop: CVE-2026-1 kernel patch\n", b.String())

	v = withRequester(runningView("rollout-kata", api.RolloutStatus{Name: "kata"}), nil)
	require.Empty(t, v.Requester, "a rollout started without the starter has none")
}

func TestRequesterIsUserAtHost(t *testing.T) {
	require.Contains(t, requester(), "@")
}
