package offers

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/fxamacker/cbor/v2"

	"idlepool/idle"
)

// TestRedacted: an offer with a hold is left as it is, signature and
// all; one with the policy's reason in words (an agent before holds)
// gets the hold the words stand for and loses its signature, and says
// neither the words nor anything in them.
func TestRedacted(t *testing.T) {
	k := testKey(t, 1)
	for _, tc := range []struct {
		state  idle.State
		reason string
		want   idle.Hold
		text   string
		signed bool
	}{
		{idle.StateComputing, "", idle.HoldNone, "computing", true},
		{idle.StatePaused, "owner", idle.HoldOwner, "paused (for its owner)", true},
		{idle.StateWaiting, "hours", idle.HoldHours, "waiting (outside its hours)", true},
		{idle.StateWaiting, "battery", idle.HoldBattery, "waiting (on battery)", true},
		{idle.StateWaiting, "limit", idle.HoldLimit, "waiting (at a limit)", true},
		{idle.StateComputing, "computing on 6 of 8 cores; GPU 0 skipped: another process uses 71% of it", idle.HoldNone, "computing", false},
		{idle.StatePaused, "paused: fakegame is running", idle.HoldOwner, "paused (for its owner)", false},
		{idle.StatePaused, "paused by you until 15:00", idle.HoldOwner, "paused (for its owner)", false},
		{idle.StateWaiting, "waiting: you were active 14 s ago; starting after 5 min idle", idle.HoldOwner, "waiting (for its owner)", false},
		{idle.StateWaiting, "waiting: a game ran 40 s ago; starting after 5 min idle", idle.HoldOwner, "waiting (for its owner)", false},
		{idle.StateWaiting, "waiting: idle time unknown (no input source works)", idle.HoldOwner, "waiting (for its owner)", false},
		{idle.StateWaiting, "waiting: outside your hours (next window Mon 22:00)", idle.HoldHours, "waiting (outside its hours)", false},
		{idle.StateWaiting, "waiting: on battery at 29%, below your minimum of 30%", idle.HoldBattery, "waiting (on battery)", false},
		{idle.StateWaiting, "waiting: CPU at 91 °C, ceiling 85 °C", idle.HoldLimit, "waiting (at a limit)", false},
		{idle.StateWaiting, "Waiting: something a later version says", idle.HoldOwner, "waiting (for its owner)", false},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			o := gpuOffer()
			o.State, o.Hold = tc.state, idle.Hold(tc.reason)
			o.Issued = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
			o.Expires = o.Issued.Add(DefaultTTL)
			o.Sign(k)
			r := o.Redacted()
			if r.Hold != tc.want || (r.Sig != nil) != tc.signed || r.State != tc.state {
				t.Errorf("Redacted: state %q hold %q signed %v, want %q %q %v", r.State, r.Hold, r.Sig != nil, tc.state, tc.want, tc.signed)
			}
			if got := o.StateText(); got != tc.text {
				t.Errorf("StateText %q, want %q", got, tc.text)
			}
			if tc.signed {
				if err := r.Verify(k.Public(), o.Issued); err != nil {
					t.Errorf("an offer with a hold does not verify after Redacted: %v", err)
				}
			}
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.signed && bytes.Contains(b, []byte(tc.reason)) {
				t.Errorf("redacted offer still says %q:\n%s", tc.reason, b)
			}
		})
	}
}

// TestHoldKeepsTheWireForm: the hold travels in "reason", in JSON and in
// the signed encoding, where agents before holds put their words: so an
// offer with a hold verifies on a pool before holds, and one with words
// on a pool with them (which then redacts it).
func TestHoldKeepsTheWireForm(t *testing.T) {
	k := testKey(t, 1)
	for _, reason := range []string{"owner", "paused: fakegame is running"} {
		o := gpuOffer()
		o.State, o.Hold = idle.StatePaused, idle.Hold(reason)
		o.Issued = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
		o.Expires = o.Issued.Add(DefaultTTL)
		o.Sign(k)
		var m map[string]any
		if err := cbor.Unmarshal(o.Canonical(), &m); err != nil {
			t.Fatal(err)
		}
		if m["reason"] != reason {
			t.Errorf("canonical encoding's reason %v, want %q", m["reason"], reason)
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back Offer
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`"reason":"`+reason+`"`)) || back.Hold != idle.Hold(reason) {
			t.Errorf("JSON %s, read back as hold %q", b, back.Hold)
		}
		if err := back.Verify(k.Public(), o.Issued); err != nil {
			t.Errorf("%q: Verify after JSON: %v", reason, err)
		}
	}
}

// TestCPUTimeShareInCanonical: an offer without a CPU time share encodes
// as before the field existed (a pool of API version 4 verifies it); with
// one, the share is signed, and an out-of-range share is invalid.
func TestCPUTimeShareInCanonical(t *testing.T) {
	k := testKey(t, 1)
	o := gpuOffer()
	o.Issued = time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	o.Expires = o.Issued.Add(DefaultTTL)
	o.Sign(k)
	var m map[string]any
	if err := cbor.Unmarshal(o.Canonical(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["capacity"].(map[any]any)["cpu_time_share"]; ok {
		t.Errorf("an offer without a CPU time share encodes one: %v", m["capacity"])
	}
	half := o
	half.Capacity.CPUTimeShare = 0.5
	if err := half.Verify(k.Public(), o.Issued); err == nil {
		t.Error("the CPU time share is not covered by the signature")
	}
	half.Sign(k)
	if err := half.Verify(k.Public(), o.Issued); err != nil {
		t.Errorf("an offer with a CPU time share: %v", err)
	}
	if err := cbor.Unmarshal(half.Canonical(), &m); err != nil {
		t.Fatal(err)
	}
	if got := m["capacity"].(map[any]any)["cpu_time_share"]; got != 0.5 {
		t.Errorf("canonical cpu_time_share %v, want 0.5", got)
	}
	for _, bad := range []float64{-0.5, 1.5} {
		c := half
		c.Capacity.CPUTimeShare = bad
		if err := c.Validate(); err == nil {
			t.Errorf("cpu_time_share %g validates", bad)
		}
	}
}
