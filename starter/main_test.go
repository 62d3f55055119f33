package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/freeport"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"sigs.k8s.io/yaml"
)

// closedAddress is a local port nothing listens on: a command that dials fails there.
func closedAddress(t *testing.T) string {
	addr, err := freeport.Addr()
	require.NoError(t, err)
	return addr
}

func starter(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := []string{"NODEROLLOUT_TEMPORAL_ADDRESS=" + closedAddress(t)}
	code = runMain(args, env, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidateChecksOfflineAndExits2(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, out, errOut := starter(t, "validate", "-f", good)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "valid (rollout kata")

	bad := writeFile(t, "bad.yaml", "name: kata\nnodeSelector: kata=true\nparallelizm: 3\n"+
		strings.Replace(goodTemplate, "Never", "Always", 1))
	for _, cmd := range []string{"validate", "start", "dry-run"} {
		code, _, errOut = starter(t, cmd, "-f", bad)
		require.Equal(t, 2, code, cmd)
		require.NotContains(t, errOut, "temporal at", "%s must not dial with a bad file", cmd)
		require.Contains(t, errOut, `parallelizm: unknown field; did you mean "parallelism"?`)
		require.Contains(t, errOut, "\n  jobTemplate.spec.template.spec.restartPolicy:")
		require.NotContains(t, errOut, "retryable")
	}

	code, out, _ = starter(t, "validate", "-f", bad, "-o", "json")
	require.Equal(t, 2, code)
	var v validation
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.False(t, v.Valid)
	require.Len(t, v.Problems, 2)

	code, _, errOut = starter(t, "validate")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "-f/--file is required")
}

func TestAGoodFileReachesTheServerAndItsAbsenceExits1(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "start", "-f", good)
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "is Temporal running there?")
}

func TestCommandLineMistakesExit2WithAHint(t *testing.T) {
	code, _, errOut := starter(t, "stauts", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "\tstatus\n")

	code, _, errOut = starter(t, "start", "--kube-qps", "3")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "unknown flag: --kube-qps")

	code, _, errOut = starter(t, "status")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "expected ID")

	code, _, errOut = starter(t, "set-parallelism", "x", "many")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `parallelism N: "many" is not a whole number`)

	code, out, _ := starter(t, "--help")
	require.Equal(t, 0, code)
	require.Contains(t, out, "schedule")
	require.Contains(t, out, "validate")
}

func TestUnknownOutputFormatIsAnErrorOnEveryPrintingCommand(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	for _, args := range [][]string{
		{"status", "x"}, {"start", "-f", good}, {"dry-run", "-f", good}, {"validate", "-f", good},
		{"schedule", "list"}, {"version"},
	} {
		code, _, errOut := starter(t, append(args, "-o", "xml")...)
		require.Equal(t, 2, code, args)
		require.Contains(t, errOut, `-o "xml" is not an output format; use table, wide, json, yaml, name, jsonpath=`, args)
	}
}

func TestValidateAndVersionPrintJSONAndYAML(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	_, out, _ := starter(t, "validate", "-f", good, "-o", "yaml")
	var v validation
	require.NoError(t, yaml.Unmarshal([]byte(out), &v))
	require.True(t, v.Valid)
	require.Equal(t, "kata", v.Request.Name)

	code, out, _ := starter(t, "version", "-o", "json")
	require.Equal(t, 0, code)
	var info map[string]string
	require.NoError(t, json.Unmarshal([]byte(out), &info))
	require.NotEmpty(t, info["goVersion"])
	require.NotEmpty(t, info["temporalSDKVersion"])
}

func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh"} {
		code, out, errOut := starter(t, "completion", shell)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "starter")
	}
}

func TestRunningAndEndedRolloutsShareOneJSONShape(t *testing.T) {
	keys := func(v rolloutView) []string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return ks
	}
	now := time.Now()
	running := runningView("rollout-a", api.RolloutStatus{Name: "a", Phase: "running", Selected: 3, Parallelism: 2, Window: 2, StartedAt: now})
	ended := endedView("rollout-a", enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, api.RolloutResult{Name: "a", Selected: 3, StartedAt: now, FinishedAt: now}, errors.New("over budget"))
	require.Equal(t, "Running", running.Status)
	require.Equal(t, "Failed", ended.Status)
	for _, k := range []string{"workflowId", "status", "phase", "name", "selected", "counts", "startedAt"} {
		require.Contains(t, keys(running), k)
		require.Contains(t, keys(ended), k)
	}
}

// A rollout's result comes back from a failure's details, and from an abort's: status of an
// aborted rollout shows what ran, not an empty result.
func TestResultOfAFailedAndAnAbortedRollout(t *testing.T) {
	want := api.RolloutResult{Name: "a", Selected: 5, Counts: api.Counts{Succeeded: 2, Aborted: 3}}
	var res api.RolloutResult
	got, err := resultOf(temporal.NewApplicationError("over budget", "FailureBudgetExceeded", want), &res)
	require.Equal(t, want, got)
	require.EqualError(t, err, "over budget")

	res = api.RolloutResult{}
	got, err = resultOf(temporal.NewCanceledError(want), &res)
	require.Equal(t, want, got)
	require.True(t, temporal.IsCanceledError(err))

	res = want
	got, err = resultOf(nil, &res)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func TestWaitOnARolloutThatSelectedNoNode(t *testing.T) {
	for _, allow := range []bool{false, true} {
		var out bytes.Buffer
		a := &app{out: &out}
		a.cmd = startCommand(a)
		if allow {
			require.NoError(t, a.cmd.Flags().Parse([]string{"--allow-empty"}))
		}
		err := a.ended("rollout-demo", api.RolloutResult{Name: "demo"}, nil, false)
		if allow {
			require.NoError(t, err)
			continue
		}
		var re runError
		require.ErrorAs(t, err, &re, "exit 1")
		require.Contains(t, err.Error(), "selected 0 nodes: check the selector")
	}
}

func TestProgressLineFitsTheTerminal(t *testing.T) {
	st := api.RolloutStatus{Phase: "running", Selected: 10000, ListingDone: true,
		Counts: api.Counts{Succeeded: 4321, Failed: 12, Running: 100, Waiting: 3}}
	for _, width := range []int{20, 40, 60, 80, 100, 200} {
		line := progressLine(st, 90*time.Second, width)
		require.LessOrEqual(t, len([]rune(line)), width-1, "width %d: %q", width, line)
		require.Contains(t, line, "4333/10000", "width %d keeps the count", width)
	}
	require.Contains(t, progressLine(st, 90*time.Second, 200), "ETA")
	require.Contains(t, progressLine(st, 90*time.Second, 0), "[")
}

// statusLine is the line of printStatus's output that starts with key, its spaces folded.
func statusLine(st api.RolloutStatus, key string) string {
	var b bytes.Buffer
	printStatus(&b, st)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, key) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}

func TestStatusSaysADrainingRolloutStartsNoMoreNodes(t *testing.T) {
	phaseLine := func(st api.RolloutStatus) string { return statusLine(st, "PHASE") }
	draining := api.RolloutStatus{Phase: "draining", Counts: api.Counts{Running: 3, Waiting: 1, Failed: 9}}
	require.Equal(t, "PHASE draining (starting no more nodes; waiting for 4 in flight)", phaseLine(draining))
	require.Equal(t, "PHASE paused", phaseLine(api.RolloutStatus{Phase: "paused", Counts: draining.Counts}))
}

func TestHumanErrorDropsTheSDKsTypeSuffix(t *testing.T) {
	err := errors.New("invalid rollout request: name: is required (type: InvalidRequest, retryable: false)")
	require.Equal(t, "invalid rollout request: name: is required", humanError(err))
}

// A negative --every is the command line's fault: exit 2 naming the flag, before dialling.
func TestScheduleCreateRefusesANegativeEvery(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "schedule", "create", "nightly", "-f", good, "--every", "-24h")
	require.Equal(t, 2, code, errOut)
	require.NotContains(t, errOut, "temporal at", "a bad --every must not dial")
	require.Contains(t, errOut, "--every")
}

// What the status table shows of a running rollout, status -o json shows too: the nodes held
// back by the cluster budget (README: "listed under waitingForClusterSlot in starter status")
// and the pacing (window, canaries, per-domain counts).
func TestRunningStatusJSONKeepsClusterSlotsAndPacing(t *testing.T) {
	opens := time.Date(2026, 3, 7, 21, 0, 0, 0, time.UTC)
	st := api.RolloutStatus{Name: "a", Phase: "running", WaitingForClusterSlot: []string{"n1"},
		Pacing: &api.PacingStatus{WaitingFor: "window", WindowOpensAt: &opens}}
	b, err := json.Marshal(runningView("rollout-a", st))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, []any{"n1"}, m["waitingForClusterSlot"], string(b))
	require.Equal(t, map[string]any{"waitingFor": "window", "windowOpensAt": "2026-03-07T21:00:00Z"}, m["pacing"], string(b))
}

// A mistyped flag gets a did-you-mean, as a mistyped command does.
func TestMistypedFlagGetsAHint(t *testing.T) {
	good := writeFile(t, "good.yaml", "name: kata\nnodeSelector: kata=true\n"+goodTemplate)
	code, _, errOut := starter(t, "start", "-f", good, "--wiat")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown flag: --wiat; did you mean "--wait"?`)
	code, _, errOut = starter(t, "status", "x", "--temporal-adress", "h:1")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, `unknown flag: --temporal-adress; did you mean "--temporal-address"?`, "inherited flags count too")
}

// A TLS file that cannot be read is a bad command line (exit 2, naming the key and its
// variable), like an unreadable --api-key-file, not a refusal by Temporal (exit 1).
func TestUnreadableTLSFileExits2NamingTheKey(t *testing.T) {
	missing := t.TempDir() + "/missing.pem"
	code, _, errOut := starter(t, "status", "x", "--tls-cert", missing, "--tls-key", missing)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "tls-cert (NODEROLLOUT_TLS_CERT)")
	code, _, errOut = starter(t, "status", "x", "--tls-ca", missing)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "tls-ca (NODEROLLOUT_TLS_CA)")
}

// N outside 1-1000 is a bad command line whatever the rollout: exit 2 before dialling, naming
// the range, as for N that is not a number.
func TestSetParallelismOutOfRangeExits2(t *testing.T) {
	for _, n := range []string{"0", "1001"} {
		code, _, errOut := starter(t, "set-parallelism", "x", n)
		require.Equal(t, 2, code, errOut)
		require.NotContains(t, errOut, "temporal at", "must not dial")
		require.Contains(t, errOut, "between 1 and 1000", n)
	}
}
