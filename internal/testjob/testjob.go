// Package testjob is the minimal Job the tests share: a batch/v1 Job with one busybox container
// that is never restarted, the least a Job template needs to pass the checks. It is written out
// as YAML text, at whatever indentation the test nests it in.
package testjob

import (
	"strconv"
	"strings"
)

// YAML renders the minimal Job with every line indented by indent and its one container named
// container; with args, the container gets an args line of them, quoted, after its image.
func YAML(indent, container string, args ...string) string {
	lines := []string{
		"apiVersion: batch/v1",
		"kind: Job",
		"spec:",
		"  template:",
		"    spec:",
		"      restartPolicy: Never",
		"      containers:",
		"      - name: " + container,
		"        image: busybox",
	}
	if len(args) > 0 {
		quoted := make([]string, len(args))
		for i, a := range args {
			quoted[i] = strconv.Quote(a)
		}
		lines = append(lines, "        args: ["+strings.Join(quoted, ", ")+"]")
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(indent + l + "\n")
	}
	return b.String()
}
