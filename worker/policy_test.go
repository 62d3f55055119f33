package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/internal/config"
)

// A policy file that cannot be read names the setting and its variable, like every bad setting.
func TestMissingPolicyFileNamesTheKey(t *testing.T) {
	_, err := loadPolicy(config.Config{PolicyFile: filepath.Join(t.TempDir(), "policy.yaml")})
	require.ErrorContains(t, err, "policy-file (NODEROLLOUT_POLICY_FILE)")
}
