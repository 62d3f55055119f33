package api

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTaintsTakesRespectOrIgnore(t *testing.T) {
	for _, v := range []string{"", TaintsRespect, TaintsIgnore} {
		req := validRequest()
		req.Taints = v
		require.Empty(t, req.Problems(), v)
		require.Equal(t, v == TaintsIgnore, req.Settings().IgnoreTaints, v)
	}
	req := validRequest()
	req.Taints = "skip"
	ps := req.Problems()
	require.Len(t, ps, 1)
	require.Equal(t, "taints", ps[0].Field)
	require.Contains(t, ps[0].Fix, "ignore")
}
