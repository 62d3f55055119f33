package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPolicyFileAndJobNamespaces(t *testing.T) {
	c, err := Load(NewFlagSet("worker", true), []string{"--policy-file", "/etc/p.yaml"},
		[]string{"NODEROLLOUT_JOB_NAMESPACES=maint, apps,"})
	require.NoError(t, err)
	require.Equal(t, "/etc/p.yaml", c.PolicyFile)
	require.Equal(t, []string{"maint", "apps"}, c.JobNamespaces)
	c, err = Load(NewFlagSet("worker", true), nil, nil)
	require.NoError(t, err)
	require.Empty(t, c.PolicyFile)
	require.Nil(t, c.JobNamespaces, "default: the whole cluster")
}
