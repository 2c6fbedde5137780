package app

import (
	"idlepool/job"
	"idlepool/offers"
)

// This file writes what jobs and owners are called, for the windows: a
// job's name with its short ID, an owner's display name beside its short
// ID. Names come from pools and their owners: they are shown as given,
// made plain (one line, no control characters), and never stand for the
// ID.

// jobText names job id for people: "pi (659b95)", its name and the first
// six digits of its ID, or the first twelve digits alone when its name is
// not known.
func jobText(id job.ID, name string) string {
	if name = offers.PlainLine(name, 40); name == "" {
		return id.String()[:12]
	}
	return name + " (" + id.String()[:6] + ")"
}

// ownerText names an owner for people: its display name beside its short
// ID, with its link when it gave one: "Ada's lab (idk3m9x2qa…),
// https://example.org/ada".
func ownerText(owner, name, link string) string {
	s := offers.OwnerLabel(owner, offers.PlainLine(name, 64))
	if link != "" {
		s += ", " + offers.PlainLine(link, 300)
	}
	return s
}
