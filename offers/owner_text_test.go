package offers

import (
	"bytes"
	"testing"
	"time"

	"idlepool/identity"
)

func TestOwnerText(t *testing.T) {
	k, _ := identity.FromSeed(bytes.Repeat([]byte{3}, 32))
	other, _ := identity.FromSeed(bytes.Repeat([]byte{4}, 32))
	p, err := identity.NewProfile(k, "Ada's lab", "https://example.org/ada", time.Unix(1e9, 0))
	if err != nil {
		t.Fatal(err)
	}
	renamed := p
	renamed.Name = "Bob's lab" // changed after signing
	theirs, _ := identity.NewProfile(other, "Mallory", "", time.Unix(1e9, 0))
	short := ShortID(k.ID())
	for _, tc := range []struct {
		name string
		p    *identity.Profile
		want string
		link string
	}{
		{"no profile", nil, short, ""},
		{"verified", &p, "Ada's lab (" + short + ")", "https://example.org/ada"},
		{"changed after signing", &renamed, short, ""},
		{"another owner's profile", &theirs, short, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Listing{Owner: k.ID(), OwnerProfile: tc.p}
			if got := l.OwnerText(); got != tc.want {
				t.Errorf("OwnerText = %q, want %q", got, tc.want)
			}
			if got := OwnerLink(l.Owner, tc.p); got != tc.link {
				t.Errorf("OwnerLink = %q, want %q", got, tc.link)
			}
		})
	}
}

// TestPlainLine: words from a pool become one plain line: control and
// bidirectional formatting characters replaced, white space runs folded,
// long text cut to max runes with "…".
func TestPlainLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"pi", 10, "pi"},
		{"  Sums of squares,\n\tfor the class ", 80, "Sums of squares, for the class"},
		{"evil\x1b[2Jname", 80, "evil\uFFFD[2Jname"},
		{"Ada\u202elab", 80, "Ada\uFFFDlab"},
		{"ééééé", 4, "ééé…"},
		{"abcd", 4, "abcd"},
	} {
		if got := PlainLine(c.in, c.max); got != c.want {
			t.Errorf("PlainLine(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}
