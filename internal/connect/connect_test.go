package connect

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/internal/config"
)

func TestKubeConfigSpeaksProtobufWithinTheLimits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(file, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600))
	rc, err := KubeConfig(config.Config{Kubeconfig: file, KubeQPS: 42, KubeBurst: 84})
	require.NoError(t, err)
	require.Equal(t, "application/vnd.kubernetes.protobuf", rc.ContentType)
	require.Equal(t, "application/vnd.kubernetes.protobuf,application/json", rc.AcceptContentTypes)
	require.Equal(t, float32(42), rc.QPS)
	require.Equal(t, 84, rc.Burst)
	require.Equal(t, "https://127.0.0.1:6443", rc.Host)
}

func TestTemporalCompressionCanBeTurnedOff(t *testing.T) {
	opts, err := TemporalOptions(config.Config{TemporalAddress: "127.0.0.1:7233", TemporalCompression: "none"}, nil, nil)
	require.NoError(t, err)
	require.NotNil(t, opts.ConnectionOptions.GrpcCompression)
	opts, err = TemporalOptions(config.Config{TemporalAddress: "127.0.0.1:7233", TemporalCompression: "gzip"}, nil, nil)
	require.NoError(t, err)
	require.Nil(t, opts.ConnectionOptions.GrpcCompression, "nil is the SDK's gzip default")
}

// A kubeconfig named in the settings that cannot be read is a bad setting (the worker exits 2
// for it), naming the key and its variable.
func TestUnreadableKubeconfigIsABadValue(t *testing.T) {
	_, err := KubeConfig(config.Config{Kubeconfig: filepath.Join(t.TempDir(), "missing"), KubeQPS: 1, KubeBurst: 1})
	var bad *config.BadValueError
	require.ErrorAs(t, err, &bad)
	require.ErrorContains(t, err, "kubeconfig (NODEROLLOUT_KUBECONFIG)")
}
