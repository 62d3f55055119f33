package config

import (
	"os"
	"path/filepath"
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

// job-namespaces written as a YAML list in a config file (the natural way in YAML) means the
// same as the comma-separated string.
func TestJobNamespacesAsAListInAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "worker.yaml")
	require.NoError(t, os.WriteFile(file, []byte("job-namespaces: [maint, apps]\n"), 0o600))
	c, err := Load(NewFlagSet("worker", true), []string{"--config", file}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"maint", "apps"}, c.JobNamespaces)
	c, err = Load(NewFlagSet("worker", true), []string{"--config", file, "--job-namespaces", "x"}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, c.JobNamespaces, "the flag still wins over the file")
}
