package main

import (
	"bufio"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A database that forks a backend per connection (PostgreSQL) is charged with its backends'
// CPU: those still running and those its main process has reaped.
func TestTreeCPUCountsRunningAndReapedChildren(t *testing.T) {
	// The shell has a child count to 300,000 (about 0.3 s of CPU, however busy the machine)
	// and reaps it, says so, then starts a second busy child and keeps it running until stdin
	// closes.
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; echo reaped; `+
		`sh -c 'while :; do :; done' & echo running; read x; kill $!`)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)

	require.True(t, lines.Scan())
	require.Equal(t, "reaped", lines.Text())
	own, err := readProc(cmd.Process.Pid)
	require.NoError(t, err)
	reaped := treeCPU(cmd.Process.Pid)
	require.Less(t, own.CPU, 0.1, "the shell itself hardly runs")
	require.Greater(t, reaped, 0.15, "the reaped child's CPU counts")

	require.True(t, lines.Scan())
	require.Equal(t, "running", lines.Text())
	require.Eventually(t, func() bool { return treeCPU(cmd.Process.Pid) > reaped+0.15 },
		10*time.Second, 50*time.Millisecond, "the running child's CPU counts")
}
