package offers

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"idlepool/identity"
)

// PlainLine makes text that came from a pool (a job's name or
// description, an owner's display name: words chosen by their owners) one
// plain line for a label or a terminal: control and bidirectional
// formatting characters (Unicode TR #9), which could move a terminal's
// cursor or reorder the text around them, become U+FFFD; runs of white
// space, line breaks included, become one space; and text past max
// characters (runes) is cut to max-1 of them and "…".
func PlainLine(text string, max int) string {
	text = strings.Join(strings.Fields(text), " ")
	text = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			return utf8.RuneError
		}
		return r
	}, text)
	if utf8.RuneCountInString(text) <= max {
		return text
	}
	return string([]rune(text)[:max-1]) + "…"
}

// OwnerName returns the display name of owner (an owner ID) from p, the
// owner's signed profile as a pool served it: p's name when p is owner's
// and verifies (identity.Profile.Verify), else "". A profile that does not
// verify is not shown: a pool cannot put a name on someone else's ID.
func OwnerName(owner string, p *identity.Profile) string {
	if p == nil || p.Owner != owner || p.Verify() != nil {
		return ""
	}
	return p.Name
}

// OwnerLink is OwnerName's counterpart for the owner's link: p's link
// when p is owner's and verifies, else "".
func OwnerLink(owner string, p *identity.Profile) string {
	if OwnerName(owner, p) == "" {
		return ""
	}
	return p.Link
}

// OwnerLabel names an owner for people: the display name beside the
// short ID, "Ada's lab (idk3m9x2qa…)", or the short ID alone when the
// owner has no verified name (name ""). The ID is always shown: names
// are chosen by their owners and may repeat.
func OwnerLabel(owner, name string) string {
	if name == "" {
		return ShortID(owner)
	}
	return name + " (" + ShortID(owner) + ")"
}

// OwnerText is OwnerLabel of the owner of l with its profile's name.
func (l Listing) OwnerText() string { return OwnerLabel(l.Owner, OwnerName(l.Owner, l.OwnerProfile)) }
