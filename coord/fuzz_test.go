package coord

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"idlepool/castore"
	"idlepool/job"
	"idlepool/pool"
)

// The fuzz targets feed the decoders of outside input arbitrary bytes:
// they must never panic, and what they accept must satisfy their checks.
// Seed corpora live in testdata/fuzz/<target>/.

func FuzzDecodeLeaseRequest(f *testing.F) {
	for _, s := range []string{`{"max":1}`, `{}`, `{"max":-1}`, `{"max":1e9}`, `{"max":1}{}`, ` {"max" : 64} `, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeLeaseRequest(data)
		if err == nil && (r.Max < 1 || r.Max > MaxLeases) {
			t.Errorf("accepted max %d", r.Max)
		}
	})
}

func FuzzDecodeSubmission(f *testing.F) {
	ok := pool.ReplicaDigest([]byte("42"), false, "")
	fail := pool.ReplicaDigest(nil, true, "trap")
	for _, s := range []string{
		`{"digest":"` + ok.String() + `","result":"NDI="}`,
		`{"digest":"` + fail.String() + `","failed":true,"reason":"trap"}`,
		`{"digest":"` + fail.String() + `","failed":true,"reason":"trap","machine":true}`,
		`{"digest":"` + ok.String() + `","result":"NDI=","machine":true}`,
		`{"digest":"` + ok.String() + `","result":"NDI=","failed":true}`,
		`{"digest":"zz","result":"NDI="}`,
		`{"result":"!!"}`,
		`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":1,"count":123456789}}`,
		`{"digest":"` + fail.String() + `","failed":true,"reason":"trap","work":{"rule":1,"count":9223372036854775807}}`,
		`{"digest":"` + fail.String() + `","failed":true,"reason":"trap","machine":true,"work":{"rule":1,"count":5}}`,
		`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":0,"count":5}}`,
		`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":1,"count":18446744073709551615}}`,
	} {
		f.Add([]byte(s))
	}
	big := bytes.Repeat([]byte("x"), 2000)
	m, err := castore.Split(bytes.NewReader(big), castore.ChunkSize, func(castore.Digest, []byte) error { return nil })
	if err != nil {
		f.Fatal(err)
	}
	ref, err := json.Marshal(ResultSubmission{Digest: HexDigest(m.SHA256), Ref: &m})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ref)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSubmission(data)
		if err != nil {
			return
		}
		if s.Ref != nil {
			if castore.Digest(s.Digest) != s.Ref.SHA256 || len(s.Result) > 0 || s.Failed || s.Ref.Size <= pool.InlineResultBytes || s.Ref.Validate() != nil {
				t.Errorf("accepted a reference that is not alone, over 1 KiB, valid and of its digest: %+v", s)
			}
			return
		}
		if s.Digest != pool.ReplicaDigest(s.Result, s.Failed, s.Reason) {
			t.Errorf("accepted a submission whose digest does not match")
		}
		if s.Failed && len(s.Result) > 0 {
			t.Errorf("accepted a failure with a result")
		}
		if s.Machine && !s.Failed {
			t.Errorf("accepted a machine-dependent failure that is not a failure")
		}
		if w := s.Work; w != nil && (s.Machine || w.Rule < 1 || w.Count > pool.MaxWorkCount) {
			t.Errorf("accepted work %+v with machine %v", *w, s.Machine)
		}
	})
}

// TestDecodeSubmissionWork: the work a submission counted (version 6)
// goes through to the pool; a machine-dependent failure carries none, and
// a count needs a rule and must fit.
func TestDecodeSubmissionWork(t *testing.T) {
	ok := pool.ReplicaDigest([]byte("42"), false, "")
	fail := pool.ReplicaDigest(nil, true, "trap")
	s, err := decodeSubmission([]byte(`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":1,"count":123456789}}`))
	if err != nil || s.Work == nil || *s.Work != (pool.Work{Rule: 1, Count: 123456789}) {
		t.Errorf("decode: %+v, %v; want work 123456789 by rule 1", s.Work, err)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"digest":"` + fail.String() + `","failed":true,"reason":"trap","machine":true,"work":{"rule":1,"count":5}}`, "not for a machine-dependent failure"},
		{`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":0,"count":5}}`, "rule 0"},
		{`{"digest":"` + ok.String() + `","result":"NDI=","work":{"rule":1,"count":18446744073709551615}}`, "larger than"},
	} {
		if _, err := decodeSubmission([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode %s: %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}

func FuzzParseAuthorization(f *testing.F) {
	for _, s := range []string{
		"Idlepool peer=idaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, ts=1700000000000, sig=" + strings.Repeat("A", 86) + "==",
		"Idlepool peer=x",
		"Bearer abc",
		"Idlepool ,,,",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		a, err := parseAuthorization(h)
		if err != nil {
			return
		}
		if !validID(a.Peer) || len(a.Sig) != 64 {
			t.Errorf("accepted %q as %+v", h, a)
		}
	})
}

func FuzzDecodeRegistration(f *testing.F) {
	for _, s := range []string{
		`{"key":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","owner_key":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","endorsement":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==","name":"laptop","invite":"x"}`,
		`{"key":"AAAA"}`,
		`{"name":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeRegistration(data)
		if err == nil && (len(r.Key) != 32 || len(r.OwnerKey) != 32 || len(r.Endorsement) != 64) {
			t.Errorf("accepted %+v", r)
		}
	})
}

func FuzzDecodeJobRequest(f *testing.F) {
	f.Add([]byte(`{"canonical":"pGhpZGxlcG9vbAE="}`))
	f.Add([]byte(`{"canonical":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeJobRequest(data)
		if err != nil {
			return
		}
		// What the handler does next with it must not panic either.
		job.FromCanonical(r.Canonical, func(job.Digest) string { return "/nonexistent" })
	})
}

func FuzzDecodeAck(f *testing.F) {
	f.Add([]byte(`{"upto":3}`))
	f.Add([]byte(`{"upto":-3}`))
	f.Add([]byte(`{"upto":1e400}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decodeAck(data)
		if err == nil && a.Upto < 0 {
			t.Errorf("accepted upto %d", a.Upto)
		}
	})
}
