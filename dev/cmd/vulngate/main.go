// Command vulngate reads `govulncheck -format json` on stdin and fails when our code calls a
// known-vulnerable function: of a module we require (fixed by updating go.mod) or of the
// standard library (fixed by a newer Go in go.mod's toolchain line, which GOTOOLCHAIN=auto
// selects; README, "Two commands").
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

type message struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	failing, stdlib := map[string]string{}, map[string]string{}
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "vulngate: reading govulncheck's output:", err)
			os.Exit(2)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // only vulnerable functions our code reaches count
		}
		t := f.Trace[0]
		line := fmt.Sprintf("%s: %s@%s (%s.%s), fixed in %s", f.OSV, t.Module, t.Version, t.Package, t.Function, f.FixedVersion)
		if t.Module == "stdlib" {
			stdlib[f.OSV] = line
		} else {
			failing[f.OSV] = line
		}
	}
	report := func(title string, m map[string]string) {
		if len(m) == 0 {
			return
		}
		lines := make([]string, 0, len(m))
		for _, l := range m {
			lines = append(lines, l)
		}
		sort.Strings(lines)
		fmt.Println(title)
		for _, l := range lines {
			fmt.Println("  " + l)
		}
	}
	report("vulnerable standard library functions reached: raise go.mod's toolchain line to a Go that fixes them, and build with GOTOOLCHAIN=auto", stdlib)
	report("vulnerable module functions reached: update these in go.mod", failing)
	if len(failing)+len(stdlib) > 0 {
		os.Exit(1)
	}
	fmt.Println("govulncheck: no reachable vulnerability, in a required module or the standard library")
}
