package api

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/noderollout/noderollout"

// layers are the module's packages from the bottom up: a package imports only packages of
// layers below its own, so no import points up. The internal helpers sit below activities and
// workflows: they take names and types from api, never from the code that uses them. A package that is in no layer fails the test:
// a new package takes its place here.
var layers = [][]string{
	{"api/didyoumean"},
	{"api"},
	{"activities/jobspec", "activities/evictable", "internal/policy", "internal/config", "internal/metrics", "internal/version", "internal/bulk", "internal/freeport", "internal/readyz", "internal/nodepager", "internal/testjob"},
	{"activities", "internal/connect"},
	{"workflows"},
	{"worker", "starter", "dev/cmd/fakenodes", "dev/cmd/fakereboot", "dev/cmd/smokejob", "dev/cmd/vulndb", "dev/cmd/vulngate"},
}

// pure are the packages that read and check requests and templates without the Temporal SDK
// or a Kubernetes client: the starter, the benchmark and the tests use them offline, and
// workflow code calls them.
var pure = []string{"api", "api/didyoumean", "activities/jobspec"}

// Every import of the module's own packages points down the layers, and the contract and the
// pure helpers import neither the SDK nor client-go.
func TestNoImportPointsUp(t *testing.T) {
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l {
			layerOf[p] = i
		}
	}
	imports := modulePackages(t)
	require := func(ok bool, format string, args ...any) {
		t.Helper()
		if !ok {
			t.Errorf(format, args...)
		}
	}
	for pkg, imps := range imports {
		layer, placed := layerOf[pkg]
		require(placed, "%s is in no layer of layers_test.go: give it its place", pkg)
		for _, imp := range imps {
			if own, ok := strings.CutPrefix(imp, module+"/"); ok {
				require(layerOf[own] < layer, "%s imports %s, which is not below it (layers_test.go)", pkg, own)
			}
			if slices.Contains(pure, pkg) {
				require(!strings.HasPrefix(imp, "go.temporal.io/") && !strings.HasPrefix(imp, "k8s.io/client-go"),
					"%s imports %s: it must work without the Temporal SDK and client-go", pkg, imp)
			}
		}
	}
	for p := range layerOf {
		_, exists := imports[p]
		require(exists, "layers_test.go names %s, which has no Go files", p)
	}
}

// modulePackages maps each package of the root module (by its path below the module) to its
// imports, test files left out; the other modules (bench, deploy, test) are not walked.
func modulePackages(t *testing.T) map[string][]string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil && path != root {
			return filepath.SkipDir // a module of its own
		}
		p, err := build.Default.ImportDir(path, 0)
		if err != nil {
			if _, none := err.(*build.NoGoError); none {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[filepath.ToSlash(rel)] = p.Imports
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
