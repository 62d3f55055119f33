package didyoumean

import (
	"encoding"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// UnknownField is a key of a JSON object that its Go struct has no field for.
type UnknownField struct {
	Path string // dotted from the object's top, e.g. canary.selectr
	Hint string // `; did you mean "canary.selector"?`: the closest known field at that depth, by its path; or ""
}

// UnknownFields names each key of fields that the struct type t has no json field for, at any
// depth of nested structs, by its path after prefix ("" at the top; "rollout." for an object
// nested in another). Names in hidden count as unknown although t has them (fields a caller
// may not set).
//
// A field is known if encoding/json would decode it: by its json tag's name or else its Go
// name, exported, not `json:"-"`, or promoted from an embedded struct. Names are
// case-sensitive. The walk goes into a known field's object only when the field is a struct
// (through pointers) that encoding/json fills field by field: maps, slices and types with
// their own UnmarshalJSON or UnmarshalText (time.Time, IntOrPercent) are leaves.
//
// Workflow code calls it while decoding a request, so it is pure and its output is in key
// order at each depth, never in map order.
func UnknownFields(fields map[string]json.RawMessage, t reflect.Type, prefix string, hidden ...string) []UnknownField {
	known := knownFields(indirect(t), hidden)
	var unknown []UnknownField
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		ft, ok := known.types[k]
		if !ok {
			unknown = append(unknown, UnknownField{Path: prefix + k, Hint: pathHint(prefix, k, known.names)})
			continue
		}
		var nested map[string]json.RawMessage
		if walksInto(ft) && json.Unmarshal(fields[k], &nested) == nil {
			unknown = append(unknown, UnknownFields(nested, ft, prefix+k+".", hidden...)...)
		}
	}
	return unknown
}

// fieldSet is the JSON fields of a struct type.
type fieldSet struct {
	names []string // in declaration order, shallowest first: Closest keeps the first of a tie
	types map[string]reflect.Type
}

// knownFields is t's JSON fields less hidden, with those promoted from embedded structs
// level by level, so that a shallower field hides a deeper one of its name, as in encoding/json.
func knownFields(t reflect.Type, hidden []string) fieldSet {
	s := fieldSet{types: map[string]reflect.Type{}}
	seen := map[reflect.Type]bool{}
	for level := []reflect.Type{t}; len(level) > 0; {
		var next []reflect.Type
		for _, lt := range level {
			if !seen[lt] { // an embedded struct that embeds itself through a pointer
				seen[lt] = true
				next = append(next, s.addFields(lt, hidden)...)
			}
		}
		level = next
	}
	return s
}

// addFields adds t's own fields to s and returns the embedded structs whose fields it promotes.
func (s *fieldSet) addFields(t reflect.Type, hidden []string) []reflect.Type {
	var embedded []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		name, promotes := jsonName(t.Field(i))
		_, taken := s.types[name]
		switch {
		case promotes != nil:
			embedded = append(embedded, promotes)
		case name == "" || taken || slices.Contains(hidden, name):
		default:
			s.types[name] = t.Field(i).Type
			s.names = append(s.names, name)
		}
	}
	return embedded
}

// jsonName is the key encoding/json decodes f from, or "" if none; or, for an untagged
// embedded struct (exported or not), that struct, whose fields count as its parent's.
func jsonName(f reflect.StructField) (string, reflect.Type) {
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", nil
	}
	name, _, _ := strings.Cut(tag, ",") // `json:"-,"` is the key "-"
	embeddedStruct := f.Anonymous && indirect(f.Type).Kind() == reflect.Struct
	switch {
	case embeddedStruct && name == "":
		return "", indirect(f.Type)
	case !f.IsExported() && !embeddedStruct:
		return "", nil
	case name == "":
		return f.Name, nil
	}
	return name, nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walksInto says whether a value of type t is an object of fields to check: a struct that
// decodes field by field. One with a decoder of its own decides for itself which keys it takes.
func walksInto(t reflect.Type) bool {
	t = indirect(t)
	p := reflect.PointerTo(t)
	return t.Kind() == reflect.Struct && !p.Implements(jsonUnmarshaler) && !p.Implements(textUnmarshaler)
}

func indirect(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// pathHint is Hint for key at prefix, naming the suggestion by its full path as the unknown
// field is named: batch.inital gets "batch.initial", not "initial".
func pathHint(prefix, key string, names []string) string {
	if c, ok := Closest(key, names); ok {
		return hint(prefix + c)
	}
	return ""
}
