package main

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A name that no rollout, fleet or schedule can have is the command line's mistake: exit 2
// before dialling (before, the starter asked Temporal first and exited 1).
func TestBadNamesExit2BeforeDialling(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	for _, args := range [][]string{
		{"status", "Bad_Name"},
		{"abort", "Bad_Name"},
		{"pause", "rollout-Bad_Name"},
		{"fleet", "status", "Bad_Name"},
		{"schedule", "create", "N_bad", "-f", good, "--every", "1h"},
		{"schedule", "delete", "N_bad"},
	} {
		code, _, errOut := starter(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.NotContains(t, errOut, "temporal at", "%v must not dial", args)
		require.Contains(t, errOut, "_", args)
		require.Contains(t, errOut, "not a valid", args)
	}
	// --id takes any workflow ID as is, so it still dials.
	code, _, errOut := starter(t, "status", "--id", "Bad_Name")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "temporal at")
}

// A time zone the starter does not know is refused before dialling.
func TestUnknownCronTimeZoneExits2(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", good, "--cron", "CRON_TZ=Europe/Berln 0 3 * * *")
	require.Equal(t, 2, code, errOut)
	require.NotContains(t, errOut, "temporal at")
	require.Contains(t, errOut, `time zone "Europe/Berln"`)

	code, _, errOut = starter(t, "schedule", "create", "nightly", "-f", good, "--cron", "CRON_TZ=Europe/Berlin 0 3 * * *")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "temporal at", "a known zone passes on to the server")
}

// A converging rollout runs until aborted: a schedule of one would skip every run after the
// first, so it is refused, before dialling.
func TestScheduleOfAConvergingRolloutExits2(t *testing.T) {
	converging := writeFile(t, "conv.yaml", "name: kata\nnodeSelector: kata=true\nmode: converge\n"+goodTemplate)
	code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", converging, "--every", "24h")
	require.Equal(t, 2, code, errOut)
	require.NotContains(t, errOut, "temporal at")
	require.Contains(t, errOut, "mode: converge")
	require.Contains(t, errOut, "starter start -f")
}

// --every 0s is a too-short interval, not a missing flag.
func TestEveryZeroSaysTheMinimum(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", good, "--every", "0s")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--every must be at least 1s")
	code, _, errOut = starter(t, "schedule", "create", "nightly", "-f", good)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "give one of --cron or --every")
}

// The Temporal CLI's flags work on every command: --address, --namespace/-n, --profile and
// --command-timeout.
func TestTemporalCLIFlagsOnEveryCommand(t *testing.T) {
	addr := closedAddress(t)
	code, _, errOut := starter(t, "status", "x", "--address", addr, "-n", "ns1")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "temporal at "+addr+" (namespace ns1)")
	code, _, errOut = starter(t, "schedule", "list", "--namespace", "ns2", "--address", addr)
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "(namespace ns2)")
	code, _, errOut = starter(t, "list", "--profile", "nope")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "nope")

	// --command-timeout bounds the whole command, here a dial to a server that never answers.
	started := time.Now()
	code, _, errOut = starter(t, "status", "x", "--address", silentServer(t), "--command-timeout", "1s")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "--command-timeout 1s")
	require.Less(t, time.Since(started), 5*time.Second)
}

// silentServer accepts connections and never answers.
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return l.Addr().String()
}

// starter --version prints what starter version prints.
func TestStarterVersionFlag(t *testing.T) {
	code, out, errOut := starter(t, "--version")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^starter \S+ \(commit `, out)
}

// validate --policy-file judges the request as the worker with that policy would, offline:
// a template the policy refuses is no longer "valid".
func TestValidateWithThePoliciesOfTheWorker(t *testing.T) {
	pol := writeFile(t, "policy.yaml", "namespaces:\n  maint: {}\nimages: [registry.example.com/]\nmaxParallelism: 5\n")
	req := writeFile(t, "r.yaml", "name: kata\nnamespace: maint\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "validate", "-f", req, "--policy-file", pol)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `policy rule "images" denies`)
	require.Contains(t, errOut, `policy rule "maxParallelism" denies parallelism`, "the default parallelism, 10, is over 5")

	allowed := writeFile(t, "policy.yaml", "namespaces:\n  maint: {}\nimages: [docker.io/library/busybox]\n")
	code, out, errOut := starter(t, "validate", "-f", req, "--policy-file", allowed)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "allowed by the policy in "+allowed)

	code, _, errOut = starter(t, "validate", "-f", req, "--policy-file", writeFile(t, "p.yaml", "namespace: {}\n"))
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "policy-file")
}
