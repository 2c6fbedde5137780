package offers

import (
	"strings"

	"idlepool/idle"
)

// Redacted returns o as other devices may read it: unchanged when its
// Hold is one of idle.Holds (or none), which is what every agent with
// holds sends. An agent from before holds put the policy's reason in
// words in that field ("paused: fakegame is running", "waiting: you were
// active 14 s ago"); Redacted replaces them by the hold they stand for
// (LegacyHold) and drops the signature, which covered the words and no
// longer matches what the offer says. The coordinator verifies an offer
// first and keeps and lists only its redacted form, so a pool never shows
// those words to anyone; clients redact what they list too, for a pool
// from before holds.
func (o Offer) Redacted() Offer {
	if o.Hold.Known() {
		return o
	}
	o.Hold = LegacyHold(o.State, string(o.Hold))
	o.Sig = nil
	return o
}

// LegacyHold is the hold that the reason in words of an agent from before
// holds stands for: none while computing, HoldHours for "waiting: outside
// your hours ...", HoldBattery for "waiting: on battery ...", HoldLimit
// for "waiting: CPU at ... °C ..."; any other reason (paused by the owner,
// a program or game running, the owner active, the idle time unknown,
// other programs busy, or words it does not know) is HoldOwner, the
// coarsest.
func LegacyHold(state idle.State, reason string) idle.Hold {
	switch {
	case state == idle.StateComputing:
		return idle.HoldNone
	case strings.HasPrefix(reason, "waiting: outside your hours"):
		return idle.HoldHours
	case strings.HasPrefix(reason, "waiting: on battery"):
		return idle.HoldBattery
	case strings.HasPrefix(reason, "waiting: CPU at"):
		return idle.HoldLimit
	}
	return idle.HoldOwner
}

// StateText is the offer's state and hold for people who are not its
// owner: "computing", "waiting (outside its hours)", "paused (for its
// owner)"; "state unknown" when it has none. An offer with a reason in
// words is read as Redacted.
func (o Offer) StateText() string {
	o = o.Redacted()
	s := string(o.State)
	if s == "" {
		s = "state unknown"
	}
	if o.State != idle.StateComputing {
		if h := o.Hold.Text(); h != "" {
			s += " (" + h + ")"
		}
	}
	return s
}
