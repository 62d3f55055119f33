package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/noderollout/noderollout/internal/testjob"
	"github.com/stretchr/testify/require"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

var goodTemplate = "jobTemplate:\n" + testjob.YAML("  ", "c", "{{node}}")

func TestLoadRequestTakesTheJobTemplateAsAYAMLObject(t *testing.T) {
	req, err := loadRequest(writeFile(t, "r.yaml", "name: kata\nnodeSelector: kata=true\nmaxFailures: 10%\n"+goodTemplate))
	require.NoError(t, err)
	require.Equal(t, "kata", req.Name)
	require.Equal(t, api.IntOrPercent("10%"), req.MaxFailures)
	require.Contains(t, req.JobTemplate, "kind: Job")
	require.Contains(t, req.JobTemplate, "{{node}}")
}

func TestLoadRequestRejectsBadInputNamingTheField(t *testing.T) {
	many := make([]string, api.MaxExplicitNodes+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("n%d", i))
	}
	cases := map[string]string{
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelizm":3}`:        `parallelizm: unknown field; did you mean "parallelism"?`,
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","batch":{"intial":1}}`:   `batch.intial: unknown field; did you mean "batch.initial"?`,
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelism":0.5}`:      "parallelism",
		`{"name":"A","nodeSelector":"x=y","jobTemplate":"t"}`:                        "name",
		`{"name":"a","nodes":[` + strings.Join(many, ",") + `],"jobTemplate":"t"}`:   "nodeSelector",
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","keepJobs":"sometimes"}`: "keepJobs",
		"name: [unclosed": "not JSON",
	}
	for text, want := range cases {
		_, err := loadRequest(writeFile(t, "r.json", text))
		require.Error(t, err, text[:min(len(text), 60)])
		require.Contains(t, err.Error(), want)
	}
}

// The template is decoded as the worker decodes it, so a bad template is caught before start.
func TestLoadRequestDecodesTheTemplateAsTheWorkerDoes(t *testing.T) {
	bad := strings.Replace(goodTemplate, "restartPolicy: Never", "restartPolicy: Always", 1)
	_, err := loadRequest(writeFile(t, "r.yaml", "name: a\nnodeSelector: x=y\n"+bad))
	require.ErrorContains(t, err, "jobTemplate.spec.template.spec.restartPolicy")

	bad = strings.Replace(goodTemplate, "image: busybox", "image: busybox\n          comand: [sh]", 1)
	_, err = loadRequest(writeFile(t, "r.yaml", "name: a\nnodeSelector: x=y\n"+bad))
	require.ErrorContains(t, err, `jobTemplate.spec.template.spec.containers[0].comand: is not a field`)
	require.ErrorContains(t, err, `lists the fields; did you mean "command"?`)

	bad = strings.Replace(goodTemplate, "restartPolicy: Never", "restartPolicy: Never\n        nodeSelecter: {}", 1)
	_, err = loadRequest(writeFile(t, "r.yaml", "name: a\nnodeSelector: x=y\n"+bad))
	require.ErrorContains(t, err, `did you mean "nodeSelector"?`)
}

func TestLoadRequestSaysOneProblemPerLineInTheFilesLanguage(t *testing.T) {
	_, err := loadRequest(writeFile(t, "r.yaml", "name: A\nnodeSelector: x=y\nkeepJobs: sometimes\nparalelism: 2\n"+goodTemplate))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 4, err.Error())
	require.Contains(t, lines[0], "r.yaml is not a valid rollout request")
	require.Contains(t, lines[1], `paralelism: unknown field; did you mean "parallelism"?`)

	_, err = loadRequest(writeFile(t, "r.yaml", "name: a\n nodeSelector: x\n"))
	require.ErrorContains(t, err, "correct the YAML")
	_, err = loadRequest(writeFile(t, "r.json", `{"name": "a"`))
	require.ErrorContains(t, err, "correct the JSON")
}
