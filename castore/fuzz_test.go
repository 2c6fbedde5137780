package castore

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzManifestJSON decodes manifests as they come from a coordinator: a
// decoded manifest is valid and encodes back to one that decodes equal;
// anything else is an ErrBadManifest.
func FuzzManifestJSON(f *testing.F) {
	m, err := Split(bytes.NewReader(testData(2*ChunkSize+3, 9)), ChunkSize, nil)
	if err != nil {
		f.Fatal(err)
	}
	good, _ := json.Marshal(m)
	f.Add(good)
	f.Add([]byte(`{"sha256":"` + string(bytes.Repeat([]byte("0"), 64)) + `","size":0,"chunkSize":262144,"chunks":[]}`))
	f.Add([]byte(`{"size":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			if !errors.Is(err, ErrBadManifest) && !errors.As(err, &se) && !errors.As(err, &te) {
				t.Fatalf("error %v is not ErrBadManifest", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("decoded an invalid manifest: %v", err)
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Manifest
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v", err)
		}
	})
}
