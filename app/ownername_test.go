package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/test"

	"idlepool/identity"
)

// TestSettingsOwnerName: the Pools tab gives the owner a display name and
// link, signed with the owner key into the profile file the engine sends
// to the pools; a refused name or link is said under the fields and
// writes nothing; a new window shows the name saved; without an owner key
// the section is not there.
func TestSettingsOwnerName(t *testing.T) {
	owner, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), identity.ProfileFile)
	at := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC)
	seed := func(d *Deps) {
		d.Owner, d.OwnerProfile = owner, path
		d.Now = func() time.Time { return at }
	}
	fx := newSettingsFixture(t, seed)
	b := fx.form.owner
	if b == nil {
		t.Fatal("the Pools tab has no name section although the app has the owner key")
	}
	if b.name.Text != "" || b.link.Text != "" {
		t.Errorf("a fresh owner shows name %q, link %q", b.name.Text, b.link.Text)
	}

	for _, c := range []struct{ name, link, says string }{
		{"", "", "The name is refused: it is empty"},
		{strings.Repeat("x", identity.MaxNameChars+1), "", "The name is refused"},
		{"Ada\u202eslab", "", "control character"},
		{"Ada's lab", "http://example.org/ada", "The link is refused"},
	} {
		b.name.SetText(c.name)
		b.link.SetText(c.link)
		test.Tap(b.save)
		if !b.err.Visible() || !strings.Contains(b.err.Text, c.says) {
			t.Errorf("name %q, link %q: error %q (shown %v), want it to say %q", c.name, c.link, b.err.Text, b.err.Visible(), c.says)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("name %q, link %q was refused but the profile file exists (%v)", c.name, c.link, err)
		}
	}

	b.name.SetText("Ada's lab")
	b.link.SetText("https://example.org/ada")
	test.Tap(b.save)
	if b.err.Visible() {
		t.Fatalf("a good name was refused: %s", b.err.Text)
	}
	if !strings.Contains(b.status.Text, "Ada's lab") {
		t.Errorf("status after saving: %q", b.status.Text)
	}
	p, err := identity.LoadProfile(path, owner.ID())
	if err != nil {
		t.Fatalf("the saved profile does not load and verify: %v", err)
	}
	if p.Name != "Ada's lab" || p.Link != "https://example.org/ada" || !p.Issued.Equal(at) {
		t.Errorf("saved profile %+v", p)
	}

	again := newSettingsFixture(t, seed)
	if got := again.form.owner; got.name.Text != "Ada's lab" || got.link.Text != "https://example.org/ada" {
		t.Errorf("a new window shows name %q, link %q", got.name.Text, got.link.Text)
	}

	if none := newSettingsFixture(t, nil); none.form.owner != nil {
		t.Error("without an owner key the Pools tab still offers a name")
	}
}
