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

// TestWorkResultCBORFields: the CBOR shape of a result has every key of
// WorkResult's JSON, in the same order, and no other, so that a field
// added to ResultSubmission cannot be left out of the CBOR form.
func TestWorkResultCBORFields(t *testing.T) {
	want := jsonKeys(reflect.TypeFor[WorkResult]())
	got := jsonKeys(reflect.TypeFor[workResultCBOR]())
	if !slices.Equal(got, want) {
		t.Fatalf("workResultCBOR's keys %v, WorkResult's %v", got, want)
	}
}
