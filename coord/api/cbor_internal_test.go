package api

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// jsonKeys returns the keys encoding/json gives t's fields, embedded
// structs' fields in place, in order.
func jsonKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		if f.Anonymous {
			keys = append(keys, jsonKeys(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// TestWorkRequestCBORFields: the CBOR shapes of a request and of a
// result have every key of their JSON, in the same order, and no other,
// so that a field added to WorkRequest or ResultSubmission cannot be
// left out of the CBOR form.
func TestWorkRequestCBORFields(t *testing.T) {
	for _, tc := range []struct{ cbor, json reflect.Type }{
		{reflect.TypeFor[workRequestCBOR](), reflect.TypeFor[WorkRequest]()},
		{reflect.TypeFor[workResultCBOR](), reflect.TypeFor[WorkResult]()},
	} {
		if got, want := jsonKeys(tc.cbor), jsonKeys(tc.json); !slices.Equal(got, want) {
			t.Errorf("%v's keys %v, %v's %v", tc.cbor, got, tc.json, want)
		}
	}
}
