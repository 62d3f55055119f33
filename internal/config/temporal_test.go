package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Temporal setting given explicitly and unusable is an error; before, each was ignored
// silently and the defaults used.
func TestExplicitTemporalSettingsThatCannotBeUsedAreErrors(t *testing.T) {
	_, err := Load(NewFlagSet("starter", false), nil, []string{"TEMPORAL_CONFIG_FILE=/nonexistent/temporal.toml"})
	require.ErrorContains(t, err, "TEMPORAL_CONFIG_FILE")
	require.ErrorContains(t, err, "/nonexistent/temporal.toml")

	_, err = Load(NewFlagSet("starter", false), nil, []string{"TEMPORAL_TLS=maybe"})
	require.ErrorContains(t, err, `TEMPORAL_TLS="maybe"`)
	require.ErrorContains(t, err, "true or false")

	toml := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(toml, []byte("[profile.default]\nadress = \"t:7233\"\n"), 0o600))
	_, err = Load(NewFlagSet("starter", false), nil, []string{"TEMPORAL_CONFIG_FILE=" + toml})
	require.ErrorContains(t, err, "profile.default.adress")
	require.ErrorContains(t, err, `did you mean "address"?`)

	// The user's own temporal.toml, found where the Temporal CLI keeps it, is read the same.
	home := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".config", "temporal"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".config", "temporal", "temporal.toml"), []byte("[profile.default]\nnamespce = \"x\"\n"), 0o600))
	_, err = Load(NewFlagSet("starter", false), nil, []string{"HOME=" + home})
	require.ErrorContains(t, err, "profile.default.namespce")

	// A typo in a profile not in use is no reason to stop.
	require.NoError(t, os.WriteFile(toml, []byte("[profile.default]\naddress = \"t:7233\"\n[profile.other]\nadress = \"x\"\n"), 0o600))
	c, err := Load(NewFlagSet("starter", false), nil, []string{"TEMPORAL_CONFIG_FILE=" + toml})
	require.NoError(t, err)
	require.Equal(t, "t:7233", c.TemporalAddress)
}

// The Temporal CLI's flags mean the same here: --address, --namespace/-n, --profile.
func TestTemporalCLIFlags(t *testing.T) {
	toml := filepath.Join(t.TempDir(), "temporal.toml")
	require.NoError(t, os.WriteFile(toml, []byte("[profile.default]\naddress = \"d:7233\"\n[profile.prod]\naddress = \"p:7233\"\nnamespace = \"prod\"\n"), 0o600))
	env := []string{"TEMPORAL_CONFIG_FILE=" + toml}
	c, err := Load(NewFlagSet("starter", false), []string{"--profile", "prod"}, env)
	require.NoError(t, err)
	require.Equal(t, "p:7233", c.TemporalAddress)
	require.Equal(t, "prod", c.TemporalNamespace)

	c, err = Load(NewFlagSet("starter", false), []string{"--address", "a:1", "-n", "ns1"}, env)
	require.NoError(t, err)
	require.Equal(t, "a:1", c.TemporalAddress)
	require.Equal(t, "ns1", c.TemporalNamespace)
	c, err = Load(NewFlagSet("worker", true), []string{"--namespace", "ns2"}, env)
	require.NoError(t, err)
	require.Equal(t, "ns2", c.TemporalNamespace)

	_, err = Load(NewFlagSet("starter", false), []string{"--profile", "nope"}, env)
	require.ErrorContains(t, err, "nope")
}
