package coord

import (
	"math"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
)

// A receipt poll's answer, written entry by entry, is the very answer
// writeJSON gives for Receipts: the same status, headers and bytes.
func TestWriteReceiptsMatchesWriteJSON(t *testing.T) {
	e := pool.Entry{Seq: 7, Kind: pool.KindReceipt, Pool: "p<&>", Job: job.Digest{1}, Task: 3, Peer: "dev", Owner: "own",
		Lease: pool.NewLeaseID(), Digest: job.Digest{2}, Cost: 0.25, Work: 9, Time: 1_767_000_000_000, Sig: []byte{1, 2, 3},
		Tree: &pool.TreeProof{Size: 3, Index: 1, Path: []job.Digest{{3}, {4}}}}
	alone := e
	alone.Seq, alone.Tree, alone.Reason, alone.Work = 8, nil, "why \"not\"", 0
	for _, tc := range []struct {
		name    string
		entries []pool.Entry
	}{
		{"none", []pool.Entry{}},
		{"one", []pool.Entry{e}},
		{"several", []pool.Entry{e, alone, e}},
		{"unencodable cost", []pool.Entry{{Cost: math.NaN()}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, got := httptest.NewRecorder(), httptest.NewRecorder()
			writeJSON(want, 200, Receipts{Entries: tc.entries})
			writeReceipts(got, tc.entries)
			if got.Code != want.Code {
				t.Errorf("status %d, want %d", got.Code, want.Code)
			}
			if diff := cmp.Diff(want.Header(), got.Header()); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(want.Body.String(), got.Body.String()); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}
}

// A receipts request is answered in CBOR when its Accept names
// application/cbor with a quality above 0, in JSON otherwise.
func TestAcceptsCBOR(t *testing.T) {
	for _, tc := range []struct {
		accept []string
		want   bool
	}{
		{nil, false},
		{[]string{"application/json"}, false},
		{[]string{"*/*"}, false},
		{[]string{"application/cbor"}, true},
		{[]string{"application/cbor, application/json;q=0.5"}, true},
		{[]string{"text/plain,APPLICATION/CBOR ; q=0.2"}, true},
		{[]string{"application/json", "application/cbor"}, true},
		{[]string{"application/cbor;q=0"}, false},
		{[]string{"application/cbor;q=0.000"}, false},
		{[]string{"application/cbor;q=bad"}, false},
		{[]string{"application/cbor-seq"}, false},
		{[]string{"application/cbor;;"}, false},
		{[]string{"application/*"}, false},
		{[]string{"application/json, application/cbor;q=0.1"}, false},
		{[]string{"application/json;q=0.5, application/cbor;q=0.5"}, true},
		{[]string{"application/cbor;q=1.000"}, true},
		{[]string{"application/cbor;q=0.001"}, true},
		{[]string{"application/cbor;q=NaN"}, false},
		{[]string{"application/cbor;q=Inf"}, false},
		{[]string{"application/cbor;q=2"}, false},
		{[]string{"application/cbor;q=1.5"}, false},
		{[]string{"application/cbor;q=0x1p-1"}, false},
		{[]string{"application/cbor;q=0.5000"}, false},
		{[]string{"application/cbor;q=.5"}, false},
		{[]string{"application/json;q=2, application/cbor;q=0.5"}, true},
	} {
		r := httptest.NewRequest("GET", "/v1/receipts", nil)
		for _, h := range tc.accept {
			r.Header.Add("Accept", h)
		}
		if got := acceptsCBOR(r); got != tc.want {
			t.Errorf("Accept %q: CBOR %v, want %v", tc.accept, got, tc.want)
		}
	}
}
