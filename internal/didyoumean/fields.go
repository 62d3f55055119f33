package didyoumean

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
)

// UnknownField is a key of a JSON object that its Go struct has no field for.
type UnknownField struct {
	Path string // dotted from the object's top, e.g. canary.selectr
	Hint string // Hint's suggestion among the known fields at that depth, or ""
}

// UnknownFields names, sorted, each key of fields that the struct type t has no json field
// for, at any depth of nested structs. Names in hidden count as unknown although t has them
// (fields a caller may not set).
func UnknownFields(fields map[string]json.RawMessage, t reflect.Type, hidden ...string) []UnknownField {
	return unknownFields(fields, t, "", hidden)
}

func unknownFields(fields map[string]json.RawMessage, t reflect.Type, prefix string, hidden []string) []UnknownField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	known := map[string]reflect.Type{}
	var names []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || !f.IsExported() || slices.Contains(hidden, name) {
			continue
		}
		known[name] = f.Type
		names = append(names, name)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var unknown []UnknownField
	for _, k := range keys {
		ft, ok := known[k]
		if !ok {
			unknown = append(unknown, UnknownField{Path: prefix + k, Hint: Hint(k, names)})
			continue
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			var nested map[string]json.RawMessage
			if json.Unmarshal(fields[k], &nested) == nil {
				unknown = append(unknown, unknownFields(nested, ft, prefix+k+".", hidden)...)
			}
		}
	}
	return unknown
}
