// Command vulndb turns the OSV entries of the Go vulnerability database's source module
// (golang.org/x/vulndb, served by the Go module proxy) into the file layout govulncheck
// reads with -db file://DIR, so make vet can check for known vulnerabilities on machines
// that reach the module proxy only.
//
// Usage: vulndb -osv DIR_OF_GO-*.json -out DIR
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// entry is the part of an OSV entry the index needs.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	// Fixed is left out: govulncheck then reads every entry of a module and matches the
	// versions itself, which is slower by a few files and never wrong.
}

type module struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

type vuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Aliases  []string  `json:"aliases,omitempty"`
}

func main() {
	osvDir := flag.String("osv", "", "directory of OSV entries (data/osv of golang.org/x/vulndb)")
	out := flag.String("out", "", "directory to write the database to")
	flag.Parse()
	if *osvDir == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := build(*osvDir, *out); err != nil {
		fmt.Fprintln(os.Stderr, "vulndb:", err)
		os.Exit(1)
	}
}

func build(osvDir, out string) error {
	files, err := filepath.Glob(filepath.Join(osvDir, "GO-*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no GO-*.json entries in %s", osvDir)
	}
	for _, dir := range []string{"index", "ID"} {
		if err := os.MkdirAll(filepath.Join(out, dir), 0o755); err != nil {
			return err
		}
	}
	modules := map[string]*module{}
	var vulns []vuln
	var latest time.Time
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var e entry
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if !strings.HasPrefix(e.ID, "GO-") {
			return fmt.Errorf("%s: unexpected id %q", f, e.ID)
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), data, 0o644); err != nil {
			return err
		}
		vulns = append(vulns, vuln{ID: e.ID, Modified: e.Modified, Aliases: e.Aliases})
		if e.Modified.After(latest) {
			latest = e.Modified
		}
		seen := map[string]bool{}
		for _, a := range e.Affected {
			path := a.Package.Name
			if path == "" || seen[path] {
				continue
			}
			seen[path] = true
			m := modules[path]
			if m == nil {
				m = &module{Path: path}
				modules[path] = m
			}
			m.Vulns = append(m.Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
	}
	list := make([]*module, 0, len(modules))
	for _, m := range modules {
		list = append(list, m)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Path < list[j].Path })
	sort.Slice(vulns, func(i, j int) bool { return vulns[i].ID < vulns[j].ID })
	for name, v := range map[string]any{"db": map[string]time.Time{"modified": latest}, "modules": list, "vulns": vulns} {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, "index", name+".json"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
