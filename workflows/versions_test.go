package workflows

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/noderollout/noderollout/api"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/workflow"
)

// getVersionCall is one workflow.GetVersion in the package's code.
type getVersionCall struct {
	at  string // file:line
	id  string // the change ID's constant
	max int64
}

// getVersionCalls finds every workflow.GetVersion call in the package's non-test files.
func getVersionCalls(t *testing.T) []getVersionCall {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var calls []getVersionCall
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "GetVersion" {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "workflow" {
				return true
			}
			at := fset.Position(call.Pos()).String()
			require.Len(t, call.Args, 4, at)
			id, ok := call.Args[1].(*ast.Ident)
			require.True(t, ok, "%s: GetVersion's change ID must be one of versions.go's constants, not an expression", at)
			lit, ok := call.Args[3].(*ast.BasicLit)
			require.True(t, ok, "%s: GetVersion's maxSupported must be a number", at)
			maxVersion, err := strconv.ParseInt(lit.Value, 10, 64)
			require.NoError(t, err)
			calls = append(calls, getVersionCall{at: at, id: id.Name, max: maxVersion})
			return true
		})
	}
	return calls
}

// changeIDs are versions.go's constants by name: their values.
func changeIDs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "versions.go", nil, 0)
	require.NoError(t, err)
	ids := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					ids[n.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return ids
}

// Every change ID the code asks is in the ledger with as many versions as the code knows,
// and the ledger lists no ID the code no longer asks.
func TestEveryGetVersionIsInTheLedger(t *testing.T) {
	ids := changeIDs(t)
	inLedger := map[string]change{}
	for _, c := range ledger {
		require.NotContains(t, inLedger, c.id, "versions.go lists %s twice", c.id)
		inLedger[c.id] = c
	}
	asked := map[string]bool{}
	for _, call := range getVersionCalls(t) {
		id, declared := ids[call.id]
		require.True(t, declared, "%s: GetVersion asks %s, which is not a change ID of versions.go", call.at, call.id)
		c, listed := inLedger[id]
		require.True(t, listed, "%s: GetVersion asks %q (%s), which versions.go's ledger does not list: add what it changes, since when, the fixtures that pin each branch and when the old one can go", call.at, id, call.id)
		require.Len(t, c.what, int(call.max)+1, "%s: %q goes up to version %d; the ledger says what %d versions do", call.at, id, call.max, len(c.what))
		asked[id] = true
	}
	for id := range inLedger {
		require.True(t, asked[id], "versions.go's ledger lists %q, which no GetVersion asks any more", id)
	}
}

// fixture is what a recorded history says of itself: its workflow type and version markers.
type fixture struct {
	workflowType string
	markers      map[string]workflow.Version
}

func readFixture(t *testing.T, name string) fixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err, "versions.go names %s", name)
	var h struct {
		Events []struct {
			Started *struct {
				WorkflowType struct{ Name string } `json:"workflowType"`
			} `json:"workflowExecutionStartedEventAttributes"`
			Marker *struct {
				MarkerName string `json:"markerName"`
				Details    map[string]struct {
					Payloads []struct{ Data []byte } `json:"payloads"`
				} `json:"details"`
			} `json:"markerRecordedEventAttributes"`
		} `json:"events"`
	}
	require.NoError(t, json.Unmarshal(b, &h), name)
	f := fixture{markers: map[string]workflow.Version{}}
	for _, e := range h.Events {
		if e.Started != nil {
			f.workflowType = e.Started.WorkflowType.Name
		}
		if e.Marker == nil || e.Marker.MarkerName != "Version" {
			continue
		}
		var id string
		var version workflow.Version
		require.NoError(t, json.Unmarshal(e.Marker.Details["change-id"].Payloads[0].Data, &id), name)
		require.NoError(t, json.Unmarshal(e.Marker.Details["version"].Payloads[0].Data, &version), name)
		f.markers[id] = version
	}
	return f
}

var testName = regexp.MustCompile(`\bTest[A-Z]\w*`)

// The ledger's fixtures record what it says (a version's marker, or none for DefaultVersion,
// in a history of the workflow that asks), the tests it names exist, every node type is
// listed with its own histories, and every fixture in testdata is named somewhere.
func TestTheLedgerTellsTheTruthAboutItsFixtures(t *testing.T) {
	named := map[string]bool{}
	tests := testFunctions(t)
	for _, c := range ledger {
		require.True(t, c.asked != "" && c.since != "" && c.removable != "", "%s: say when it is asked, since when and when it can go", c.id)
		require.True(t, len(c.pinned) > 0 || c.covered != "", "%s: name the fixtures of each branch, or the tests that cover it", c.id)
		for version, files := range c.pinned {
			require.Less(t, int(version), len(c.what), "%s pins version %d, which the ledger does not describe", c.id, version)
			for _, name := range files {
				named[name] = true
				f := readFixture(t, name)
				require.Contains(t, c.workflow, f.workflowType, "%s: %s is a %s history", c.id, name, f.workflowType)
				got, recorded := f.markers[c.id]
				if version == workflow.DefaultVersion {
					require.False(t, recorded, "%s: %s records version %d, not DefaultVersion", c.id, name, got)
				} else {
					require.True(t, recorded && got == version, "%s: %s records %v (%v), not version %d", c.id, name, got, recorded, version)
				}
			}
		}
		for _, test := range testName.FindAllString(c.covered, -1) {
			require.True(t, tests[test], "%s: the ledger names %s, which is no test of this package or the e2e suite", c.id, test)
		}
	}
	var types []string
	for _, n := range nodeTypes {
		types = append(types, n.name)
		for _, name := range n.fixtures {
			named[name] = true
			require.Equal(t, n.name, readFixture(t, name).workflowType, name)
		}
	}
	require.ElementsMatch(t, api.NodeWorkflowTypes, types)
	all, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	for _, path := range all {
		require.True(t, named[filepath.Base(path)], "testdata/%s replays a branch versions.go does not name: add it to the ledger", filepath.Base(path))
	}
}

// testFunctions are the names of the test functions of this package and the e2e suite.
func testFunctions(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*_test.go")
	require.NoError(t, err)
	e2e, err := filepath.Glob(filepath.Join("..", "test", "e2e", "*_test.go"))
	require.NoError(t, err)
	files = append(files, e2e...)
	names := map[string]bool{}
	for _, name := range files {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && strings.HasPrefix(fn.Name.Name, "Test") {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}

// TestReplayRecordedHistories replays every history in testdata, recorded from real runs on
// the local stack (test/e2e TestRecordReplayFixtures: continue-as-new, pause/resume and
// setParallelism, an abort with Jobs running, a node busy with another rollout, a paced rollout
// whose canary was approved by the update, a rollout on a cluster with a disruption budget and its
// budget coordinator, a fleet rollout in two waves, and NodeRollout children that succeeded,
// were cancelled mid-Job, or were cordoned, drained, soaked and uncordoned around their Job). A change to workflow code that would
// break running workflows fails here; such a change belongs behind workflow.GetVersion.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			require.NoError(t, ReplayFixture(file))
		})
	}
}
