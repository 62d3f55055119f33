package connect

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	apiversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"

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

// The worker refuses a cluster older than 1.27, naming the version it found, the minimum and the
// fix, whichever way the server spells its version; one it cannot read or parse is let through
// with a warning.
func TestKubernetesVersionCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		info apiversion.Info
		err  string // "" for let through
		warn string // in the log when let through
		want string // the version returned when let through; "" for none
	}{
		{name: "EKS 1.26", info: apiversion.Info{GitVersion: "v1.26.15-eks-abcdef", Major: "1", Minor: "26+"},
			err: "the cluster runs Kubernetes v1.26.15-eks-abcdef; the worker needs 1.27 or newer"},
		{name: "1.27.0", info: apiversion.Info{GitVersion: "v1.27.0", Major: "1", Minor: "27"}, want: "1.27.0"},
		{name: "k3s 1.31", info: apiversion.Info{GitVersion: "v1.31.2+k3s1", Major: "1", Minor: "31"}, want: "1.31.2"},
		{name: "only Major and Minor, GKE's +", info: apiversion.Info{Major: "1", Minor: "27+"}, want: "1.27"},
		{name: "only Major and Minor, too old", info: apiversion.Info{Major: "1", Minor: "26+"},
			err: "the cluster runs Kubernetes 1.26+; the worker needs 1.27 or newer"},
		{name: "unstamped build", info: apiversion.Info{GitVersion: "v0.0.0-master+$Format:%H$", Major: "1", Minor: "25"},
			err: "the cluster runs Kubernetes 1.25;"},
		{name: "unparseable", info: apiversion.Info{GitVersion: "custom", Minor: "x"},
			warn: "could not parse the Kubernetes version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}, FakedServerVersion: &tc.info}
			var log bytes.Buffer
			v, err := CheckKubernetesVersion(context.Background(), d, slog.New(slog.NewTextHandler(&log, nil)))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.ErrorContains(t, err, "upgrade the cluster to Kubernetes 1.27 or newer")
				return
			}
			require.NoError(t, err)
			if tc.want == "" {
				require.Nil(t, v)
			} else {
				require.Equal(t, tc.want, v.String())
			}
			if tc.warn == "" {
				require.Empty(t, log.String())
			}
			require.Contains(t, log.String(), tc.warn)
		})
	}
}

// A version that cannot be read (RBAC without /version, say) is not a cluster too old.
func TestKubernetesVersionUnreadableIsAWarning(t *testing.T) {
	fake := &k8stesting.Fake{}
	fake.AddReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden")
	})
	var log bytes.Buffer
	v, err := CheckKubernetesVersion(context.Background(), &fakediscovery.FakeDiscovery{Fake: fake}, slog.New(slog.NewTextHandler(&log, nil)))
	require.NoError(t, err)
	require.Nil(t, v)
	require.Contains(t, log.String(), "could not read the Kubernetes version; not checked")
	require.Contains(t, log.String(), "forbidden")
}
