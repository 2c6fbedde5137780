package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
)

func TestInviteTokens(t *testing.T) {
	a, b := "http://a:7420", "http://b:7420"
	for _, tc := range []struct {
		name    string
		pools   []string
		invites []string
		want    map[string]string
		fails   bool
	}{
		{"one pool, bare token", []string{a}, []string{"tok=en"}, map[string]string{a: "tok=en"}, false},
		{"one pool, named", []string{a}, []string{a + "=tok"}, map[string]string{a: "tok"}, false},
		{"two pools, named", []string{a, b}, []string{b + "=tok"}, map[string]string{b: "tok"}, false},
		{"two pools, bare token", []string{a, b}, []string{"tok"}, nil, true},
		{"none", []string{a, b}, nil, map[string]string{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := inviteTokens(tc.pools, tc.invites)
			if (err != nil) != tc.fails {
				t.Fatalf("inviteTokens = %v, %v; want failure %v", got, err, tc.fails)
			}
			if err != nil && !errors.Is(err, errUsage) {
				t.Errorf("error %v is not a usage error", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("tokens (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDamagedKeyFile: a truncated device.key or owner.key stops join with
// a message naming the file and its size, and a hint to restore it or
// move it aside (and what a new identity means), not one about modes.
func TestDamagedKeyFile(t *testing.T) {
	for _, tc := range []struct{ file, hint string }{
		{"device.key", "move it aside (mv "},
		{"owner.key", "copy owner.key from the config directory of another of your devices"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			home := t.TempDir()
			for _, f := range []string{"device.key", "owner.key"} {
				if _, err := identity.LoadOrCreate(filepath.Join(home, "config", f)); err != nil {
					t.Fatal(err)
				}
			}
			path := filepath.Join(home, "config", tc.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b[:17], 0o600); err != nil {
				t.Fatal(err)
			}
			out := idlepool(t, home, "join", "http://127.0.0.1:9")
			wantMsg := "idlepool: " + path + " is 17 bytes; a key file holds 45 (one line of 44 base64 characters)\n"
			if out.code != 1 || !strings.HasPrefix(out.stderr, wantMsg) || !strings.Contains(out.stderr, "hint: restore it from a backup") ||
				!strings.Contains(out.stderr, tc.hint) || strings.Contains(out.stderr, "chmod") {
				t.Errorf("join with a truncated %s: exit %d, stderr:\n%s\nwant exit 1, %q and a hint to restore it (%q), not chmod",
					tc.file, out.code, out.stderr, wantMsg, tc.hint)
			}
		})
	}
}
