package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/internal/freeport"
)

// TestMain lets a test run the worker's main in a process of its own: the test binary
// started with NODEROLLOUT_TEST_WORKER_MAIN=1 is the worker.
func TestMain(m *testing.M) {
	if os.Getenv("NODEROLLOUT_TEST_WORKER_MAIN") == "1" {
		os.Args = []string{"worker"}
		if args := os.Getenv("NODEROLLOUT_TEST_WORKER_ARGS"); args != "" {
			os.Args = append(os.Args, strings.Split(args, "\n")...)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// workerProcess starts the worker with args and env (on top of a bare environment).
func workerProcess(t *testing.T, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	home := t.TempDir()
	cmd.Env = append([]string{"NODEROLLOUT_TEST_WORKER_MAIN=1", "NODEROLLOUT_TEST_WORKER_ARGS=" + strings.Join(args, "\n"),
		"HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	return cmd, out
}

// closedAddress is a local port nothing listens on.
func closedAddress(t *testing.T) string {
	addr, err := freeport.Addr()
	require.NoError(t, err)
	return addr
}

// kubeconfigAt writes a kubeconfig for an API server at addr.
func kubeconfigAt(t *testing.T, addr string) string {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://`+addr+`", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600))
	return path
}

// With the API server unreachable the worker says so within seconds and keeps saying it as it
// retries; SIGTERM (and SIGINT) end it, exit 1, within a bounded time. Before, it waited
// silently for the Job informer on a context no signal cancelled, and only kill -9 ended it.
func TestWorkerWithAPIServerUnreachableLogsRetriesAndObeysSignals(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd, out := workerProcess(t, nil, "--kubeconfig", kubeconfigAt(t, closedAddress(t)),
			"--temporal-address", closedAddress(t), "--metrics-listen", "")
		waitForOutput(t, out, 10*time.Second, "kubernetes API server not reachable")
		waitForOutput(t, out, 15*time.Second, `"attempt":2`)
		require.NoError(t, cmd.Process.Signal(sig))
		code := waitExit(t, cmd, 10*time.Second)
		require.Equal(t, 1, code, "%v: %s", sig, out.String())
		require.Contains(t, out.String(), "stopped before the Kubernetes API server at https://")
	}
}

// Unreachable for longer than --startup-timeout, the worker gives up by itself: exit 1.
func TestWorkerGivesUpAfterTheStartupTimeout(t *testing.T) {
	cmd, out := workerProcess(t, nil, "--kubeconfig", kubeconfigAt(t, closedAddress(t)),
		"--temporal-address", closedAddress(t), "--metrics-listen", "", "--startup-timeout", "3s")
	code := waitExit(t, cmd, 20*time.Second)
	require.Equal(t, 1, code, out.String())
	require.Contains(t, out.String(), "not reachable within 3s (--startup-timeout)")
}

// worker version prints the version, as worker --version does; any other word is refused
// (before, the worker ignored it and started).
func TestWorkerVersionSubcommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		cmd, out := workerProcess(t, nil, args...)
		require.Equal(t, 0, waitExit(t, cmd, 10*time.Second), out.String())
		require.True(t, strings.HasPrefix(out.String(), "worker "), out.String())
		require.Contains(t, out.String(), "Temporal Go SDK")
	}
	cmd, out := workerProcess(t, nil, "strat")
	require.Equal(t, 2, waitExit(t, cmd, 10*time.Second), out.String())
	require.Contains(t, out.String(), `unexpected argument "strat"`)
}

// With no kubeconfig anywhere the worker says where it looked, not client-go's advice to set
// KUBERNETES_MASTER.
func TestWorkerWithoutAnyKubeconfigSaysWhereItLooked(t *testing.T) {
	cmd, out := workerProcess(t, nil, "--temporal-address", closedAddress(t), "--metrics-listen", "")
	require.Equal(t, 2, waitExit(t, cmd, 10*time.Second), out.String())
	require.Contains(t, out.String(), "no in-cluster config, --kubeconfig, $KUBECONFIG or ~/.kube/config")
	require.NotContains(t, out.String(), "KUBERNETES_MASTER")
}

func waitForOutput(t *testing.T, out *syncBuffer, timeout time.Duration, want string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v; output:\n%s", want, timeout, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		require.NoError(t, err)
		return 0
	case <-time.After(timeout):
		t.Fatalf("the worker did not exit within %v", timeout)
		return -1
	}
}

// syncBuffer is a buffer two goroutines (the process's output, the test) share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
