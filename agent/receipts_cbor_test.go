package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/home"
	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// cursorStore is a recordingStore that also records the ledger cursor
// the receipt follower stores.
type cursorStore struct {
	recordingStore
	cursor uint64
}

func (s *cursorStore) SetLedgerCursor(_ context.Context, _ string, seq uint64) error {
	s.cursor = seq
	return nil
}

// receiptsServer is a coordinator's GET /v1/receipts on 127.0.0.1 that
// answers body with Content-Type ctype whatever the request asks, and
// records the Accept header it was sent.
type receiptsServer struct {
	mu          sync.Mutex
	ctype, body string
	accept      []string
}

func (s *receiptsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accept = append(s.accept, r.Header.Get("Accept"))
	if r.URL.Path != "/v1/receipts" || r.URL.Query().Get("after") == "" {
		http.Error(w, `{"error":"no such route","code":"not_found"}`, http.StatusNotFound)
		return
	}
	if r.URL.Query().Get("after") != "0" { // one page only
		s.ctype, s.body = "application/json", `{"entries":[]}`
	}
	w.Header().Set("Content-Type", s.ctype)
	w.Write([]byte(s.body))
}

func (s *receiptsServer) answer(ctype string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctype, s.body = ctype, string(body)
}

// The device asks for receipts in CBOR and reads the answer by its
// Content-Type: the compact form, or JSON from a coordinator that
// ignores Accept (one older than the compact form), giving the same
// entries, which it verifies and records. A malformed or inconsistent
// compact answer is an error naming what is wrong, and the device
// records nothing of it: no contribution, no cursor.
func TestReceiptsCBOROrJSON(t *testing.T) {
	gen := func() *identity.Key {
		k, err := identity.Generate()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	coordKey, dev := gen(), gen()
	es := make([]pool.Entry, 6)
	for i := range es {
		es[i] = pool.Entry{Seq: uint64(i + 1), Kind: pool.KindReceipt, Pool: "lab", Job: job.ID{1}, Task: int64(i),
			Peer: dev.ID(), Owner: "idowner", Lease: "l" + string(rune('a'+i)), Cost: 2, Time: 1_767_000_000_000}
	}
	pool.SignBatch(es[:4], job.Digest{}, coordKey.Sign)
	pool.SignBatch(es[4:], es[3].Hash(), coordKey.Sign)
	var jsonBody []byte
	jsonBody = append(jsonBody, `{"entries":[`...)
	for i, e := range es {
		if i > 0 {
			jsonBody = append(jsonBody, ',')
		}
		var err error
		if jsonBody, err = e.AppendJSON(jsonBody); err != nil {
			t.Fatal(err)
		}
	}
	jsonBody = append(jsonBody, "]}\n"...)
	compact := pool.AppendEntriesCBOR(nil, es)
	wrongBatch := pool.AppendEntriesCBOR(nil, es[4:]) // then the first entry names batch 1
	wrongBatch = []byte(strings.Replace(string(wrongBatch), "batch\x00", "batch\x01", 1))
	confirmed := []string{"confirm la", "confirm lb", "confirm lc", "confirm ld", "confirm le", "confirm lf"}

	srv := &receiptsServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	tests := []struct {
		name    string
		ctype   string
		body    []byte
		wantErr string // "": the entries come and are recorded
	}{
		{name: "CBOR", ctype: "application/cbor", body: compact},
		{name: "JSON of an older coordinator", ctype: "application/json", body: jsonBody},
		{name: "JSON with a charset", ctype: "application/json; charset=utf-8", body: jsonBody},
		{name: "CBOR, trailing bytes", ctype: "application/cbor", body: append(append([]byte(nil), compact...), 0xf6),
			wantErr: "extraneous data"},
		{name: "CBOR, truncated", ctype: "application/cbor", body: compact[:len(compact)-10], wantErr: "unexpected EOF"},
		{name: "CBOR, a batch not in the answer", ctype: "application/cbor", body: wrongBatch,
			wantErr: "entry 0 (seq 5): batch 1, but the answer has 1"},
		{name: "JSON sent as CBOR", ctype: "application/cbor", body: jsonBody, wantErr: "malformed CBOR"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv.answer(tc.ctype, tc.body)
			st := &cursorStore{}
			a, err := New(Config{PoolURL: ts.URL, Home: home.Dirs{Config: t.TempDir(), Cache: t.TempDir()},
				DeviceKey: dev, OwnerKey: gen(), Executor: noExec{}, Store: st, HTTP: ts.Client()})
			if err != nil {
				t.Fatal(err)
			}
			a.poolName, a.verifier = "lab", pool.NewEntryVerifier(coordKey.Public())

			got, err := a.c.Receipts(context.Background(), 0, receiptPage)
			if tc.wantErr != "" {
				if !errors.Is(err, pool.ErrEntriesCBOR) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Receipts: error %v, want one matching pool.ErrEntriesCBOR saying %q", err, tc.wantErr)
				}
				if got != nil {
					t.Errorf("%d entries with the error", len(got))
				}
			} else if err != nil {
				t.Fatalf("Receipts: %v", err)
			} else if diff := cmp.Diff(es, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("entries (-sent +got):\n%s", diff)
			}

			err = a.pollReceipts(context.Background())
			if tc.wantErr != "" {
				if !errors.Is(err, pool.ErrEntriesCBOR) {
					t.Errorf("pollReceipts: %v, want pool.ErrEntriesCBOR", err)
				}
				if len(st.calls) != 0 || st.cursor != 0 {
					t.Errorf("a malformed answer recorded %v, cursor %d", st.calls, st.cursor)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(confirmed, st.calls); diff != "" || st.cursor != 6 {
				t.Errorf("cursor %d, want 6; store calls (-want +got):\n%s", st.cursor, diff)
			}
		})
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	for _, h := range srv.accept {
		if h != receiptsAccept {
			t.Errorf("asked with Accept %q, want %q", h, receiptsAccept)
		}
	}
}
