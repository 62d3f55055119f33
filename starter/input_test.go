package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// starterIn is starter with stdin.
func starterIn(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := []string{"NODEROLLOUT_TEMPORAL_ADDRESS=" + closedAddress(t)}
	code = runMain(args, env, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

// A key given twice is an error naming it, at the top and deep inside, in YAML and JSON;
// before, the last one silently won.
func TestDuplicateKeysAreRefusedAtAnyDepth(t *testing.T) {
	for name, text := range map[string]string{
		"top.yaml":    "name: a\nname: b\nnodeSelector: x=y\n" + goodTemplate,
		"nested.yaml": "name: a\nnodeSelector: x=y\nbatch:\n  initial: 1\n  initial: 2\n" + goodTemplate,
		"job.yaml":    "name: a\nnodeSelector: x=y\n" + strings.Replace(goodTemplate, "image: busybox", "image: busybox\n          image: alpine", 1),
		"top.json":    `{"name":"a","nodeSelector":"x=y","name":"b","jobTemplate":"t"}`,
	} {
		code, _, errOut := starter(t, "validate", "-f", writeFile(t, name, text))
		require.Equal(t, 2, code, "%s: %s", name, errOut)
		require.Contains(t, errOut, "is given twice", name)
		key := map[string]string{"top.yaml": `"name"`, "nested.yaml": `"initial"`, "job.yaml": `"image"`, "top.json": `"name"`}[name]
		require.Contains(t, errOut, "key "+key, name)
	}
}

// -f - reads the request from standard input, as kubectl -f - does.
func TestDashFileReadsStdin(t *testing.T) {
	good := "name: kata\nnodeSelector: kata=true\n" + goodTemplate
	code, out, errOut := starterIn(t, good, "validate", "-f", "-")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "stdin: valid (rollout kata")

	code, _, errOut = starterIn(t, `{"name": "kata"`, "validate", "-f", "-")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "stdin is not a valid rollout request")
	require.Contains(t, errOut, "correct the JSON", "JSON on stdin is read as JSON")
}

// The YAML mistakes people make get a hint in words, not the parser's.
func TestTypeAndIndentMistakesGetAHint(t *testing.T) {
	for text, want := range map[string]string{
		"name: a\nnodeSelector: x=y\nbatch:\n\tinitial: 1\n" + goodTemplate:                                   "indented with spaces, never tabs: line 4 starts with a tab",
		"name: a\nnodeSelector: x=y\njobTimeout: 10\n" + goodTemplate:                                         "jobTimeout: 10 has no unit; write a duration such as 10m",
		"name: a\nnodeSelector: x=y\nparallelism: \"ten\"\n" + goodTemplate:                                   `parallelism: "ten" is not a number; write a whole number such as 10`,
		"name: a\nnodeSelector: x=y\nmaintenance:\n  drain:\n    timeout: 90\n" + goodTemplate:                "maintenance.drain.timeout: 90 has no unit; write a duration",
		"name: a\nnodeSelector: x=y\nmaintenance:\n  health:\n    conditions: {Ready: true}\n" + goodTemplate: `maintenance.health.conditions.Ready: true reads as a boolean, not text; put it in quotes, e.g. "True"`,
	} {
		code, _, errOut := starter(t, "validate", "-f", writeFile(t, "r.yaml", text))
		require.Equal(t, 2, code, errOut)
		require.Contains(t, errOut, want)
	}
	// Two mistakes, both named at once; the boolean brings no second problem of its own.
	text := "name: a\nnodeSelector: x=y\nparallelism: \"5\"\nmaintenance:\n  health:\n    conditions: {Ready: true}\n" + goodTemplate
	code, _, errOut := starter(t, "validate", "-f", writeFile(t, "r.yaml", text))
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, `parallelism: "5" is not a number`)
	require.Contains(t, errOut, "Ready: true reads as a boolean")
	require.NotContains(t, errOut, "is not a condition status")
}

// A request file too large to ever start is refused before it is parsed, naming the limit.
func TestOversizedFileIsRefusedBeforeParsing(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: a\njobTemplate: t\nnodes:\n")
	for b.Len() <= 3<<20 {
		fmt.Fprintf(&b, "- node-%d\n", b.Len())
	}
	path := writeFile(t, "huge.yaml", b.String())
	started := time.Now()
	code, _, errOut := starter(t, "validate", "-f", path)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "larger than 2 MiB, the most a request file may be")
	require.NotContains(t, errOut, "more than", "refused by size, not after parsing")
	require.Less(t, time.Since(started), 2*time.Second)

	code, _, errOut = starterIn(t, b.String(), "validate", "-f", "-")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "stdin is larger than 2 MiB")
}

// A typo is reported alone: not with what follows from the field it meant being unset.
func TestOneTypoGivesOnlyTheTypo(t *testing.T) {
	for text, typo := range map[string]string{
		"name: a\nnodeSelector: x=y\nbatch:\n  intial: 1\n" + goodTemplate: `batch.intial: unknown field; did you mean "batch.initial"?`,
		"name: a\nnodeSelectr: x=y\n" + goodTemplate:                       `nodeSelectr: unknown field; did you mean "nodeSelector"?`,
	} {
		_, err := loadRequest(writeFile(t, "r.yaml", text))
		require.Error(t, err)
		var inv *invalidRequest
		require.ErrorAs(t, err, &inv)
		require.Equal(t, []string{typo + " (names are case-sensitive; see README)"}, inv.problems)
	}
	// A problem of its own is still named next to the typo.
	_, err := loadRequest(writeFile(t, "r.yaml", "name: A\nnodeSelectr: x=y\n"+goodTemplate))
	var inv *invalidRequest
	require.ErrorAs(t, err, &inv)
	require.Len(t, inv.problems, 2, inv.problems)
	require.Contains(t, inv.problems[1], "name:")
}

// validate says what a fleet file is and which command checks it, instead of calling every
// fleet field unknown; fleet validate says the opposite of a rollout file.
func TestValidateOnAFleetFileSaysWhichCommand(t *testing.T) {
	fleet := filepath.Join("..", "deploy", "examples", "fleet.yaml")
	code, _, errOut := starter(t, "validate", "-f", fleet)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "this is a fleet rollout request")
	require.Contains(t, errOut, "starter fleet validate -f "+fleet)
	require.NotContains(t, errOut, "unknown field")

	rollout := filepath.Join("..", "deploy", "examples", "rollout.yaml")
	_, err := os.Stat(rollout)
	require.NoError(t, err)
	code, _, errOut = starter(t, "fleet", "validate", "-f", rollout)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "starter validate -f "+rollout)

	code, out, errOut := starter(t, "fleet", "validate", "-f", fleet)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, fleet+": valid (fleet")
}
