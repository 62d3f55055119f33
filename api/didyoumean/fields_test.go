package didyoumean

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Initial int `json:"initial"`
}

// ownDecoder is a struct that decodes itself: the walk must not look inside it.
type ownDecoder struct {
	Known string `json:"known"`
}

func (o *ownDecoder) UnmarshalJSON([]byte) error { return nil }

// textDecoder decodes itself from a JSON string, as time.Time does.
type textDecoder struct {
	Known string `json:"known"`
}

func (d *textDecoder) UnmarshalText([]byte) error { return nil }

type Promoted struct {
	Zone string `json:"zone"`
}

type promotedUnexported struct {
	Rack string `json:"rack"`
}

type PtrPromoted struct {
	Row string `json:"row"`
}

type shadow struct {
	Inner struct{} `json:"inner"` // hidden by the outer field of the same name
}

type walked struct {
	Name     string             `json:"name"`
	Optional int                `json:"optional,omitempty"`
	Skipped  string             `json:"-"`
	Untagged string             // encoding/json's key is the Go name
	unexp    string             // never decoded, even as "unexp"
	Inner    inner              `json:"inner"`
	Ptr      *inner             `json:"ptr"`
	PtrPtr   **inner            `json:"ptrPtr"`
	Map      map[string]inner   `json:"map"`
	Slice    []inner            `json:"slice"`
	SlicePtr []*inner           `json:"slicePtr"`
	Own      ownDecoder         `json:"own"`
	OwnPtr   *ownDecoder        `json:"ownPtr"`
	Text     textDecoder        `json:"text"`
	Time     time.Time          `json:"time"`
	Raw      json.RawMessage    `json:"raw"`
	Tagged   promotedUnexported `json:"tagged"`
	Promoted
	*PtrPromoted
	promotedUnexported
	shadow
}

var _ = walked{}.unexp // read, for the linters: it exists for the walk to pass over

func TestUnknownFieldsFollowsEncodingJSON(t *testing.T) {
	cases := []struct {
		name, json string
		want       []string
		strict     bool // encoding/json with DisallowUnknownFields takes it too
	}{
		{"tags, omitempty, untagged", `{"name":"","optional":1,"Untagged":""}`, nil, true},
		{"skipped, unexported, case", `{"Skipped":"","Name":"","unexp":"","untagged":""}`, []string{"Name", "Skipped", "unexp", "untagged"}, false},
		{"nested struct and pointers", `{"inner":{"x":1},"ptr":{"y":1},"ptrPtr":{"z":1}}`, []string{"inner.x", "ptr.y", "ptrPtr.z"}, false},
		{"maps and slices are leaves", `{"map":{"a":{"x":1}},"slice":[{"x":1}],"slicePtr":[{"x":1}]}`, nil, false},
		{"own decoders are leaves", `{"own":{"x":1},"ownPtr":{"x":1},"text":{"x":1},"time":{"x":1},"raw":{"x":1}}`, nil, false},
		{"embedded structs promote", `{"zone":"a","row":"b","rack":"c"}`, nil, true},
		{"an embedded struct is no key", `{"Promoted":{},"PtrPromoted":{},"promotedUnexported":{}}`, []string{"Promoted", "PtrPromoted", "promotedUnexported"}, false},
		{"a tagged field is not promoted", `{"tagged":{"rack":"b","x":1}}`, []string{"tagged.x"}, false},
		{"shallower field wins", `{"inner":{"initial":1}}`, nil, true},
		{"not an object is left to the decoder", `{"inner":3,"ptr":null}`, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := paths(t, c.json, reflect.TypeFor[walked](), ""); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %q, want %q", got, c.want)
			}
			if c.strict {
				d := json.NewDecoder(strings.NewReader(c.json))
				d.DisallowUnknownFields()
				if err := d.Decode(&walked{}); err != nil {
					t.Errorf("encoding/json disagrees: %v", err)
				}
			}
		})
	}
}

func TestUnknownFieldsNamesPathAndHintAfterPrefix(t *testing.T) {
	var fields map[string]json.RawMessage
	mustDecode(t, `{"inner":{"inital":1,"zzz":2},"nmae":"x","ptr":{"Initial":1}}`, &fields)
	got := UnknownFields(fields, reflect.TypeFor[*walked](), "rollout.")
	want := []UnknownField{
		{Path: "rollout.inner.inital", Hint: `; did you mean "rollout.inner.initial"?`},
		{Path: "rollout.inner.zzz"},
		{Path: "rollout.nmae", Hint: `; did you mean "rollout.name"?`},
		{Path: "rollout.ptr.Initial", Hint: `; did you mean "rollout.ptr.initial"?`},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

// A hidden name is unknown at any depth and never suggested.
func TestUnknownFieldsHidden(t *testing.T) {
	got := paths(t, `{"name":"a","inner":{"initial":1}}`, reflect.TypeFor[walked](), "", "name", "initial")
	if want := []string{"inner.initial", "name"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	var fields map[string]json.RawMessage
	mustDecode(t, `{"nme":"a"}`, &fields)
	if got := UnknownFields(fields, reflect.TypeFor[walked](), "", "name"); got[0].Hint != "" {
		t.Errorf("suggested a hidden field: %+v", got)
	}
}

func paths(t *testing.T, doc string, typ reflect.Type, prefix string, hidden ...string) []string {
	t.Helper()
	var fields map[string]json.RawMessage
	mustDecode(t, doc, &fields)
	var out []string
	for _, f := range UnknownFields(fields, typ, prefix, hidden...) {
		out = append(out, f.Path)
	}
	return out
}

func mustDecode(t *testing.T, doc string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		t.Fatal(err)
	}
}
