package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A mistyped worker flag gets a did-you-mean naming the flag it was probably meant to be.
func TestWorkerMistypedFlagGetsAHint(t *testing.T) {
	_, _, err := parseFlags([]string{"--kube-qsp", "20"})
	require.ErrorContains(t, err, `unknown flag: --kube-qsp; did you mean "--kube-qps"?`)
	fs, _, err := parseFlags([]string{"--kube-qps", "20"})
	require.NoError(t, err)
	require.Equal(t, "20", fs.Lookup("kube-qps").Value.String())
}
