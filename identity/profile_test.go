package identity

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testKey(t *testing.T, b byte) *Key {
	t.Helper()
	k, err := FromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var issued = time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)

func TestNewProfileVerifies(t *testing.T) {
	k := testKey(t, 1)
	p, err := NewProfile(k, "Ada's lab", "https://example.org/ada", issued)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Verify(); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if p.Owner != k.ID() || !p.Issued.Equal(issued.Truncate(time.Millisecond)) {
		t.Errorf("profile = %+v, want owner %s issued at the millisecond", p, k.ID())
	}
}

func TestProfileTampered(t *testing.T) {
	k, other := testKey(t, 1), testKey(t, 2)
	good, err := NewProfile(k, "Ada's lab", "https://example.org/ada", issued)
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := NewProfile(other, "Ada's lab", "", issued)
	for _, tc := range []struct {
		name  string
		edit  func(*Profile)
		field string
	}{
		{"name changed", func(p *Profile) { p.Name = "Bob's lab" }, "signature"},
		{"link changed", func(p *Profile) { p.Link = "https://evil.example/" }, "signature"},
		{"issued changed", func(p *Profile) { p.Issued = p.Issued.Add(time.Millisecond) }, "signature"},
		{"signed by another key", func(p *Profile) { p.Sig = forged.Sig }, "signature"},
		{"key of another owner", func(p *Profile) { p.Key = other.Public() }, "owner"},
		{"short key", func(p *Profile) { p.Key = p.Key[:5] }, "key"},
		{"control character", func(p *Profile) { p.Name = "Ada\nBob" }, "name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			p.Key = bytes.Clone(good.Key)
			tc.edit(&p)
			err := p.Verify()
			pe, ok := errors.AsType[*ProfileError](err)
			if !ok || !errors.Is(err, ErrBadProfile) || pe.Field != tc.field {
				t.Fatalf("Verify = %v, want a ProfileError about %q", err, tc.field)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		want string // in the error
	}{
		{"Ada's lab", true, ""},
		{"Лаборатория Ады 🧪", true, ""},
		{strings.Repeat("é", MaxNameChars), true, ""},
		{strings.Repeat("é", MaxNameChars+1), false, "65 characters; at most 64"},
		{"", false, "is empty"},
		{"   ", false, "is empty"},
		{" Ada", false, "begins or ends with a space"},
		{"Ada\tlab", false, "U+0009"},
		{"Ada\x1b[31mlab", false, "U+001B"},
		{"Ada\u202egnp.exe", false, "U+202E"},
		{"Ada\u2028lab", false, "U+2028"},
		{"Ada\xfflab", false, "not valid UTF-8"},
	} {
		err := CheckName(tc.name)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckName(%q) = %v, want nil", tc.name, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckName(%q) = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckLink(t *testing.T) {
	for _, tc := range []struct {
		link string
		want string // "" when valid
	}{
		{"", ""},
		{"https://example.org", ""},
		{"https://example.org/lab?x=1#top", ""},
		{"http://example.org", "not an https URL"},
		{"javascript:alert(1)", "not an https URL"},
		{"example.org", "not an https URL"},
		{"https://", "names no host"},
		{"https://paypal.com@evil.example/", "user name"},
		{"https://example.org/a b", "space"},
		{"https://example.org/\u202e", "control character"},
		{"https://example.org/" + strings.Repeat("a", MaxLinkBytes), "at most 256"},
	} {
		err := CheckLink(tc.link)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckLink(%q) = %v, want nil", tc.link, err)
			}
			continue
		}
		if err == nil || !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckLink(%q) = %v, want an error saying %q", tc.link, err, tc.want)
		}
	}
}

func TestNewProfileRefusesBadInput(t *testing.T) {
	k := testKey(t, 1)
	if _, err := NewProfile(k, "Ada\x00", "", issued); !errors.Is(err, ErrBadProfile) {
		t.Errorf("NewProfile with a NUL = %v, want ErrBadProfile", err)
	}
	if _, err := NewProfile(k, "Ada", "ftp://example.org", issued); !errors.Is(err, ErrBadProfile) {
		t.Errorf("NewProfile with an ftp link = %v, want ErrBadProfile", err)
	}
}

func TestSaveLoadProfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, ProfileFile)
	k := testKey(t, 1)
	p, err := NewProfile(k, "Ada's lab", "https://example.org/ada", issued)
	if err != nil {
		t.Fatal(err)
	}
	if err := SaveProfile(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := LoadProfile(path, k.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != p.Name || got.Link != p.Link || !got.Issued.Equal(p.Issued) {
		t.Errorf("loaded %+v, want %+v", got, p)
	}
	if _, err := LoadProfile(path, testKey(t, 2).ID()); !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), "another owner") {
		t.Errorf("LoadProfile for another owner = %v, want ErrBadProfile saying another owner", err)
	}
	// Edited by hand: the signature no longer holds.
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, bytes.Replace(b, []byte("Ada's lab"), []byte("Bob's lab"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadProfile(path, k.ID()); !errors.Is(err, ErrBadProfile) || !strings.Contains(err.Error(), "signature") {
		t.Errorf("LoadProfile of an edited file = %v, want ErrBadProfile about the signature", err)
	}
	if _, err := LoadProfile(filepath.Join(dir, "none.json"), k.ID()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadProfile of a missing file = %v, want os.ErrNotExist", err)
	}
}

// FuzzProfileVerify checks that any JSON a pool or a peer may send as a
// profile is decoded and checked without panicking, and that a profile
// that verifies has a name and link that pass their checks.
func FuzzProfileVerify(f *testing.F) {
	k, _ := FromSeed(bytes.Repeat([]byte{1}, 32))
	p, _ := NewProfile(k, "Ada's lab", "https://example.org/ada", issued)
	good, _ := json.Marshal(p)
	f.Add(good)
	f.Add(bytes.Replace(good, []byte("Ada"), []byte("Bob"), 1))
	f.Add([]byte(`{"owner":"id","key":"","name":"\u202e","sig":""}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var p Profile
		if json.Unmarshal(b, &p) != nil {
			return
		}
		if p.Verify() == nil && (CheckName(p.Name) != nil || CheckLink(p.Link) != nil || p.Owner != IDOf(p.Key)) {
			t.Fatalf("profile %+v verifies with a refused field", p)
		}
	})
}
