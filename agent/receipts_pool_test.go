package agent_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/agent"
	"idlepool/coord/api"
	"idlepool/pool"
)

// A real coordinator on 127.0.0.1 serves a device's receipts in both
// forms: the compact CBOR one to a request that accepts it (as the
// agent's client asks), JSON to one that does not; both hold the same
// entries, which verify, and the devices, reading the compact form,
// confirmed every contribution.
func TestReceiptsBothForms(t *testing.T) {
	exec := &fakeExec{}
	j := planJob(t, "receipts-forms", 12, "")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	var devs []*device
	for range 2 {
		d := newDevice(t, nil)
		devs = append(devs, d)
		startAgent(t, co.url, d, exec, 2, nil)
	}
	sub := newSubmitter(t, co.url, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sub.run(t, ctx, j); err != nil {
		t.Fatalf("follow: %v", err)
	}
	settle(t, devs...)
	entries := ledger(t, sub.c)
	for _, d := range devs {
		checkHistory(t, d, entries)
	}

	hc := httpClient(t)
	fetch := func(d *device, accept string) (string, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", co.url+"/v1/receipts?after=0&max=1000", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(api.APIHeader, strconv.Itoa(api.APIVersion))
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		api.SignRequest(req, nil, d.key, time.Now())
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /v1/receipts: %d %s %v", resp.StatusCode, b, err)
		}
		return resp.Header.Get("Content-Type"), b
	}
	for _, d := range devs {
		ctype, body := fetch(d, "")
		var asJSON api.Receipts
		if err := json.Unmarshal(body, &asJSON); ctype != "application/json" || err != nil {
			t.Fatalf("without Accept: %s answer: %v", ctype, err)
		}
		ctype, body = fetch(d, "application/cbor")
		if ctype != "application/cbor" {
			t.Fatalf("with Accept: application/cbor: a %s answer", ctype)
		}
		asCBOR, err := pool.DecodeEntriesCBOR(body)
		if err != nil {
			t.Fatal(err)
		}
		c, err := agent.NewClient(co.url, d.key, hc)
		if err != nil {
			t.Fatal(err)
		}
		viaClient, err := c.Receipts(ctx, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(asJSON.Entries) == 0 {
			t.Fatal("no receipts")
		}
		t.Logf("%d entries: %d bytes of CBOR", len(asCBOR), len(body))
		for name, got := range map[string][]pool.Entry{"CBOR": asCBOR, "the client's": viaClient} {
			if diff := cmp.Diff(asJSON.Entries, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s entries differ from JSON's (-json +got):\n%s", name, diff)
			}
		}
		v := pool.NewEntryVerifier(co.key)
		for _, e := range viaClient {
			if err := v.Verify(e); err != nil {
				t.Errorf("entry %d: %v", e.Seq, err)
			}
			if e.Tree == nil {
				t.Errorf("entry %d came without its batch's tree", e.Seq)
			}
		}
	}
}
