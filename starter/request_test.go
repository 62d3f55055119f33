package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/workflows"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

func TestLoadRequestTakesTheJobTemplateAsAYAMLObject(t *testing.T) {
	req, err := loadRequest(writeFile(t, "r.yaml", `name: kata
nodeSelector: kata=true
maxFailures: 10%
jobTemplate:
  apiVersion: batch/v1
  kind: Job
  spec:
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: c
          image: busybox
          args: ["{{node}}"]
`))
	require.NoError(t, err)
	require.Equal(t, "kata", req.Name)
	require.Equal(t, workflows.IntOrPercent("10%"), req.MaxFailures)
	require.Contains(t, req.JobTemplate, "kind: Job")
	require.Contains(t, req.JobTemplate, "{{node}}")
}

func TestLoadRequestRejectsBadInputNamingTheField(t *testing.T) {
	many := make([]string, workflows.MaxExplicitNodes+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("n%d", i))
	}
	cases := map[string]string{
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelizm":3}`:        "parallelizm",
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","parallelism":0.5}`:      "parallelism",
		`{"name":"A","nodeSelector":"x=y","jobTemplate":"t"}`:                        "name",
		`{"name":"a","nodes":[` + strings.Join(many, ",") + `],"jobTemplate":"t"}`:   "nodeSelector",
		`{"name":"a","nodeSelector":"x=y","jobTemplate":"t","keepJobs":"sometimes"}`: "keepJobs",
		"name: [unclosed": "not YAML",
	}
	for text, want := range cases {
		_, err := loadRequest(writeFile(t, "r.json", text))
		require.Error(t, err, text[:min(len(text), 60)])
		require.Contains(t, err.Error(), want)
	}
}

func TestUnknownCommandAndBadFlagsExit2(t *testing.T) {
	var out, errOut strings.Builder
	require.Equal(t, 2, runMain([]string{"launch"}, nil, &out, &errOut))
	require.Contains(t, errOut.String(), "unknown command")
	errOut.Reset()
	require.Equal(t, 2, runMain([]string{"start", "--kube-qps", "3"}, nil, &out, &errOut))
	errOut.Reset()
	require.Equal(t, 0, runMain([]string{"--help"}, nil, &out, &errOut))
	require.Contains(t, out.String(), "schedule create")
}
