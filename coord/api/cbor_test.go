package api_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"idlepool/castore"
	"idlepool/coord/api"
	"idlepool/pool"
)

// workRequest is a request with every kind of field set: results with
// bytes, a failure with its reason, a kept result's manifest, work, and
// transfer reports.
func workRequest(t *testing.T) api.WorkRequest {
	t.Helper()
	var d api.HexDigest
	for i := range d {
		d[i] = byte(i)
	}
	ref, err := castore.Split(bytes.NewReader(bytes.Repeat([]byte("x"), 70_000)), 16<<10, func(castore.Digest, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	return api.WorkRequest{
		Results: []api.WorkResult{
			{Lease: "0123456789abcdef0123456789abcdef", ResultSubmission: api.ResultSubmission{Digest: d, Result: []byte{0, 1, 2, 0xff}, Work: &pool.Work{Rule: 1, Count: math.MaxInt64}}},
			{Lease: "fedcba9876543210fedcba9876543210", ResultSubmission: api.ResultSubmission{Digest: d, Failed: true, Reason: "trap: unreachable ✗", Machine: true}},
			{Lease: "00000000000000000000000000000001", ResultSubmission: api.ResultSubmission{Digest: api.HexDigest(ref.SHA256), Ref: &ref}},
		},
		Lease:     16,
		Transfers: []api.TransferReport{{Job: d, Transfer: pool.Transfer{Direct: 1 << 40, Relayed: 2, Coordinator: 3}}},
	}
}

// TestWorkRequestCBOR: a request in CBOR decodes to what was encoded,
// field for field, as its JSON does; its keys are the JSON's; a result
// is a byte string, and the digest the JSON's hex text.
func TestWorkRequestCBOR(t *testing.T) {
	in := workRequest(t)
	data, err := api.MarshalCBOR(in)
	if err != nil {
		t.Fatal(err)
	}
	var out api.WorkRequest
	if err := api.UnmarshalCBOR(data, &out); err != nil {
		t.Fatalf("UnmarshalCBOR: %v", err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", out, in)
	}
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON api.WorkRequest
	if err := json.Unmarshal(js, &fromJSON); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromJSON, out) {
		t.Fatalf("CBOR and JSON decode differently:\n%+v\n%+v", out, fromJSON)
	}
	if len(data) >= len(js) {
		t.Errorf("CBOR form is %d bytes, its JSON %d: want it smaller", len(data), len(js))
	}
	for _, want := range [][]byte{
		[]byte("\x67results"), []byte("\x65lease"), []byte("\x66digest"),
		append([]byte("\x66result\x44"), 0, 1, 2, 0xff), // a byte string of 4
		append([]byte("\x78\x40"), hex.EncodeToString(in.Results[0].Digest[:])...),
		[]byte("\x69chunkSize"), // the manifest's JSON key
	} {
		if !bytes.Contains(data, want) {
			t.Errorf("CBOR form lacks % x", want)
		}
	}
}

// TestUnmarshalCBORRefuses: a request that is not exactly one well-formed
// map of known keys is refused with an error naming what is wrong, and
// the answer decoder alone skips an unknown key.
func TestUnmarshalCBORRefuses(t *testing.T) {
	good, err := api.MarshalCBOR(api.WorkRequest{Lease: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(good, []byte("\xa1\x65lease\x03")) {
		t.Fatalf("WorkRequest{Lease: 3} is % x", good)
	}
	for _, tc := range []struct {
		name, data, want string
	}{
		{"unknown key", "\xa2\x65lease\x03\x65extra\x01", "unknown key"},
		{"key in another case", "\xa1\x65Lease\x03", "unknown key"},
		{"key twice", "\xa2\x65lease\x03\x65lease\x04", "appears twice"},
		{"trailing bytes", "\xa1\x65lease\x03\x00", "trailing data"},
		{"wrong type", "\xa1\x65lease\x63abc", `field "lease"`},
		{"not a map", "\x83\x01\x02\x03", "CBOR array"},
		{"truncated", "\xa1\x65lea", "CBOR"},
		{"indefinite length", "\xbf\x65lease\x03\xff", "indefinite-length"},
		{"a tag", "\xa1\x65lease\xc1\x03", "tag"},
		{"bad digest", "\xa1\x67results\x81\xa2\x65lease\x61x\x66digest\x63abc", "digest"},
		{"a short digest", "\xa1\x67results\x81\xa1\x66digest\x45" + strings.Repeat("\x00", 5), "digest"},
		{"a digest as bytes", "\xa1\x67results\x81\xa1\x66digest\x58\x20" + strings.Repeat("\x00", 32), "digest"},
		{"bad manifest", "\xa1\x67results\x81\xa1\x63ref\xa1\x66sha256\x63abc", "manifest"},
		{"a simple value", "\xa1\x65lease\xf8\x20", "simple values"},
		{"undefined", "\xa1\x65lease\xf7", "simple values"},
		{"a float", "\xa1\x65lease\xf9\x3c\x00", "want an integer, not a CBOR float"},
		{"a result as text", "\xa1\x67results\x81\xa1\x66result\x61x", "want a byte string"},
		{"a huge length", "\xa1\x65lease\x5b\x10\x00\x00\x00\x00\x00\x00\x00", "truncated CBOR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r api.WorkRequest
			err := api.UnmarshalCBOR([]byte(tc.data), &r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("UnmarshalCBOR(% x) = %v, want an error saying %q", tc.data, err, tc.want)
			}
		})
	}
	// A digest's length may come in a longer head than the shortest.
	long := "\xa1\x67results\x81\xa1\x66digest\x79\x00\x40" + strings.Repeat("ab", 32)
	var r api.WorkRequest
	if err := api.UnmarshalCBOR([]byte(long), &r); err != nil || r.Results[0].Digest[0] != 0xab {
		t.Errorf("a digest in a two-byte head: %+v, %v", r, err)
	}
	var a api.WorkAnswer
	if err := api.UnmarshalCBORAnswer([]byte("\xa3\x65lease\x61x\x66status\x19\x01\x90\x63new\x01"), &a); err != nil || a.Status != 400 || a.Lease != "x" {
		t.Fatalf("an answer with a key this client does not know: %+v, %v", a, err)
	}
}

// TestWorkResponseCBOR: AppendWorkResponseCBOR writes exactly what the
// generic encoder (MarshalCBOR, the form's definition) writes, for
// answers with and without errors, leases and a lease error, and long
// strings whose heads take more bytes; the client's decoder reads it
// back to the same answer.
func TestWorkResponseCBOR(t *testing.T) {
	var job api.HexDigest
	job[31] = 7
	deadline := time.Date(2026, 12, 4, 20, 31, 4, 123456789, time.FixedZone("", 3600))
	long := strings.Repeat("é", 200) // 400 bytes: a two-byte length
	for _, tc := range []struct {
		name string
		r    api.WorkResponse
	}{
		{"empty", api.WorkResponse{Results: []api.WorkAnswer{}, Leases: []api.LeaseGrant{}}},
		{"nil slices", api.WorkResponse{}},
		{"taken and leased", api.WorkResponse{
			Results: []api.WorkAnswer{{Lease: "0123456789abcdef0123456789abcdef", Status: 200}},
			Leases: []api.LeaseGrant{
				{Lease: "fedcba9876543210fedcba9876543210", Job: job, Task: 0, Deadline: deadline},
				{Lease: "fedcba9876543210fedcba9876543211", Job: job, Task: 1 << 40, Deadline: deadline.UTC()},
				{Lease: "fedcba9876543210fedcba9876543212", Job: job, Task: -25},
			}}},
		{"refused", api.WorkResponse{
			Results:    []api.WorkAnswer{{Lease: "a", Status: 409, Code: "task_decided", Error: long}, {Lease: "b", Status: 410, Error: "x"}},
			Leases:     []api.LeaseGrant{},
			LeaseError: &api.WorkAnswer{Status: 409, Code: "no_offer", Error: "no offer"}}},
		{"many", api.WorkResponse{Results: make([]api.WorkAnswer, 300), Leases: make([]api.LeaseGrant, 24)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := api.MarshalCBOR(tc.r)
			if err != nil {
				t.Fatal(err)
			}
			got := api.AppendWorkResponseCBOR([]byte("x"), &tc.r)
			if !bytes.Equal(got[1:], want) || got[0] != 'x' {
				t.Fatalf("AppendWorkResponseCBOR:\n% x\nMarshalCBOR:\n% x", got[1:], want)
			}
			var back api.WorkResponse
			if err := api.UnmarshalCBORAnswer(got[1:], &back); err != nil {
				t.Fatal(err)
			}
			if len(back.Results) != len(tc.r.Results) || len(back.Leases) != len(tc.r.Leases) || (back.LeaseError == nil) != (tc.r.LeaseError == nil) {
				t.Fatalf("decoded %+v, want %+v", back, tc.r)
			}
			for i, g := range tc.r.Leases {
				if b := back.Leases[i]; b.Lease != g.Lease || b.Job != g.Job || b.Task != g.Task || !b.Deadline.Equal(g.Deadline) {
					t.Errorf("lease %d: decoded %+v, want %+v", i, b, g)
				}
			}
		})
	}
	// Text that is not UTF-8 is mended, not sent as an invalid text string.
	r := api.WorkResponse{Results: []api.WorkAnswer{{Lease: "a", Status: 400, Error: "bad \xff byte"}}}
	var back api.WorkResponse
	if err := api.UnmarshalCBORAnswer(api.AppendWorkResponseCBOR(nil, &r), &back); err != nil || back.Results[0].Error != "bad \uFFFD byte" {
		t.Fatalf("invalid UTF-8: %+v, %v", back, err)
	}
}

// BenchmarkWorkCBOR compares a coordinator's two halves of a POST
// /v1/work of 20 results and 20 leases, in JSON and in CBOR: decoding
// the request and encoding the answer.
func BenchmarkWorkCBOR(b *testing.B) {
	var d api.HexDigest
	req := api.WorkRequest{Lease: 20}
	resp := api.WorkResponse{}
	for i := range 20 {
		req.Results = append(req.Results, api.WorkResult{Lease: "0123456789abcdef0123456789abcdef",
			ResultSubmission: api.ResultSubmission{Digest: d, Result: []byte(`{"value":0.25}`), Work: &pool.Work{Rule: 1, Count: 1234567}}})
		resp.Results = append(resp.Results, api.WorkAnswer{Lease: "0123456789abcdef0123456789abcdef", Status: 200})
		resp.Leases = append(resp.Leases, api.LeaseGrant{Lease: "0123456789abcdef0123456789abcdef", Job: d, Task: int64(i), Deadline: time.Now()})
	}
	js, _ := json.Marshal(req)
	cb, _ := api.MarshalCBOR(req)
	b.Run("request/json", func(b *testing.B) {
		for b.Loop() {
			var r api.WorkRequest
			if err := json.Unmarshal(js, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("request/cbor", func(b *testing.B) {
		for b.Loop() {
			var r api.WorkRequest
			if err := api.UnmarshalCBOR(cb, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("answer/cbor", func(b *testing.B) {
		buf := make([]byte, 0, 8192)
		for b.Loop() {
			buf = api.AppendWorkResponseCBOR(buf[:0], &resp)
		}
	})
}
