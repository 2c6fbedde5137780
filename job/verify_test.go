package job_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
)

func share(p float64) *float64 { return &p }

func TestVerifyTable(t *testing.T) {
	base := "name = \"v\"\nprogram = \"p.wasm\"\n[split]\nrule = \"range\"\ntasks = 3\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"
	for _, tc := range []struct {
		name, table string
		want        job.Verify
		adaptive    bool
		field       string // the field a bad table's error names
	}{
		{name: "absent", table: ""},
		{name: "adaptive with defaults", table: "[verify]\nmin_quorum = 1\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: share(job.DefaultSpotCheck), TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "always replicate", table: "[verify]\nmin_quorum = 2\nspot_check = 0.5\n",
			want: job.Verify{MinQuorum: 2, SpotCheck: share(0.5), TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "all set", table: "[verify]\nmin_quorum = 1\nspot_check = 0.2\ntrust_after = 5\ncheck_window = \"10m\"\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: share(0.2), TrustAfter: 5, CheckWindow: job.Duration{Duration: 10 * time.Minute}}},
		// Found by trying it: spot_check = 0 read back as the default 0.1.
		{name: "spot_check 0 never checks", table: "[verify]\nmin_quorum = 1\nspot_check = 0\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: share(0), TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "spot_check 0.0 never checks", table: "[verify]\nmin_quorum = 1\nspot_check = 0.0\n", adaptive: true,
			want: job.Verify{MinQuorum: 1, SpotCheck: share(0), TrustAfter: job.DefaultTrustAfter, CheckWindow: job.Duration{Duration: job.DefaultCheckWindow}}},
		{name: "negative spot_check", table: "[verify]\nmin_quorum = 1\nspot_check = -0.1\n", field: "verify.spot_check"},
		{name: "min_quorum above quorum", table: "[verify]\nmin_quorum = 3\n", field: "verify.min_quorum"},
		{name: "spot_check above 1", table: "[verify]\nmin_quorum = 1\nspot_check = 1.5\n", field: "verify.spot_check"},
		{name: "negative trust_after", table: "[verify]\nmin_quorum = 1\ntrust_after = -1\n", field: "verify.trust_after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm\x01\x00\x00\x00"), 0o600); err != nil {
				t.Fatal(err)
			}
			m, err := job.ParseManifest("v.toml", dir, []byte(base+tc.table))
			if tc.field != "" {
				var me *job.ManifestError
				if !errors.As(err, &me) || me.Field != tc.field {
					t.Fatalf("error %v, want one naming %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, m.Verify); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			if tc.table != "" {
				if got, want := m.Verify.SpotCheckShare(), *tc.want.SpotCheck; got != want {
					t.Errorf("SpotCheckShare() = %v, want %v", got, want)
				}
				// The encoding keeps the choice: rebuilt, 0 is still 0.
				j, err := job.Plan(m)
				if err != nil {
					t.Fatal(err)
				}
				r, err := job.FromCanonical(j.Canonical, func(job.Digest) string { return j.Program.Path })
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, r.Manifest.Verify); diff != "" {
					t.Errorf("rebuilt from the encoding (-want +got):\n%s", diff)
				}
			}
			if m.Adaptive() != tc.adaptive {
				t.Errorf("Adaptive() = %v, want %v", m.Adaptive(), tc.adaptive)
			}
		})
	}
}
