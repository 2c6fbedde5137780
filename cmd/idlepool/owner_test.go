package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"idlepool/identity"
	"idlepool/pool"
)

// TestOwnerNameInJobs: an owner names itself with `idlepool owner
// set-name`; a donor browsing the pool with `idlepool jobs` sees that
// name beside the owner's short ID, and the job's description and link
// under it. Names that are not one line of text and links that are not
// https are refused with a message; a profile edited by hand is not used.
func TestOwnerNameInJobs(t *testing.T) {
	srv, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	defer srv.stop()
	submitter, donor := t.TempDir(), t.TempDir()

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"owner", "set-name", "Ada\x1b[31m lab"}, "control character"},
		{[]string{"owner", "set-name", strings.Repeat("x", 65)}, "at most 64"},
		{[]string{"owner", "set-name", "Ada's lab", "--link", "http://example.org/ada"}, "not an https URL"},
		{[]string{"owner", "set-name"}, "needs one NAME"},
	} {
		out := idlepool(t, submitter, tc.args...)
		if out.code != 2 || !strings.Contains(out.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, out.code, out.stderr, tc.want)
		}
	}
	out := idlepool(t, submitter, "owner")
	if out.code != 0 || !strings.Contains(out.stdout, "(none; pools show the owner ID alone)") {
		t.Fatalf("owner before a name: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = idlepool(t, submitter, "owner", "set-name", "Ada's lab", "--link", "https://example.org/ada")
	if out.code != 0 || !strings.Contains(out.stdout, "name     Ada's lab") || !strings.Contains(out.stdout, "link     https://example.org/ada") {
		t.Fatalf("owner set-name: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	ownerID := strings.Fields(strings.SplitN(out.stdout, "\n", 2)[0])[1]
	// A new name keeps the link given before.
	out = idlepool(t, submitter, "owner", "set-name", "Ada Lovelace's lab")
	if out.code != 0 || !strings.Contains(out.stdout, "link     https://example.org/ada") {
		t.Fatalf("owner set-name without --link: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}

	manifest := strings.Replace(piManifest(4, 100), `name = "pi"`,
		"name = \"pi\"\ndescription = \"Monte Carlo estimate of pi,\\nfor the class\"\nlink = \"https://example.org/pi\"", 1)
	sub := idlepool(t, submitter, "submit", writeManifest(t, "pi", manifest), "--pool", url)
	if sub.code != 0 {
		t.Fatalf("submit: exit %d\n%s", sub.code, sub.stderr)
	}
	// The job's status in the pool names its owner too.
	out = idlepool(t, donor, "status", strings.TrimSpace(sub.stdout), "--pool", url)
	if want := "owner    Ada Lovelace's lab (" + ownerID + ")"; out.code != 0 || !strings.Contains(out.stdout, want) {
		t.Errorf("status: exit %d, want %q in\n%s%s", out.code, want, out.stdout, out.stderr)
	}
	out = idlepool(t, donor, "jobs", "--pool", url)
	if out.code != 0 {
		t.Fatalf("jobs: exit %d\n%s", out.code, out.stderr)
	}
	short := ownerID[:10] + "…"
	for _, want := range []string{
		"Ada Lovelace's lab (" + short + ")",
		"  Monte Carlo estimate of pi, for the class · https://example.org/pi · owner: https://example.org/ada",
	} {
		if !strings.Contains(out.stdout, want) {
			t.Errorf("jobs does not show %q:\n%s", want, out.stdout)
		}
	}

	// A profile edited by hand no longer verifies: not used, and said so.
	path := filepath.Join(submitter, "config", identity.ProfileFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the profile is not where the owner key is: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), "Ada Lovelace", "Grace Hopper", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out = idlepool(t, submitter, "owner")
	if out.code != 0 || !strings.Contains(out.stdout, "does not verify") {
		t.Errorf("owner with an edited profile: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
}

// TestOwnerEndorse: `idlepool owner endorse KEY` prints this owner's key
// and its endorsement of another device's key, which a pool checks when
// that device (a browser tab linked to the owner) registers; a key that
// is not one is refused.
func TestOwnerEndorse(t *testing.T) {
	home := t.TempDir()
	dev, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	out := idlepool(t, home, "owner", "endorse", identity.EncodePublic(dev.Public()))
	if out.code != 0 {
		t.Fatalf("owner endorse: exit %d\n%s", out.code, out.stderr)
	}
	words := strings.Fields(out.stdout)
	if len(words) != 2 {
		t.Fatalf("owner endorse printed %q, want the owner key and the endorsement", out.stdout)
	}
	ownerKey, err := identity.ParsePublic(words[0])
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(words[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := identity.Verify(ownerKey, pool.EndorsementMessage(dev.Public()), sig); err != nil {
		t.Errorf("the endorsement does not verify with the owner key printed: %v", err)
	}
	if who := idlepool(t, home, "owner", "--json"); !strings.Contains(who.stdout, identity.IDOf(ownerKey)) {
		t.Errorf("owner endorse printed the key of owner %s, but this device's owner is\n%s", identity.IDOf(ownerKey), who.stdout)
	}
	if bad := idlepool(t, home, "owner", "endorse", "not-a-key"); bad.code == 0 || !strings.Contains(bad.stderr, "is not a device key") {
		t.Errorf("owner endorse not-a-key: exit %d, stderr %q; want a refusal naming the key", bad.code, bad.stderr)
	}
}
