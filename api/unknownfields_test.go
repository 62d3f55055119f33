package api

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/noderollout/noderollout/api/didyoumean"
)

// walkerShapes has every kind of field the old walker met: maps and slices of structs,
// pointers, and leaves that decode themselves.
type walkerShapes struct {
	Name    string           `json:"name"`
	Batch   *Batch           `json:"batch"`
	Order   Order            `json:"order"`
	ByName  map[string]Batch `json:"byName"`
	List    []Batch          `json:"list"`
	PtrList []*Batch         `json:"ptrList"`
	Max     IntOrPercent     `json:"max"`
	At      time.Time        `json:"at"`
	AtPtr   *time.Time       `json:"atPtr"`
	Skipped string           `json:"-"`
	private string           // never decoded, even as "private"
}

var _ = walkerShapes{}.private // read, for the linters: it exists for the walk to pass over

// The one walker reports, for each input, the same set of paths the old workflows walker
// (unknownFieldProblems, removed) did: whether a running workflow's request fails, and on
// which fields, must not change on replay. The paths were recorded from the old walker, and
// checked against it while both were in the tree.
func TestOneWalkerReportsTheOldWalkersPaths(t *testing.T) {
	shapes := reflect.TypeFor[walkerShapes]()
	cases := []struct {
		name string
		typ  reflect.Type
		json string
		want []string
	}{
		{"top level and nested pointer", shapes, `{"nmae":"a","batch":{"inital":1,"growth":"x","zz":2}}`, []string{"batch.inital", "batch.zz", "nmae"}},
		{"nested struct", shapes, `{"order":{"by":"name","lable":"x"}}`, []string{"order.lable"}},
		{"maps are not walked", shapes, `{"byName":{"a":{"inital":1}}}`, nil},
		{"slices of structs are not walked", shapes, `{"list":[{"inital":1}],"ptrList":[{"inital":1}]}`, nil},
		{"own decoders are leaves", shapes, `{"max":{"x":1},"at":{"x":1},"atPtr":{"x":1}}`, nil},
		{"not an object", shapes, `{"batch":3,"order":null,"list":{"x":1}}`, nil},
		{"json:\"-\" and unexported are unknown", shapes, `{"Skipped":"","-":"","private":"","Name":""}`, []string{"-", "Name", "Skipped", "private"}},
		{"rollout request", reflect.TypeFor[rolloutRequestFields](),
			`{"name":"a","batch":{"inital":1},"canary":{"selectr":"x"},"owner":{"controller":true},"jobTemplateRef":{"nmae":"cm"},
			  "maxFailures":{"x":1},"maintenance":{"drain":{"timout":"1m"},"health":{"conditions":{"Ready":"True"},"x":1}},
			  "maintenanceWindow":{"days":["Mon"],"tz":"UTC"},"topology":{"key":"k","max":1},"order":{"by":"label","lable":"x"},
			  "progress":{},"decodeProblems":[],"parallelismSetToZero":true}`,
			[]string{"batch.inital", "canary.selectr", "decodeProblems", "jobTemplateRef.nmae", "maintenance.drain.timout", "maintenance.health.x",
				"maintenanceWindow.tz", "order.lable", "owner.controller", "parallelismSetToZero", "progress", "topology.max"}},
		// The fleet's decoder takes rollout out before the walk and decodes it as above.
		{"fleet request", reflect.TypeFor[fleetRequestFields](),
			`{"name":"a","waves":[[{"x":1}]],"maxFailedCluster":1,"taskqueue":"q","decodeFailed":true}`,
			[]string{"decodeFailed", "maxFailedCluster", "taskqueue"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var raw map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(c.json), &raw))
			var got []string
			for _, f := range didyoumean.UnknownFields(raw, c.typ, "") {
				got = append(got, f.Path)
			}
			require.Equal(t, c.want, sortedCopy(got))
		})
	}
}

// The one walker reads a field as the old one did unless it is untagged, embedded, tagged
// `json:"-,"`, a pointer to a pointer, a struct that decodes itself (other than time.Time), or
// a second field of one name. The request types have none of these, so no request reports
// other fields than it did: replay cannot tell the walkers apart.
func TestRequestTypesHaveNoFieldTheWalkersReadDifferently(t *testing.T) {
	seen := map[reflect.Type]bool{}
	requireReadAlike(t, reflect.TypeFor[rolloutRequestFields](), seen)
	requireReadAlike(t, reflect.TypeFor[fleetRequestFields](), seen)
	require.Greater(t, len(seen), 10, "the check reached the nested request types")
}

// requireReadAlike checks st's fields, and those of the structs both walkers go into.
func requireReadAlike(t *testing.T, st reflect.Type, seen map[reflect.Type]bool) {
	t.Helper()
	if seen[st] {
		return
	}
	seen[st] = true
	names := map[string]bool{}
	for i := range st.NumField() {
		f := st.Field(i)
		require.False(t, f.Anonymous, "%s.%s is embedded", st, f.Name)
		if !f.IsExported() || f.Tag.Get("json") == "-" {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		require.NotContains(t, []string{"", "-"}, name, "%s.%s: untagged or \"-,\"", st, f.Name)
		require.False(t, names[name], "%s: two fields named %q", st, name)
		names[name] = true
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		require.NotEqual(t, reflect.Pointer, ft.Kind(), "%s.%s: pointer to pointer", st, f.Name)
		if ft.Kind() != reflect.Struct || ft == reflect.TypeFor[time.Time]() || (st == reflect.TypeFor[fleetRequestFields]() && name == "rollout") {
			continue // the fleet's decoder takes rollout out before the walk
		}
		require.False(t, reflect.PointerTo(ft).Implements(reflect.TypeFor[json.Unmarshaler]()), "%s.%s decodes itself", st, f.Name)
		require.False(t, reflect.PointerTo(ft).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()), "%s.%s decodes itself", st, f.Name)
		requireReadAlike(t, ft, seen)
	}
}

func sortedCopy(s []string) []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(slices.Values(s))
}
