package offers

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
	"idlepool/idle"
	"idlepool/job"
)

func testKey(t testing.TB, b byte) *identity.Key {
	t.Helper()
	k, err := identity.FromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func signedOffer(t testing.TB) (Offer, *identity.Key) {
	k := testKey(t, 1)
	o := gpuOffer()
	hours, err := idle.ParseSchedule("Mon-Fri 22:00-07:00; Sat,Sun")
	if err != nil {
		t.Fatal(err)
	}
	o.Capacity.Schedule = hours
	o.Accept = Accept{GPUPrograms: true, MaxMemoryMiB: 4096, MaxTaskTime: time.Hour,
		PreferOwners: []string{"ida"}, RefuseOwners: []string{"idb"}, RefuseJobs: []job.ID{jobB}, AcceptJobs: []job.ID{jobA}, Weight: 0.25}
	o.Issued = time.Date(2026, 3, 2, 12, 0, 0, 123456789, time.UTC)
	o.Expires = o.Issued.Add(DefaultTTL)
	o.Sign(k)
	return o, k
}

func TestSignVerify(t *testing.T) {
	o, k := signedOffer(t)
	if o.Peer != k.ID() {
		t.Fatalf("Sign set Peer %q, want %q", o.Peer, k.ID())
	}
	now := o.Issued.Add(time.Second)
	if err := o.Verify(k.Public(), now); err != nil {
		t.Fatalf("Verify: %v", err)
	}

	// Through JSON, as the coordinator receives it.
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var got Offer
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if err := got.Verify(k.Public(), now); err != nil {
		t.Fatalf("Verify after JSON: %v\n%s", err, b)
	}
	if diff := cmp.Diff(o.Canonical(), got.Canonical()); diff != "" {
		t.Errorf("canonical encoding changed through JSON (-before +after):\n%s", diff)
	}
	if !bytes.Contains(b, []byte(`"accept_jobs":["aa00`)) {
		t.Errorf("JSON does not write job IDs as hex:\n%s", b)
	}

	tests := []struct {
		name   string
		change func(*Offer)
		pub    []byte
		now    time.Time
		want   error
	}{
		{name: "more cores claimed", change: func(o *Offer) { o.Capacity.Cores++ }, want: ErrBadSignature},
		{name: "GPU added", change: func(o *Offer) { o.Capacity.GPUs = append(o.Capacity.GPUs, idle.GPUOffer{UUID: "x"}) }, want: ErrBadSignature},
		{name: "refusal dropped", change: func(o *Offer) { o.Accept.RefuseJobs = nil }, want: ErrBadSignature},
		{name: "expiry pushed", change: func(o *Offer) { o.Expires = o.Expires.Add(time.Hour) }, want: ErrBadSignature},
		{name: "hours widened", change: func(o *Offer) { o.Capacity.Schedule = nil }, want: ErrBadSignature},
		{name: "hold changed", change: func(o *Offer) { o.Hold = idle.HoldBattery }, want: ErrBadSignature},
		{name: "no signature", change: func(o *Offer) { o.Sig = nil }, want: ErrBadSignature},
		{name: "another peer's key", pub: testKey(t, 2).Public(), want: ErrWrongPeer},
		{name: "short key", pub: []byte{1, 2, 3}, want: ErrWrongPeer},
		{name: "expired", now: o.Expires, want: ErrExpired},
		{name: "no pool", change: func(o *Offer) { o.Pool = "" }, want: ErrInvalid},
		{name: "weight over 1", change: func(o *Offer) { o.Accept.Weight = 1.5 }, want: ErrInvalid},
		{name: "expires before issued", change: func(o *Offer) { o.Expires = o.Issued }, want: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := got
			c.Capacity.GPUs = append([]idle.GPUOffer(nil), got.Capacity.GPUs...)
			if tc.change != nil {
				tc.change(&c)
			}
			pub, at := k.Public(), now
			if tc.pub != nil {
				pub = tc.pub
			}
			if !tc.now.IsZero() {
				at = tc.now
			}
			if err := c.Verify(pub, at); !errors.Is(err, tc.want) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCanonicalNilAndEmptyAlike(t *testing.T) {
	a := cpuOffer()
	b := a
	a.Capacity.GPUs, a.Capacity.Schedule = nil, nil
	b.Accept.RefuseOwners, b.Accept.AcceptJobs = []string{}, []job.ID{}
	if !bytes.Equal(a.Canonical(), b.Canonical()) {
		t.Error("nil and empty lists encode differently")
	}
}

// FuzzOfferJSON: whatever a peer sends, decoding it never panics, and an
// offer that decodes and validates keeps its canonical encoding through JSON again, so
// its signature means the same on every side.
func FuzzOfferJSON(f *testing.F) {
	o, _ := signedOffer(f)
	b, err := json.Marshal(o)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"peer":"x","accept":{"accept_jobs":["zz"]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var o Offer
		if json.Unmarshal(b, &o) != nil {
			return
		}
		if o.Validate() != nil {
			return
		}
		c := o.Canonical()
		again, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var o2 Offer
		if err := json.Unmarshal(again, &o2); err != nil {
			t.Fatalf("re-decode: %v\n%s", err, again)
		}
		if !bytes.Equal(c, o2.Canonical()) {
			t.Fatalf("canonical encoding changed through JSON:\n%s", again)
		}
	})
}

// FuzzListingJSON: a pool's listing never panics the decoder, and one
// that decodes survives JSON again unchanged.
func FuzzListingJSON(f *testing.F) {
	b, err := json.Marshal(gpuJob(8192, "8.0"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"job":"00","requirements":{"gpu":true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l Listing
		if json.Unmarshal(b, &l) != nil {
			return
		}
		again, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		var l2 Listing
		if err := json.Unmarshal(again, &l2); err != nil {
			t.Fatalf("re-decode: %v\n%s", err, again)
		}
		if diff := cmp.Diff(l, l2); diff != "" {
			t.Fatalf("listing changed through JSON (-first +second):\n%s", diff)
		}
		Match(cpuOffer(), l, monday)
	})
}
