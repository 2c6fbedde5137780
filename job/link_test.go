package job

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestManifestLink checks that a job's link is kept, named in its ID only
// when set (the golden IDs of manifests without one stay the same, see
// TestGoldenJobIDs), carried through the canonical encoding, and refused
// with a message naming the field when it is not an https URL.
func TestManifestLink(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := "name = \"t\"\ndescription = \"a test job\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nfield = \"s\"\nrule = \"sum\"\n"
	planText := func(text string) (*Job, error) {
		m, err := ParseManifest("job.toml", dir, []byte(text))
		if err != nil {
			return nil, err
		}
		return Plan(m)
	}
	plain, err := planText(base)
	if err != nil {
		t.Fatal(err)
	}
	linked, err := planText("link = \"https://example.org/t\"\n" + base)
	if err != nil {
		t.Fatal(err)
	}
	if linked.Manifest.Link != "https://example.org/t" {
		t.Errorf("Link = %q", linked.Manifest.Link)
	}
	if linked.ID == plain.ID {
		t.Error("the link does not change the job ID")
	}
	if strings.Contains(string(plain.Canonical), "link") {
		t.Error("a job without a link names one in its canonical encoding")
	}
	back, err := FromCanonical(linked.Canonical, func(Digest) string { return linked.Program.Path })
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != linked.ID || back.Manifest.Link != linked.Manifest.Link || back.Manifest.Description != "a test job" {
		t.Errorf("rebuilt job %s link %q description %q, want %s and the same", back.ID, back.Manifest.Link, back.Manifest.Description, linked.ID)
	}
	for _, tc := range []struct{ link, want string }{
		{"http://example.org/t", "not an https URL"},
		{"https://example.org/a b", "space"},
		{"https://user@example.org/", "user name"},
		{"https:///path", "names no host"},
	} {
		_, err := planText("link = \"" + tc.link + "\"\n" + base)
		me, ok := errors.AsType[*ManifestError](err)
		if !ok || me.Field != "link" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("link %q: error %v, want a ManifestError on field link saying %q", tc.link, err, tc.want)
		}
	}
}
